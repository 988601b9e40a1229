"""`evotune estimate`'s command: the config resolved as the run command would resolve it, the prompt length measured
on the task, the memory free on the run's device, this machine's speed probe, and the printed table."""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any

import yaml
from transformers import AutoTokenizer

from ..backends.models import DEFAULT_MODEL, cpu_flags, cpu_model, resolve_dtype, resolve_model
from ..config.checks import resolve_device
from ..config.files import read_config_values
from ..config.grpo import GRPO_QUICKSTART, GRPORunConfig
from ..config.methods import rebase
from ..config.parts import base_for_parts
from ..config.sft import SFTConfig
from ..config.train import QUICKSTART, TrainConfig
from ..doctor import speed_probe
from ..errors import ConfigError
from ..sft import encode_example, sft_rows
from ..tasks import get_task
from .methods import METHODS
from .model import Estimate, estimate, load_coefficients, machine_key
from .shape import ModelShape, resolve_shape
from .workload import workload

DEFAULT_PROMPT_TOKENS = 64  # when the task's prompts cannot be read (a custom dataset not on disk)


def resolve_config(command: str, path: str | None, overrides: list[str], method_keys: dict[str, Any],
                   model: str | None) -> Any:
    """The config `evotune COMMAND` would run: CONFIG (or the command's quickstart, with the method's keys) <- --set,
    and --model last."""
    extra = [f"model={model}"] if model else []
    given, source = read_config_values(path, [*overrides, *extra])
    given = {**method_keys, **given} if path is None else given
    if command == "train":
        return TrainConfig.from_dict(base_for_parts(rebase({} if path else QUICKSTART, given), given, TrainConfig),
                                     source=source)
    if command == "grpo":
        return GRPORunConfig.from_dict({**rebase({} if path else GRPO_QUICKSTART, given), **given}, source=source)
    return SFTConfig.from_dict({**({} if path else {"task": "arithmetic"}), **given}, source=source)


def prompt_tokens(config: Any) -> tuple[int, str]:
    """The mean chat-templated prompt length of the task's first batch, with the model's tokenizer (the built-in's
    where the model's is not on disk), and where it came from."""
    try:
        task = get_task(config.task or "custom", seed=0, dataset=config.dataset,
                        **(getattr(config, "task_args", None) or {}))
        rows = task.train_rows[:max(1, min(getattr(config, "batch_size", 8), 32))]
    except Exception as error:  # noqa: BLE001 - any task that cannot be read here falls back to a stated length
        return DEFAULT_PROMPT_TOKENS, f"{DEFAULT_PROMPT_TOKENS} (the task's prompts could not be read: {error})"
    tokenizer, name = load_tokenizer(config.model)
    lengths = [len(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                                 return_dict=True)["input_ids"])
               if isinstance(row["prompt"], list) else len(tokenizer(row["prompt"])["input_ids"]) for row in rows]
    mean = math.ceil(sum(lengths) / len(lengths))
    return mean, f"{mean} (the mean of the task's first {len(rows)} prompts, {name}'s tokenizer)"


@functools.lru_cache(maxsize=4)  # the prompts and SFT's sequences are counted with one tokenizer: loaded once
def load_tokenizer(model: str) -> tuple[Any, str]:
    """The model's tokenizer, or the built-in's where the model's is not on disk (a hub model), and whose it is."""
    for name in (model, DEFAULT_MODEL):
        try:
            source = resolve_model(name)
            if source.gguf_file:
                return gguf_tokenizer(Path(source.path) / source.gguf_file), name
            return AutoTokenizer.from_pretrained(source.path, local_files_only=True), name
        except Exception:  # noqa: BLE001 - a hub model not on disk: the built-in's tokenizer next
            continue
    raise ConfigError(f"no tokenizer of {model} or {DEFAULT_MODEL} is on disk to count the prompts with.")


def gguf_tokenizer(path: Path) -> Any:
    """A GGUF file's tokenizer, read once and then kept as a tokenizer directory in evotune's cache
    ($XDG_CACHE_HOME/evotune, else ~/.cache/evotune), keyed by the file's size and time: reading the GGUF's
    vocabulary takes seconds (gguf's reader walks every field in Python), the saved tokenizer a tenth of one."""
    stat = path.stat()
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evotune" / "tokenizers"
    cached = root / f"{path.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    if (cached / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(cached, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    try:
        staging = cached.with_name(cached.name + f".{os.getpid()}.tmp")
        tokenizer.save_pretrained(staging)
        staging.replace(cached)  # whole or not at all: a second process may be writing the same one
    except OSError:  # a read-only home: counted from the GGUF every time, as before
        pass
    return tokenizer


