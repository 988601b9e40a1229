"""End to end in a few lines: ES-train the built-in SmolLM2-135M-Instruct on addition,
then reload the result with plain transformers.

    python examples/quickstart.py

The `__main__` guard matters with `backend="vllm"` on a GPU: vLLM then starts its engine processes
with `spawn`, which re-imports this script.
"""

from transformers import AutoModelForCausalLM

from evotune import TrainConfig, Trainer


def main() -> None:
    config = TrainConfig(task="arithmetic", population_size=16, antithetic=True, sigma=2e-3, learning_rate=4e-3,
                         iterations=10, batch_size=32, max_new_tokens=10, eval_every=5)
    final_metrics = Trainer(config, "runs/example").train()
    print("held-out accuracy after training:", final_metrics["eval/accuracy"])

    model = AutoModelForCausalLM.from_pretrained("runs/example/final")  # a standard HF model directory
    print(type(model).__name__, sum(p.numel() for p in model.parameters()), "parameters")


if __name__ == "__main__":
    main()
