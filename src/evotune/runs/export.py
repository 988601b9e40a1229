"""`evotune export`: write a plain transformers model directory.

Adapter runs (space lora / svd_lora) end with a PEFT adapter in DIR/final; export folds it
into the base weights (W + scale * B A, PEFT's merge_and_unload) so the result loads with
AutoModelForCausalLM alone. Given a plain model, export converts it (e.g. the built-in GGUF
model) into a save_pretrained directory, which is what bitsandbytes quantization loads.

Every export is written into a hidden sibling (`.NAME.partial`) and moved into place only when whole,
so a killed export never leaves a model directory with torn or missing weights.
"""

from __future__ import annotations

import errno
import sys
import warnings
from pathlib import Path

from safetensors import SafetensorError

from ..backends.models import find_adapter, load_model, torch_dtype
from ..errors import ConfigError, OutputError
from ..files.atomic import staged  # the write-beside-then-rename, shared with the GGUF cache (backends/vllm.py)
from ..files.checkpoint import CheckpointFallbackWarning, find_checkpoint, load_state
from .loading import is_checkpoint_directory, load_for_eval, require_final
from .lock import held


def export_model(model: str, output_dir: str, merge: bool = False, dtype: str = "float32",
                 overwrite: bool = False, average_last: int | None = None) -> dict:
    """Save `model` (alias, directory, .gguf, hub id, adapter, run directory or a run's checkpoint/) with
    save_pretrained; with `average_last` K, an `evotune train` run's mean averaged over its last K iterates
    (averaging.py).

    An `output_dir` that already holds files is refused unless `overwrite`: save_pretrained would
    silently replace a config.json or weights someone keeps there."""
    check_output_dir(Path(output_dir), Path(model), overwrite)
    torch_dtype(dtype)  # an unknown dtype fails now, not after loading and merging the model
    output = Path(output_dir).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    # one writer: the lock sits beside the directory, which is written whole elsewhere and renamed into place
    with held(output.parent, f".{output.name}.evotune-lock"):
        check_output_dir(Path(output_dir), Path(model), overwrite)  # again: another export may have written it
        try:
            with staged(Path(output_dir)) as staging:
                record = _export(model, staging, merge, dtype, average_last)
        except (OSError, SafetensorError) as error:  # a disk that filled (or turned read-only) mid-write
            reason = _disk_full(error)
            if reason is None:
                raise
            raise OutputError(f"export to {output_dir} stopped: the disk could not take the model ({reason}). The "
                              f"partial copy was removed and {output_dir} is as it was before; free space (or choose "
                              "another --output-dir) and run the same command again.") from None
    return {key: output_dir if value == staging else value for key, value in record.items()}  # where it now lies


DISK_ERRORS = {errno.ENOSPC: "No space left on device", errno.EROFS: "Read-only file system",
               errno.EDQUOT: "Disk quota exceeded"}


def _disk_full(error: BaseException) -> str | None:
    """The reason a write failed for want of a writable disk (safetensors says it in its message only), or None."""
    if isinstance(error, OSError) and error.errno in DISK_ERRORS:
        return DISK_ERRORS[error.errno]
    return next((reason for reason in DISK_ERRORS.values() if reason in str(error)), None)


def _export(model: str, output_dir: str, merge: bool, dtype: str, average_last: int | None) -> dict:
    if average_last is not None:
        from .averaging import average_last_iterates

        backend, summary = average_last_iterates(Path(model), average_last)
        return {**_save_backend(backend, output_dir, merge, dtype), "model": model, "base": model, **summary}
    if is_checkpoint_directory(Path(model)):
        return _export_checkpoint(Path(model), output_dir, merge, dtype)
    require_final(Path(model), command="export")
    if (Path(model) / "final" / "config.json").exists():  # a full-parameter or low-rank run: final/ is the model
        model = str(Path(model) / "final")
    adapter = find_adapter(model)
    if adapter is not None and not merge:
        raise ConfigError(f"{model} is a LoRA adapter (it already loads with peft.PeftModel.from_pretrained); "
                          "pass --merge to write a merged model that transformers loads alone.")
    # Load and merge in fp32, then cast: merging into bf16 would round B A before the addition.
    loaded, tokenizer = _load_whole(model)
    if adapter is not None:
        loaded = loaded.merge_and_unload()
    loaded.to(torch_dtype(dtype)).save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return {"output_dir": output_dir, "model": model, "adapter": str(adapter[0]) if adapter else None,
            "base": adapter[1] if adapter else model, "dtype": dtype}