SFT_BATCHES = 4  # batches read to measure SFT's padded sequence length


def sft_sequence_tokens(config: SFTConfig) -> tuple[int | None, str]:
    """SFT's tokens per sequence as it trains: each batch padded to its longest prompt + completion + EOS (sft.py's
    encoding), the mean over the data's first SFT_BATCHES batches; None where the data cannot be read."""
    try:
        rows = sft_rows(config)[0][:config.batch_size * SFT_BATCHES]
    except Exception as error:  # noqa: BLE001 - data that cannot be read here: the token budget bounds it
        return None, f"prompt + max_new_tokens (the SFT data could not be read: {error})"
    tokenizer, name = load_tokenizer(config.model)
    lengths = [len(encode_example(tokenizer, row["prompt"], row["completion"])["input_ids"]) for row in rows]
    batches = [max(lengths[start:start + config.batch_size]) for start in range(0, len(lengths), config.batch_size)]
    mean = math.ceil(sum(batches) / len(batches))
    return mean, f"{mean} (prompt + completion + EOS, padded per batch, over {len(rows)} rows; {name}'s tokenizer)"


def free_mib(device: str) -> tuple[float, str]:
    """Memory a new run can take on `device`: the GPU's free memory, or the host's MemAvailable."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free / 2**20, f"free on {device}"
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024, "available on this machine"
    raise ConfigError("cannot read /proc/meminfo for the memory available; estimate on Linux.")


def build(command: str, config: Any, shape: ModelShape | None = None, speed_ratio: float = 1.0,
          tokens: int | None = None, machine: str | None = None) -> tuple[Estimate, dict[str, Any]]:
    """The estimate of `config`'s run and what it rests on (prompt length, dtype, device, the study's machine)."""
    shape = shape or resolve_shape(config.model)
    device = resolve_device(getattr(config, "device", "cpu"))
    dtype = resolve_dtype(config.dtype, device) if config.dtype == "auto" else config.dtype
    where = f"{tokens} (given)" if tokens else None
    if tokens is None:
        tokens, where = prompt_tokens(config)
    sequence, measured = sft_sequence_tokens(config) if command == "sft" else (None, None)
    coefficients = load_coefficients()
    result = estimate(workload(command, config, shape, tokens, dtype, sequence), shape, coefficients, speed_ratio,
                      machine)
    context_length, budget = shape.max_position_embeddings, getattr(config, "max_new_tokens", 0)
    if context_length and command != "sft" and tokens + budget > context_length:  # as train's check_prompt_lengths
        result.notes.insert(0, f"does NOT run: prompts of {tokens} tokens + max_new_tokens {budget} = "
                               f"{tokens + budget} tokens, beyond the model's context of {context_length}; `evotune "
                               f"{command}` refuses it: shorten the prompts or lower max_new_tokens")
    worst = coefficients.get("worst_error") or {}
    if worst:
        result.notes.append(f"on the scaling study's own cells the fit is off by up to {worst['memory']:.0%} in memory "
                            f"and {worst['time']:.0%} in time (docs/benchmarks/scaling.md lists each)")
    shapes = coefficients.get("shapes", [])
    if len(shapes) < 3:  # per-parameter terms are told from constant ones only across model sizes
        result.notes.append(f"fitted on the scaling study's cells of {len(shapes)} model size(s) so far "
                            f"({', '.join(shapes) or 'none'}): predictions for other sizes are not checked yet")
    if command != "sft":  # the study's models never end a completion early (bench/scaling/shapes.py forces the length)
        result.notes.append(f"every completion is counted at the full max_new_tokens ({config.max_new_tokens}); a "
                            "generate stops once every answer in its batch has ended, so a task with short answers "
                            "takes less time than this")
    vocabulary = coefficients.get("vocabulary")
    if vocabulary and shape.vocab_size != vocabulary and result.seconds.get("token distributions"):
        result.notes.append(f"the time of the full next-token distributions was measured at one vocabulary "
                            f"({vocabulary:,} tokens); at this model's {shape.vocab_size:,} it is scaled, not measured")
    if getattr(config, "backend", "hf") != "hf":
        result.notes.append(f"counted for the hf backend; a {config.backend} engine's memory is its own "
                            "(gpu_memory_utilization on CUDA)")
    if device.startswith("cuda"):
        result.notes.append("time fitted on CPU cells only: no GPU time is predicted yet")
    if getattr(config, "quantization", "none") != "none":
        result.notes.append(f"the {config.quantization} base's weights are counted at their quantized bytes (no "
                            "scaling cell has measured a quantized base); its time is predicted as for an unquantized "
                            "one")
    return result, {"prompt_tokens": where, "sequence_tokens": measured, "dtype": dtype, "device": device,
                    "coefficients": coefficients}


def held_out_error(coefficients: dict[str, Any], method: str | None) -> dict[str, float] | None:
    """The worst errors of `method`'s scaling cells when a fit on the other model shapes predicted them (leave one
    shape out; bench/scaling/fit.py): how far its estimate may be off on a shape the fit never saw. None: not
    measured for it."""
    return ((coefficients.get("held_out_error") or {}).get("by_method") or {}).get(method or "")


def held_out_column(coefficients: dict[str, Any], method: str | None) -> str:
    error = held_out_error(coefficients, method)
    return f"±{error['time']:.0%}" if error else "?"


def format_estimate(result: Estimate, context: dict[str, Any], iterations: int | None,
                    method: str | None = None) -> str:
    """The terms of one run's peak and iteration, and whether it fits."""
    free, where = free_mib(context["device"])
    lines = [f"{result.method} on {result.model} ({result.parameters / 1e9:.2f}B parameters, {context['dtype']}, "
             f"{context['device']}); prompts of {context['prompt_tokens']} tokens"
             + (f"; SFT sequences of {context['sequence_tokens']} tokens" if context.get("sequence_tokens") else ""),
             "",
             f"{'memory term':30} {'MiB':>9}"]
    lines += [f"{name:30} {value:9,.0f}" for name, value in result.memory_mib.items() if round(value)]
    verdict = "fits" if result.peak_mib <= free else "does NOT fit"
    lines += [f"{'peak (predicted)':30} {result.peak_mib:9,.0f}", f"{where:30} {free:9,.0f}   -> {verdict}", ""]
    lines += [f"{'time term':30} {'s/iter':>9}"]
    lines += [f"{name:30} {'unknown' if value is None else f'{value * result.speed_ratio:.1f}':>9}"
              for name, value in result.seconds.items() if value is None or value * result.speed_ratio >= 0.05]
    per_iteration = result.seconds_per_iteration
    total = f" ({iterations} iterations: {per_iteration * iterations / 60:,.0f} min)" \
        if iterations and per_iteration is not None else ""
    lines.append(f"{'seconds per iteration':30} {seconds_text(per_iteration):>9}{total}")
    error = held_out_error(context["coefficients"], method)
    if error:
        lines.append(f"{'out of sample':30} time within ±{error['time']:.0%}, memory within ±{error['memory']:.0%}: "
                     f"the worst of {method}'s {error['cells']} scaling cells, each shape predicted by a fit on the "
                     "others")
    lines += ["", context["speed_line"], *[f"note: {note}" for note in result.notes]]
    return "\n".join(lines)


