"""Config values from files and the command line, before any dataclass checks them: a YAML file, `--set
key=value` overrides (parsed as YAML), and local paths made absolute so config.yaml means the same files from any
directory. Shared by every command's config (train, sft, grpo)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from ..files.reward_paths import resolve_reward_spec

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


# A config is a few kilobytes; anything past these is not a config (or an alias bomb) and is refused before it
# can take the memory and minutes that expanding or printing it would.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_VALUES = 100_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping (YAML would silently keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"key `{key}` is written twice (line {key_node.start_mark.line + 1}); keep one.")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _count_values(value: Any, budget: int) -> int:
    """Values in a loaded document, aliases counted once per use (as printing it would expand them), stopping
    once `budget` is spent; returns what is left of it."""
    stack = [value]
    while stack and budget > 0:
        item = stack.pop()
        budget -= 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return budget


def load_yaml_file(path: Path) -> Any:
    """The YAML document in a config file, or a one-paragraph error naming the file and what is wrong with it:
    a directory, a device or binary data, another encoding than UTF-8, invalid YAML, a key written twice, not a
    mapping, or more values than any config holds (an alias bomb)."""
    if path.is_dir():
        raise ConfigError(f"config {path} is a directory; give a YAML file (e.g. examples/arithmetic.yaml).")
    if not path.is_file():
        raise ConfigError(f"config {path} is not a regular file (a device or pipe?); give a YAML file.")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"config {path} cannot be read ({exc.strerror}).") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config {path} is over {MAX_CONFIG_BYTES >> 20} MiB; a config is a few lines of YAML. "
                          "Give the config file, not a data or model file.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        hint = " (it looks like UTF-16: save it as UTF-8)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ConfigError(f"config {path} is not UTF-8 text{hint}: byte {exc.start} cannot be decoded. Give a "
                          "YAML file saved as UTF-8.") from exc
    if "\x00" in text:
        raise ConfigError(f"config {path} holds binary data (NUL bytes); give a YAML text file.")
    loader = _UniqueKeyLoader(text)  # a SafeLoader: plain data only, as yaml.safe_load
    try:
        loaded = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    finally:
        loader.dispose()
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} must hold a mapping of keys to values, not {type(loaded).__name__}.")
    if _count_values(loaded, MAX_CONFIG_VALUES) <= 0:
        raise ConfigError(f"{path} expands to more than {MAX_CONFIG_VALUES:,} values (YAML aliases repeated "
                          "within each other?); a config holds a few dozen. Write the values out.")
    return loaded


def parse_overrides(pairs: list[str], flag: str = "--set", example: str = "sigma=2e-3") -> dict[str, Any]:
    """`--set key=value` pairs (or another flag's: `evotune eval --task-arg`) as a dict, each value parsed as YAML
    (`--set sigma=2e-3` gives a float)."""
    out, given = {}, {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"{flag} {pair!r} has no `=`; write {flag} key=value, e.g. {flag} {example}.")
        key, text = pair.split("=", 1)
        if key.strip() in given:  # the last would win silently, and the first was meant too
            raise ConfigError(f"{flag} {key.strip()} is given twice ({given[key.strip()]} and {pair}); keep the one "
                              "you mean.")
        given[key.strip()] = pair
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{flag} {pair!r}: the value is not valid YAML ({exc}).") from exc
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
        loaded = load_yaml_file(path)
        if not loaded:
            raise ConfigError(f"{path} holds no config keys; add some (`evotune keys` lists them), or pass no "
                              "config file for the quickstart's settings.")
        values.update(resolve_reward_fns_key(loaded, path.parent))
        source = str(path)
    values.update(resolve_reward_fns_key(parse_overrides(overrides or []), path.parent if path else None))
    return values, source


def resolve_reward_fns_key(values: dict[str, Any], config_dir: Path | None) -> dict[str, Any]:
    """`values` with each `reward_fns` entry that names a local module (beside the config, config_dir, or in the
    current folder) rewritten as that file's absolute path (files/reward_paths.py): config.yaml then names the file
    that scored the run, found again from any folder."""
    specs = values.get("reward_fns")
    if not isinstance(specs, list):
        return values  # absent, or not a list: the config's checks name what to write
    return {**values, "reward_fns": [resolve_reward_spec(spec, config_dir) for spec in specs]}