def _load_whole(model: str):
    """load_model, with weights a kill or a full disk left torn named in one line instead of a traceback."""
    try:
        return load_model(model, "float32", "cpu")
    except (SafetensorError, EOFError) as error:
        weights = sorted(str(path) for path in Path(model).glob("*.safetensors")) or [model]
        raise ConfigError(f"{', '.join(weights)} cannot be read ({error}): the weights are truncated or damaged. "
                          f"Export the run's checkpoint/ instead (evotune export {Path(model).parent}/checkpoint "
                          "...), or write final/ again with `evotune train --resume`.") from None


def _export_checkpoint(checkpoint: Path, output_dir: str, merge: bool, dtype: str) -> dict:
    """A run's checkpoint/ as a model directory: the mean rebuilt from the run's config.yaml and the checkpoint (as
    `evotune eval` does); an adapter run's mean is written as a PEFT adapter, or merged with --merge."""
    with warnings.catch_warnings(record=True) as fallbacks:  # said once below, in evotune's words
        warnings.simplefilter("always", CheckpointFallbackWarning)
        used = find_checkpoint(checkpoint, consequence="export writes that iterate")
    if used is None:
        raise ConfigError(f"checkpoint {checkpoint} is damaged and no intact previous one is left; export the run's "
                          "final/ instead.")
    iteration = load_state(used)["iteration"]
    why = "; ".join(str(warning.message) for warning in fallbacks)
    print(f"evotune: export writes iteration {iteration}, from {used}" + (f" ({why})" if why else ""),
          file=sys.stderr)
    # fp32 and unquantized: every bit of the fp32 mean; a merge folds it into float weights (an INT8/INT4 run's
    # adapter too: the quantized base is a storage choice of the run, not part of the exported model)
    backend = load_for_eval(str(used), "float32", "cpu", quantization="none", verified=True)  # checked just above
    return {**_save_backend(backend, output_dir, merge, dtype), "model": str(used), "base": str(checkpoint.parent),
            "iteration": iteration, **({"fallback": why} if why else {})}


def _save_backend(backend, output_dir: str, merge: bool, dtype: str) -> dict:
    """A rebuilt run's model: the whole model, its PEFT adapter, or (merge) the adapter folded into the base."""
    from peft import PeftModel

    loaded, adapter = backend.model, isinstance(backend.model, PeftModel)
    if adapter and merge:
        loaded, adapter = loaded.merge_and_unload(), False
    loaded.to(torch_dtype(dtype)).save_pretrained(output_dir)
    backend.tokenizer.save_pretrained(output_dir)
    return {"output_dir": output_dir, "adapter": str(output_dir) if adapter else None, "dtype": dtype}


def check_output_dir(output: Path, model: Path, overwrite: bool) -> None:
    """Refuse a file, the exported model's own directory, or (without overwrite) a non-empty directory."""
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output-dir {output} is a file; export writes a model directory (config.json, weights, "
                          "tokenizer). Choose a directory path.")
    for part in output.parents:  # mkdir would fail on a file in the middle of the path
        if part.exists():
            if not part.is_dir():
                raise ConfigError(f"--output-dir {output}: {part} is a file; choose a directory path.")
            break
    if not output.is_dir() or not any(output.iterdir()):
        return
    if model.exists() and output.resolve() in (model.resolve(), (model / "final").resolve()):
        raise ConfigError(f"--output-dir {output} is the model being exported; choose another directory.")
    if not overwrite:
        names = sorted(entry.name for entry in output.iterdir())
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise ConfigError(f"--output-dir {output} already holds files ({shown}); export would replace them. Pass "
                          "--overwrite to replace them, or choose a new or empty directory.")