# What may shrink a run that does not fit, nearest first: (key, the values to try in turn, the methods it applies to).
# A LoRA method's base can be quantized; ES's population and prompts per candidate and GRPO's micro-batches divide.
SHRINK = (("dtype", ("bfloat16",), None), ("quantization", ("int8", "int4"), ("lora-es", "essa", "sft")),
          ("gradient_accumulation_steps", (2, 4, 8, 16), ("grpo-lora", "grpo-full")),
          ("population_size", "halve", ("full-es", "lowrank-es", "lora-es", "essa")),
          ("batch_size", "halve", ("full-es", "lowrank-es", "lora-es", "essa", "mezo", "grpo-lora", "grpo-full",
                                   "sft")))


def nearest_fits(command: str, config: Any, free: float, shape: ModelShape, tokens: int,
                 ratio: float) -> list[tuple[str, float, bool]]:
    """For a run predicted not to fit: per key of SHRINK that applies, the least change that fits (or the most it
    can change, when none does), as (setting, predicted peak MiB, fits); bfloat16 only where this machine computes
    it (resolve_dtype's auto choice), never emulated."""
    method = getattr(config, "method", None) or command
    rows = []
    for key, values, methods in SHRINK:
        if (methods and method not in methods) or not hasattr(config, key):
            continue
        if key == "dtype":
            device = resolve_device(getattr(config, "device", "cpu"))
            if resolve_dtype(config.dtype, device) != "float32" or resolve_dtype("auto", device) != "bfloat16":
                continue  # already half precision, or this machine would emulate bfloat16
        if values == "halve":
            step = 2 if getattr(config, "antithetic", False) and key == "population_size" else 1
            values, value = [], getattr(config, key) // 2
            while value >= max(step, 1):
                values.append(value - value % step)
                value //= 2
        for value in values:
            try:
                changed = type(config).from_dict({**config.to_dict(), key: value})
            except ConfigError:  # e.g. micro-batches that do not divide the completions
                continue
            peak = build(command, changed, shape, ratio, tokens)[0].peak_mib
            last = value == values[-1]
            if peak <= free or last:
                rows.append((f"{key}: {value}", peak, peak <= free))
                break
    if len(rows) > 1 and not any(fits for _, _, fits in rows):  # each alone falls short: all of them at once
        together = {setting.split(": ", 1)[0]: yaml.safe_load(setting.split(": ", 1)[1]) for setting, _, _ in rows}
        try:
            changed = type(config).from_dict({**config.to_dict(), **together})
            peak = build(command, changed, shape, ratio, tokens)[0].peak_mib
            rows.append((", ".join(setting for setting, _, _ in rows), peak, peak <= free))
        except ConfigError:
            pass
    return rows


