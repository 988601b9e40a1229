"""End to end in a few lines: ES-train the built-in SmolLM2-135M-Instruct on addition with the quickstart's
settings (what `evotune train` runs without a config), then reload the result with plain transformers.

    python examples/quickstart.py

The `__main__` guard matters with `backend="vllm"` on a GPU: vLLM then starts its engine processes
with `spawn`, which re-imports this script.
"""

from transformers import AutoModelForCausalLM

from evotune import TrainConfig, Trainer
from evotune.config import QUICKSTART


def main(output_dir: str = "runs/quickstart_python", **overrides) -> Trainer:
    # QUICKSTART: lowrank-es (rank-1 members over every weight matrix) at its own defaults (`evotune keys --method
    # lowrank-es`: 64 members, antithetic, x 4 prompts, sigma 2e-3, learning rate 0.016, Rademacher noise), 15
    # iterations, answers generated whole (48 new tokens); overrides replace any of them
    config = TrainConfig(**{**QUICKSTART, **overrides})
    trainer = Trainer(config, output_dir)
    final_metrics = trainer.train()
    print("held-out accuracy after training:", final_metrics["eval/accuracy"])

    model = AutoModelForCausalLM.from_pretrained(f"{output_dir}/final")  # a standard HF model directory
    print(type(model).__name__, sum(p.numel() for p in model.parameters()), "parameters")
    return trainer


if __name__ == "__main__":
    main()
