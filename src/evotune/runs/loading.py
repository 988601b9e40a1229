"""Loading a model to evaluate from whatever names it: an alias, a model directory, a .gguf file, a hub id, a
PEFT adapter, a run directory (its final/), or a run's checkpoint/ directory (rebuilt from the run's config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.train import load_config
from ..errors import CheckpointError, ConfigError
from ..files.checkpoint import find_checkpoint, load_checkpoint, verify_checkpoint
from .lock import describe, holder


def load_for_eval(model: str, dtype: str, device: str, quantization: str | None = None,
                  verified: bool = False) -> Any:
    """A backend for `model`; a run's checkpoint/ directory is rebuilt from the run's config and mean.

    quantization: the base's (none / int8 / int4); None: the run's own (eval_quantization). verified: `model` is a
    checkpoint the caller has just found whole (find_checkpoint), so its checksums are not read a second time."""
    from ..backends import HFBackend

    path = Path(model)
    settings = eval_quantization(model, quantization)
    if is_checkpoint_directory(path):
        return _load_checkpoint(path, dtype, device, settings, verified)
    require_final(path)
    if (path / "final" / "config.json").exists():  # a full-parameter run directory
        return HFBackend.load(str(path / "final"), dtype, device, quantization=settings)
    return HFBackend.load(model, dtype, device, quantization=settings)


def eval_quantization(model: str, requested: str | None) -> Any:
    """QuantizationSettings for evaluating `model`: its run's own (the config.yaml of a run directory, or beside
    a final/, checkpoint/ or sft adapter/) unless `requested` names another method, which then takes the
    default int4 choices. An adapter evolved on an INT4 base is evaluated on that base unless told otherwise."""
    import yaml

    from ..backends.quantized import QuantizationSettings

    path = Path(model)
    recorded = QuantizationSettings()
    in_run = path.name == "final" or (path / "adapter_config.json").exists() or is_checkpoint_directory(path)
    for run_config in (path / "config.yaml", path.parent / "config.yaml") if in_run else (path / "config.yaml",):
        if path.is_dir() and run_config.is_file():
            values = yaml.safe_load(run_config.read_text()) or {}
            recorded = QuantizationSettings(values.get("quantization", "none"), values.get("int4_type", "nf4"),
                                            bool(values.get("int4_double_quantization", False)),
                                            values.get("int4_compute_dtype"))
            break
    if requested is None or requested == recorded.method:
        return recorded
    return QuantizationSettings(requested)


def is_checkpoint_directory(path: Path) -> bool:
    """A checkpoint written by `evotune train` (or its .old sibling, when a save was interrupted)."""
    candidates = (path, path.with_name(path.name + ".old")) if path.name else (path,)
    return any((candidate / name).exists() for candidate in candidates for name in ("state.json", "manifest.json"))


def require_final(path: Path, command: str = "eval") -> None:
    """Refuse a run directory whose final/ model is missing, naming what can be used instead (`command`: the
    evotune command asking, eval or export, whose own arguments the message gives)."""
    path = Path(path)
    if not (path / "config.yaml").is_file() or (path / "config.json").exists():
        return  # not a run directory: the model loader reports what it is missing
    final = path / "final"
    if (final / "config.json").exists() or (final / "adapter_config.json").exists():
        return
    if (path / "adapter" / "adapter_config.json").exists():
        raise ConfigError(f"{path} is an `evotune sft` run directory; its model is the adapter: pass "
                          f"{path / 'adapter'}.")
    running = holder(path)
    if running is not None:
        state = f"is still training ({describe(running)}), so it has no final/ model yet"
        finish = "wait for it to end"
    else:
        state = "has an incomplete final/" if final.exists() else "has no final/ model yet"
        finish = f"finish the run with `evotune train --output-dir {path} --resume` to write final/"
    if is_checkpoint_directory(path / "checkpoint"):
        last = (f"--model {path / 'checkpoint'}" if command == "eval"
                else f"`evotune export {path / 'checkpoint'} --output-dir DIR`")
        verb = "evaluate" if command == "eval" else command
        fix = f"{verb} its last checkpoint with {last}, or {finish}"
    else:
        fix = "it has no checkpoint/ either (it stopped before its first one); run it again"
    raise ConfigError(f"{path} is an evotune run directory that {state}: {fix}.")


def _load_checkpoint(directory: Path, dtype: str, device: str, quantization: Any, verified: bool = False) -> Any:
    from ..backends import HFBackend
    from ..builders import build_space, on_hf_backend

    run_config = directory.parent / "config.yaml"
    if not run_config.exists():
        raise ConfigError(f"{directory} looks like a checkpoint but {run_config} is missing; evaluate the run's "
                          "final/ instead, or restore its config.yaml.")
    # falls back to checkpoint.old, with a warning, when damaged
    checkpoint = directory if verified else find_checkpoint(directory)
    if checkpoint is None:
        raise CheckpointError(f"checkpoint {directory} is damaged ({verify_checkpoint(directory)}) and no intact "
                              f"previous one ({directory.name}.old) exists; evaluate the run's final/ instead.")
    config = on_hf_backend(load_config(run_config))  # a vLLM run's checkpoint holds HF tensors too
    backend = HFBackend.load(config.model, dtype, device, quantization=quantization)
    space = build_space(config, backend)
    # its checksums were read once above (or by the caller, `verified`): not a second hash of every weight
    space.load_state_tensors(load_checkpoint(checkpoint, verify=False)["space_tensors"])
    return backend