def format_fits(rows: list[tuple[str, float, bool]], free: float) -> list[str]:
    if not rows:
        return []
    lines = ["", f"nearest settings (each alone; {free:,.0f} MiB free)", f"{'setting':36} {'peak MiB':>9} {'fits':>5}"]
    lines += [f"{setting:36} {peak:9,.0f} {'yes' if fits else 'NO':>5}" for setting, peak, fits in rows]
    if not any(fits for _, _, fits in rows):
        lines.append("none of these fits (the last row, where there is one, is all of them at once): pick a smaller "
                     "model or another method")
    return lines


def seconds_text(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"{seconds:.1f}"


def format_methods(results: list[tuple[str, Estimate]], context: dict[str, Any],
                   nearest: dict[str, list[tuple[str, float, bool]]] | None = None) -> str:
    """One line per method on one model: its peak, whether it fits, its seconds per iteration; then, for each that
    does not fit, the nearest settings that do (nearest_fits)."""
    free, where = free_mib(context["device"])
    first = results[0][1]
    lines = [f"{first.model} ({first.parameters / 1e9:.2f}B parameters, {context['dtype']}, {context['device']}; "
             f"{where}: {free:,.0f} MiB); each method as its command's quickstart runs it", "",
             f"{'method':12} {'peak MiB':>9} {'fits':>5} {'s/iter':>8} {'time ±':>7}  what an iteration is"]
    for name, result in results:
        fits = "yes" if result.peak_mib <= free else "NO"
        lines.append(f"{name:12} {result.peak_mib:9,.0f} {fits:>5} {seconds_text(result.seconds_per_iteration):>8} "
                     f"{held_out_column(context['coefficients'], name):>7}  {result.method}")
    for name, rows in (nearest or {}).items():
        found = [f"{setting} ({peak:,.0f} MiB)" for setting, peak, fit in rows if fit]
        tried = "; ".join(f"{setting} ({peak:,.0f} MiB)" for setting, peak, _ in rows)
        lines.append(f"{name}: fits with " + "; or ".join(found) if found else
                     f"{name}: fits with none of {tried}: a smaller model or another method")
    worst = (context["coefficients"].get("held_out_error") or {}).get("worst")
    if worst:
        lines += ["", f"time ±: the worst time error of the method's scaling cells when a fit on the other model "
                      f"shapes predicted them ({len(context['coefficients']['held_out_error']['by_shape'])} shapes, "
                      "leave one out): how far the seconds may be off on a shape the fit never saw"]
    lines += ["", context["speed_line"],
              *[f"note: {note}" for note in dict.fromkeys(note for _, result in results for note in result.notes)],
              "evotune estimate --method NAME (or a CONFIG) prints one method's terms."]
    return "\n".join(lines)


def this_machine() -> str:
    """This machine's type as coefficients.json names the scaling study's (estimate.model.machine_key)."""
    import torch

    flags = cpu_flags()
    return machine_key(cpu_model(), "amx_bf16" in flags, "avx512_bf16" in flags, torch.get_num_threads())


def machine_scaling(coefficients: dict[str, Any], probe_s: float | None,
                    machine: str | None = None) -> tuple[float, str | None, str]:
    """(speed ratio, the machine type whose rates apply or None for the reference type's, the line that says
    which) for this machine: a type the scaling study measured runs at its own fitted rates (times this probe's
    ratio to the type's median probe, when probed); another at the reference type's, times its probe's ratio to
    the reference's."""
    machine = machine or this_machine()
    typed = (coefficients.get("machine_types") or {}).get(machine)
    if typed:
        ratio = probe_s / typed["probe_s"] if probe_s else 1.0
        probed = (f"; this probe {probe_s:.2f} s against the type's {typed['probe_s']:.2f} s: x{ratio:.2f}"
                  if probe_s else "; without --no-speed-probe, scaled by this session's probe too")
        return ratio, machine, (f"seconds: this machine's type ({machine}) is one the scaling study measured "
                                f"({typed['cells']} cells): at its own fitted rates{probed}")
    reference = coefficients["reference_probe_s"]
    if not probe_s:
        return 1.0, None, (f"seconds: on the study's reference machine ({coefficients['reference_machine']}, speed "
                           f"probe {reference:.2f} s); without --no-speed-probe they scale to this one")
    return probe_s / reference, None, (f"seconds: this machine's type ({machine}) is not one the study measured: its "
                                       f"speed probe is {probe_s / reference:.2f}x the reference type's "
                                       f"({reference:.2f} s), and every term scales by it")


def run_estimate(config_path: str | None, command: str | None, method: str | None, model: str | None,
                 overrides: list[str], prompt_tokens_given: int | None, speed: bool, as_json: bool) -> str:
    """`evotune estimate`'s whole output: one method's terms, or one line per method when neither CONFIG nor
    --method says which."""
    if prompt_tokens_given is not None and prompt_tokens_given < 1:
        raise ConfigError(f"--prompt-tokens is {prompt_tokens_given}; give a positive number of tokens.")
    if method and config_path:
        raise ConfigError(f"--method {method} and CONFIG both say what runs; give CONFIG (with --command) or "
                          "--method, not both.")
    given_command = command
    command = command or (METHODS[method][0] if method else "train")
    if method and METHODS[method][0] != command:
        raise ConfigError(f"--method {method} runs `evotune {METHODS[method][0]}`, not --command {command}; drop "
                          "--command.")
    # every method, or with --command the methods that command runs (their --set keys are that command's)
    names = [method] if method or config_path else [name for name in METHODS
                                                     if given_command in (None, METHODS[name][0])]
    ratio, machine, line = machine_scaling(load_coefficients(), speed_probe()["probe_s"] if speed else None)
    found, tokens, fits = [], prompt_tokens_given, {}
    for name in names:
        method_command, keys = METHODS[name] if name else (command, {})
        config = resolve_config(method_command, config_path, overrides, keys, model)
        shape = resolve_shape(config.model)
        result, context = build(method_command, config, shape, speed_ratio=ratio, tokens=tokens, machine=machine)
        context["speed_line"] = line
        tokens = tokens or int(context["prompt_tokens"].split()[0])  # the task's prompts measured once
        label = name or getattr(config, "method", None) or command
        found.append((label, result, context, getattr(config, "iterations", None)))
        free = free_mib(context["device"])[0]
        if result.peak_mib > free:
            fits[label] = nearest_fits(method_command, config, free, shape, tokens, ratio)
    if as_json:
        return json.dumps([{"method": name, "model": result.model, "parameters": result.parameters,
                            "peak_mib": round(result.peak_mib),
                            "memory_mib": {key: round(value, 1) for key, value in result.memory_mib.items()},
                            "seconds_per_iteration": None if result.seconds_per_iteration is None
                            else round(result.seconds_per_iteration, 2),
                            "held_out_error": held_out_error(context["coefficients"], name),
                            "speed_ratio": round(ratio, 3), "dtype": context["dtype"], "notes": result.notes,
                            "nearest_fits": [{"setting": setting, "peak_mib": round(peak), "fits": fit}
                                             for setting, peak, fit in fits.get(name, [])]}
                           for name, result, context, _ in found], indent=2)
    if len(found) == 1:
        return "\n".join([format_estimate(found[0][1], found[0][2], found[0][3], found[0][0]),
                          *format_fits(fits.get(found[0][0], []), free_mib(found[0][2]["device"])[0])])
    return format_methods([(name, result) for name, result, _, _ in found], found[0][2], fits)
