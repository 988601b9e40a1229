"""Generation through vLLM (`backend: vllm`, CUDA only), with ES perturbing the engine's own weights.

Qiu et al. (arXiv 2509.24372) report ~10x faster ES iterations from moving generation to vLLM.
The engine's weights are perturbed, restored and updated in place inside its worker process
through a worker extension (`collective_rpc`): only seeds, scales and coefficients cross into the
engine. Inside, `EngineWeightsExtension` builds a FullParameterSpace over HF-named views of the
engine's (fused) tensors (vllm_weights.py), so the noise, the fp32 master copy (no drift) and
the fp32 update are exactly those of the hf backend, and checkpoints stay HF state dicts.

This is the only module that imports vllm.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Sequence

from ..errors import ConfigError
from .hf import render_prompt


def is_vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


class EngineWeightsExtension:
    """Mixed into vLLM's GPU worker (worker_extension_cls); methods are called with collective_rpc."""

    def evotune_init(self, hf_shapes: dict[str, list[int]], include: list[str] | None, exclude: list[str] | None,
                     noise_kind: str, optimizer: str, learning_rate: float, weight_decay: float) -> int:
        from ..spaces import FullParameterSpace
        from ..strategies.optimizers import make_optimizer
        from .vllm_weights import hf_views

        model = self.model_runner.model
        views = hf_views(model.named_parameters(), {name: tuple(shape) for name, shape in hf_shapes.items()})
        self.evotune_space = FullParameterSpace(None, include, exclude, noise_kind=noise_kind, named_tensors=views)
        self.evotune_optimizer = make_optimizer(optimizer, learning_rate, weight_decay)
        return self.evotune_space.num_parameters

    def evotune_apply(self, seed: int, scale: float) -> None:
        from ..strategies.base import Candidate

        self.evotune_space.apply(Candidate(seed, scale))

    def evotune_restore(self) -> None:
        self.evotune_space.restore()

    def evotune_update(self, seeds: list[int], coefficients: list[float]) -> None:
        self.evotune_space.update(seeds, coefficients, self.evotune_optimizer)

    def evotune_state(self) -> dict[str, Any]:
        return {name: tensor.cpu() for name, tensor in self.evotune_space.state_tensors().items()}

    def evotune_load(self, tensors: dict[str, Any]) -> None:
        self.evotune_space.load_state_tensors(tensors)


