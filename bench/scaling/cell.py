"""One cell of the scaling study (a shape x an arm), in its own guarded process: the shape's random-weight model
built (or read from the cache), the peak predicted, the arm run for ITERATIONS steps under the memory guard, and one
small result file written: peak RSS, seconds per iteration (median of the steps after the first), new tokens per
second, or "predicted not to fit" / "did not fit" with the memory asked for or reached. A cell runs the fraction of
the unit its shape's size allows (arms.time_fraction), or a smaller one where that is predicted not to fit, and says
so.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from .arms import ARMS, FRACTIONS, ITERATIONS, MAX_NEW_TOKENS, time_fraction, tokens_per_iteration, unit
from .guard import run_guarded
from .predict import BYTES, predicted_peak_mib, predicted_terms
from .shapes import SHAPES, Shape, build
from .workloads import cell_keys


def random_adapter(model_dir: Path) -> Path:
    """A rank-8 LoRA on q/k/v/o with random A and B (PEFT's init_lora_weights=False) beside the model: ESSA's
    evolution needs an adapter whose singular values are not all zero; its cost does not hang on what it learned."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from .arms import LORA

    adapter = model_dir.with_name(model_dir.name + "-adapter")
    if not (adapter / "adapter_config.json").is_file():
        import torch

        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        config = LoraConfig(r=LORA["lora_rank"], lora_alpha=LORA["lora_alpha"],
                            target_modules=LORA["lora_target_modules"], init_lora_weights=False)
        get_peft_model(model, config).save_pretrained(adapter)
    return adapter


def command_line(arm: str, model_dir: Path, dtype: str, work: Path, fraction: float, iterations: int,
                 device: str = "cpu") -> list[str]:
    """The cell's command; on a GPU wrapped by gpu_peak.py, which writes the allocator's peak to gpu_peak.json."""
    command, sizes = ARMS[arm]["command"], unit(arm, fraction)
    wrapper = [sys.executable, "-m", "bench.scaling.gpu_peak", str(work / "gpu_peak.json")] if device != "cpu" \
        else [sys.executable]
    if command in ("generate", "peer"):
        return [*wrapper, "-m", "bench.scaling.inference", command, str(model_dir), dtype,
                str(work / "timings.json"), "--members", str(sizes["members"]), "--iterations", str(iterations),
                "--device", device]
    keys = {**cell_keys(arm, fraction, iterations), "model": str(model_dir), "dtype": dtype}
    if command != "grpo":  # TRL places GRPO's model itself (accelerate: the GPU where there is one)
        keys["device"] = device
    if arm == "essa":
        keys["adapter"] = str(random_adapter(model_dir))
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(keys, sort_keys=True))
    return [*wrapper, "-m", "evotune.cli.main", command, str(config), "--output-dir", str(work / "run")]


# a train run writes its final model and a checkpoint (each a copy of the weights); one more copy of room is slack
DISK_COPIES = 3


def check_disk(shape: Shape, dtype: str, work: Path) -> None:
    """Stops before a cell whose run could fill the disk midway (its saved weights written after the timed steps, so
    the minutes spent would record nothing): the error says how much to free."""
    needed = DISK_COPIES * shape.parameters() * BYTES[dtype]
    existing = next(parent for parent in (work, *work.parents) if parent.exists())
    free = shutil.disk_usage(existing).free
    if free < needed:
        raise SystemExit(f"scaling: {shape.name} needs {needed / 2**30:.1f} GiB free under {existing} for its run's "
                         f"saved weights, and {free / 2**30:.1f} GiB are free: free some, or pass --work elsewhere")


def remove_saved_weights(work: Path) -> None:
    """The run's final model and checkpoints, once its timings are read: a cell's result is its small record, and
    every copy of a 1.5B model in float32 takes 6 GB of disk."""
    run = work / "run"
    for path in run.iterdir() if run.is_dir() else ():
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def step_seconds(arm: str, work: Path) -> list[float]:
    """Seconds of each training step (or plain-generation iteration) the cell ran."""
    if ARMS[arm]["command"] in ("generate", "peer"):
        return json.loads((work / "timings.json").read_text())["seconds"]
    lines = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [line["time_s"] for line in lines if "time_s" in line and ("reward_mean" in line or "loss" in line)]


GPU_RESERVE_MIB = 1024  # the CUDA context and the allocator's slack beside what the terms count


def gpu_limit_mib() -> float:
    """The card's memory less GPU_RESERVE_MIB, plus predict.py's host runtime (which a GPU's peak does not hold)."""
    import torch

    from .predict import RUNTIME_MIB

    return torch.cuda.get_device_properties(0).total_memory / 2**20 - GPU_RESERVE_MIB + RUNTIME_MIB


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


def fraction_to_run(arm: str, shape: Shape, dtype: str, limit_mib: float) -> float | None:
    """The fraction of the unit the cell runs: the largest its shape's size allows (time_fraction) that is predicted
    to fit; None when none is (SFT's unit is whole or nothing)."""
    largest = time_fraction(shape.parameters()) if unit(arm, 1.0) else 1.0
    candidates = [fraction for fraction in FRACTIONS if fraction <= largest] if unit(arm, 1.0) else [1.0]
    return next((fraction for fraction in candidates if predicted_peak_mib(shape, arm, dtype, fraction) <= limit_mib),
                None)


