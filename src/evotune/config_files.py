"""Config values from files and the command line, before any dataclass checks them: a YAML file, `--set
key=value` overrides (parsed as YAML), and local paths made absolute so config.yaml means the same files from any
directory. Shared by every command's config (train, sft, grpo)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

# Keys that may name a local file or directory (or a hub id / built-in name, left as written).
PATH_KEYS = ("model", "adapter", "dataset", "eval_dataset")


def absolutize_paths(config: Any) -> None:
    """Rewrite each PATH_KEYS value that names an existing local path relative to the working directory as an
    absolute path, in place: config.yaml then means the same files from any directory (resume, eval, compare),
    and a PEFT adapter saved from the run records its base model's absolute path. Hub ids, aliases and
    absolute paths are left as they are."""
    for key in PATH_KEYS:
        value = getattr(config, key, None)  # not every command's config has every key (sft has no adapter)
        if isinstance(value, str) and value and not Path(value).is_absolute() and Path(value).exists():
            setattr(config, key, str(Path(value).resolve()))


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`--set key=value` pairs as a dict, each value parsed as YAML (`--set sigma=2e-3` gives a float)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair!r} has no `=`; write --set key=value, e.g. --set sigma=2e-3.")
        key, text = pair.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {pair!r}: the value is not valid YAML ({exc}).") from exc
    return out


def read_config_values(path: str | Path | None, overrides: list[str] | None = None,
                       base: dict[str, Any] | None = None,
                       missing_hint: str = "pass a YAML file path, or only --set keys") -> tuple[dict[str, Any], str]:
    """base <- YAML file <- --set overrides, as raw values, and the name of their source (for errors).

    Shared by every command's config (train, sft, grpo); each then validates with its own dataclass.
    """
    values = dict(base or {})
    source = "config"
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist; {missing_hint}.")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path} must hold a mapping of keys to values, not {type(loaded).__name__}.")
        values.update(loaded)
        source = str(path)
    values.update(parse_overrides(overrides or []))
    return values, source