class VLLMBackend:
    """Greedy batched generation with vllm.LLM.

    Full-parameter ES: `EngineSpace` perturbs the engine's own weights. Adapter spaces
    (`lora_rank` set): the engine serves LoRA, the adapter's mean lives in `self.model` (a host-side
    PEFT model the space evolves, the base kept on CPU in `host_dtype`), and every generate carries
    adapters as LoRARequests (vllm_lora.py): the mean for generate(), one per candidate for
    generate_population().
    """

    def __init__(self, model: str, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.85,
                 max_model_len: int | None = None, quantization: str = "none", seed: int = 0,
                 lora_rank: int | None = None, max_loras: int = 1, host_dtype: str = "bfloat16"):
        if not is_vllm_available():
            raise ConfigError("`backend: vllm` needs vLLM on a CUDA machine: pip install vllm (or set `backend: hf`).")
        import torch
        from vllm import LLM

        if not torch.cuda.is_available():
            raise ConfigError("`backend: vllm` runs on CUDA GPUs only; on this machine set `backend: hf`.")
        from .models import load_model, resolve_model
        from .vllm_lora import engine_lora_rank, engine_quantization

        source = resolve_model(model)
        if source.gguf_file:
            raise ConfigError(f"`backend: vllm` loads HF model directories, not GGUF files; export {model!r} first "
                              "(evotune export NAME --output-dir DIR) and set `model: DIR`.")
        self.model_name = source.path
        lora = {} if lora_rank is None else {"enable_lora": True, "max_lora_rank": engine_lora_rank(lora_rank),
                                             "max_loras": max_loras, "max_cpu_loras": max_loras}
        self.llm = LLM(model=source.path, dtype=dtype, seed=seed, gpu_memory_utilization=gpu_memory_utilization,
                       max_model_len=max_model_len, quantization=engine_quantization(quantization),
                       tensor_parallel_size=1,
                       enable_prefix_caching=False,  # perturbed weights make every cached prefix stale
                       worker_extension_cls=f"{__name__}.EngineWeightsExtension", **lora)
        self.tokenizer = self.llm.get_tokenizer()
        # Adapter spaces: build_space wraps this in the PEFT adapter; only its LoRA matrices are read.
        self.model = load_model(model, host_dtype, "cpu")[0] if lora_rank is not None else None
        self._writer: Any = None

    def _sampling(self, max_new_tokens: int, do_sample: bool, temperature: float, top_p: float) -> Any:
        from vllm import SamplingParams

        return SamplingParams(max_tokens=max_new_tokens, temperature=temperature if do_sample else 0.0,
                              top_p=top_p if do_sample else 1.0)

    def _run(self, texts: list[str], params: Any, adapters: list[dict] | None) -> list[list[str]]:
        """Completions of `texts` under each adapter state dict (one list per adapter), or the bare engine."""
        if adapters is None:
            return [[output.outputs[0].text for output in self.llm.generate(texts, params, use_tqdm=False)]]
        from vllm.lora.request import LoRARequest

        from .vllm_lora import AdapterWriter, peft_config_dict

        if self._writer is None:
            self._writer = AdapterWriter(peft_config_dict(self.model))
        requests = [LoRARequest(*arguments) for arguments in self._writer.write(adapters)]
        try:  # candidate-major: every candidate sees every prompt, all in one engine batch
            outputs = self.llm.generate(texts * len(requests), params, use_tqdm=False,
                                        lora_request=[request for request in requests for _ in texts])
        finally:
            self._writer.clear()
        flat = [output.outputs[0].text for output in outputs]
        return [flat[index * len(texts):(index + 1) * len(texts)] for index in range(len(requests))]

    def generate(self, prompts: list[str | list[dict]], max_new_tokens: int, do_sample: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0) -> list[str]:
        texts = [render_prompt(self.tokenizer, prompt) for prompt in prompts]
        adapters = None
        if self.model is not None and hasattr(self.model, "peft_config"):  # the adapter's current (mean) weights
            from peft import get_peft_model_state_dict

            adapters = [get_peft_model_state_dict(self.model)]
        return self._run(texts, self._sampling(max_new_tokens, do_sample, temperature, top_p), adapters)[0]

    def generate_population(self, prompts: list[str | list[dict]], max_new_tokens: int, factors: Sequence[Any],
                            stacked: Sequence[Any]) -> list[list[str]]:
        """Greedy completions under each of P adapter candidates, like HFBackend.generate_population."""
        from .vllm_lora import population_state_dicts

        if self.model is None:
            raise ConfigError("population-batched evaluation on vLLM needs an adapter space (`space: lora` or "
                              "`svd_lora`); full-parameter ES perturbs the engine's weights instead.")
        texts = [render_prompt(self.tokenizer, prompt) for prompt in prompts]
        return self._run(texts, self._sampling(max_new_tokens, False, 1.0, 1.0),
                         population_state_dicts(factors, stacked))

    def rpc(self, method: str, *args: Any) -> list[Any]:
        return self.llm.collective_rpc(method, args=args)

    def save_pretrained(self, directory: str, tensors: dict[str, Any]) -> None:
        """The engine's mean as a plain HF model: the base loaded on the host, its weights replaced."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(self.model_name, torch_dtype="auto")
        model.load_state_dict(tensors, strict=False)
        model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)


class EngineSpace:
    """The Space contract over an engine: every call is one collective_rpc (seeds in, nothing out)."""

    def __init__(self, backend: VLLMBackend, hf_shapes: dict[str, list[int]], include: list[str] | None,
                 exclude: list[str] | None, noise_kind: str, optimizer: str, learning_rate: float,
                 weight_decay: float):
        self.backend = backend
        [self.num_parameters] = backend.rpc("evotune_init", hf_shapes, include, exclude, noise_kind, optimizer,
                                            learning_rate, weight_decay)

    def apply(self, candidate: Any) -> None:
        self.backend.rpc("evotune_apply", candidate.seed, candidate.scale)

    def restore(self) -> None:
        self.backend.rpc("evotune_restore")

    def update(self, seeds: list[int], coefficients: list[float], optimizer: Any) -> None:
        # The engine keeps its own optimizer, built from the same settings and fed the same steps.
        self.backend.rpc("evotune_update", seeds, coefficients)

    def state_tensors(self) -> dict[str, Any]:
        return self.backend.rpc("evotune_state")[0]

    def load_state_tensors(self, tensors: dict[str, Any]) -> None:
        self.backend.rpc("evotune_load", tensors)

    def replay(self, update_log: list[dict], optimizer: Any) -> None:
        for entry in update_log:
            self.update(entry["seeds"], entry["coefficients"], optimizer)