def run_cell(shape_name: str, arm: str, dtype: str, cache: Path, work: Path, limit_mib: float,
             iterations: int = ITERATIONS, device: str = "cpu") -> dict[str, Any]:
    """One cell. On a GPU (`device` cuda) `limit_mib` is the host's limit as on a CPU; the card's memory is the GPU
    screen's (predict.py's terms less the host runtime), and a CUDA out-of-memory is "did not fit" too. A unit that
    did not fit though predicted to is tried again at the next smaller fraction, and the record keeps each attempt
    that did not fit (the prediction is a fit to earlier cells, and can be short)."""
    shape = SHAPES[shape_name]
    predicted_by, predicted_terms_mib = predicted_terms(shape, arm, dtype)
    predicted = round(sum(predicted_terms_mib.values()), 1)
    record: dict[str, Any] = {"shape": shape_name, "arm": arm, "label": ARMS[arm]["label"], "dtype": dtype,
                              "limit_mib": round(limit_mib), "predicted_peak_mib": predicted,
                              "predicted_by": predicted_by, "predicted_terms_mib": predicted_terms_mib,
                              "parameters": shape.parameters(),
                              "published_parameters": shape.parameters(shape.published_vocab)}
    fraction = fraction_to_run(arm, shape, dtype, gpu_limit_mib() if device != "cpu" else limit_mib)
    if fraction is None:  # what even the smallest unit asks for: the figure that says the shape is out of reach
        smallest = FRACTIONS[-1] if unit(arm, 1.0) else 1.0
        return {**record, "status": "predicted not to fit", "smallest_unit": unit(arm, smallest),
                "predicted_peak_at_smallest_unit_mib": predicted_peak_mib(shape, arm, dtype, smallest)}
    model_dir = build(shape, dtype, cache, MAX_NEW_TOKENS)
    check_disk(shape, dtype, work)
    did_not_fit: list[dict[str, Any]] = []
    while True:
        measured = measure(shape, arm, dtype, model_dir, work, limit_mib, fraction, iterations, device)
        smaller = [candidate for candidate in FRACTIONS if candidate < fraction] if unit(arm, 1.0) else []
        if measured["status"] != "did not fit" or not smaller:
            break
        did_not_fit.append({"unit": measured["unit"], "fraction_of_unit": fraction,
                            "stopped_at_mib": measured["stopped_at_mib"],
                            "predicted_peak_at_fraction_mib": measured["predicted_peak_at_fraction_mib"]})
        fraction = smaller[0]
    if did_not_fit:
        measured["did_not_fit_at"] = did_not_fit
    if fraction < 1.0:
        largest = did_not_fit[0] if did_not_fit else None
        why = (f"{largest['unit']} did not fit: stopped at {largest['stopped_at_mib']:,.0f} MiB, over the "
               f"{limit_mib:,.0f} MiB limit" if largest else
               f"the whole unit was predicted to take {predicted:,.0f} MiB, over the {limit_mib:,.0f} MiB limit"
               if fraction < time_fraction(shape.parameters())
               else f"a shape of {shape.parameters() / 1e9:.2f}B parameters runs {fraction:g} of the unit (time)")
        measured["smaller_unit"] = f"{unit(arm, fraction)} instead of {unit(arm, 1.0)}: {why}"
    return {**record, **measured}


def measure(shape: Shape, arm: str, dtype: str, model_dir: Path, work: Path, limit_mib: float, fraction: float,
            iterations: int, device: str) -> dict[str, Any]:
    """The arm at one fraction of its unit, in its own guarded process: its peak, time and tokens, or "did not fit"."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    outcome = run_guarded(command_line(arm, model_dir, dtype, work, fraction, iterations, device), limit_mib,
                          work / "cell.log", environment, gpu=device != "cpu")
    record: dict[str, Any] = {}
    if device != "cpu":
        reported = work / "gpu_peak.json"
        record.update(gpu_name=gpu_name(), peak_gpu_mib=outcome.peak_gpu_mib,
                      **(json.loads(reported.read_text()) if reported.is_file() else {}))
    record.update(unit=unit(arm, fraction), fraction_of_unit=fraction, predicted_peak_at_fraction_mib=
                  predicted_peak_mib(shape, arm, dtype, fraction), wall_s=outcome.wall_s,
                  peak_rss_mib=outcome.peak_rss_mib, cpu_s=outcome.cpu_s, other_work_cpu_s=outcome.other_work_cpu_s)
    if outcome.stopped_at_mib is not None:
        return {**record, "status": "did not fit", "stopped_at_mib": outcome.stopped_at_mib}
    if outcome.exit_code != 0 and "out of memory" in (work / "cell.log").read_text()[-20000:].lower():
        return {**record, "status": "did not fit", "stopped_at_mib": record.get("peak_gpu_mib") or 0.0,
                "out_of_memory": "CUDA out of memory (the card's memory, not the host's)"}
    if outcome.exit_code != 0:
        tail = (work / "cell.log").read_text()[-2000:]
        raise RuntimeError(f"{shape.name} / {arm} exited with {outcome.exit_code}:\n{tail}")
    seconds = step_seconds(arm, work)
    remove_saved_weights(work)
    per_iteration = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    tokens = tokens_per_iteration(arm, fraction)
    return {**record, "status": "ran", "step_seconds": seconds, "seconds_per_iteration": round(per_iteration, 2),
            "new_tokens_per_iteration": tokens,
            "new_tokens_per_second": round(tokens / per_iteration, 2) if tokens else None}
