"""Which runs are one method, for `evotune compare`: runs whose configs are equal apart from the seed (and keys
that cannot change the result) share a row; other runs are rows named by the keys that differ; `--label DIR=NAME`
names a run's method; a directory counts once however it is spelled; an adapter made by an evotune run stands for
that run's own method config, so seeds each started from their own seed's SFT adapter are one method."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ..config.files import PATH_KEYS
from ..config.methods import LEGACY_NAMES, infer_method
from ..errors import ConfigError
from .directory import RESUMABLE_KEYS, run_command

# Keys that cannot change what a run reaches, so runs that differ only in them are seeds of one method: the seed,
# the `method` name (the row's name already), and what a resume may change except the run's length (logging,
# evaluation and checkpoint cadence, where the population runs: the same rewards bit for bit).
NOT_THE_METHOD = frozenset({"seed", "data_seed", "method", *RESUMABLE_KEYS} - {"iterations", "max_training_seconds"})
# A row's label names at most this many of the keys that tell it from a same-named row (the notes name all).
LABEL_KEYS = 3
_MISSING = object()  # a key one config lacks


def method_label(config: dict) -> str:
    """A run's method (config/methods.py): its `method` key, or, in a config.yaml written before every run recorded
    one, the method its keys make (`lora` marks a GRPO run, whose old `method` was the label `grpo`)."""
    if config.get("method") and config["method"] not in LEGACY_NAMES:
        return str(config["method"])
    command = "grpo" if config.get("method") == "grpo" else run_command(config) or "train"
    return infer_method(command, config)


def resolve_run_path(value: str, run_dir: Path) -> Path | None:
    """A path from a run's config.yaml as the run meant it: relative to the working directory where it exists
    there, else relative to the run directory (a run started from elsewhere, or a run-relative path); None when
    neither exists (a hub id, or a moved or deleted file)."""
    path = Path(value).expanduser()
    candidates = [path] if path.is_absolute() else [path, Path(run_dir) / path]
    return next((candidate.resolve() for candidate in candidates if candidate.exists()), None)


def resolve_adapter(value: str, run_dir: Path) -> Path | None:
    """The adapter directory a run's config names (looked up as resolve_run_path does), also when only the run
    that made it is left (its config.yaml or metrics.jsonl), so the warm start's record is still found."""
    found = resolve_run_path(value, run_dir)
    path = Path(value).expanduser()
    for candidate in [] if found else [path] if path.is_absolute() else [path, Path(run_dir) / path]:
        if any((candidate.parent / name).is_file() for name in ("config.yaml", "metrics.jsonl")):
            return candidate.parent.resolve() / candidate.name
    return found


def method_config(config: dict, run_dir: Path, _seen: frozenset[Path] = frozenset()) -> dict[str, Any]:
    """What makes a run the method it is: its config without NOT_THE_METHOD, local paths resolved, and an
    adapter made by an evotune run replaced by that run's own method config (`adapter.KEY`), so seeds that
    each start from their own seed's SFT adapter are one method, and adapters of other settings are not."""
    values = {key: value for key, value in config.items() if key not in NOT_THE_METHOD}
    for key in PATH_KEYS:
        if isinstance(values.get(key), str):
            found = (resolve_adapter if key == "adapter" else resolve_run_path)(values[key], run_dir)
            values[key] = str(found) if found is not None else values[key]
    adapter = values.get("adapter")
    maker = Path(adapter).parent if isinstance(adapter, str) and Path(adapter).is_absolute() else None
    seen = _seen | {Path(run_dir).resolve()}  # a run whose adapter came from itself: its path, no endless loop
    if maker is not None and maker not in seen and (maker / "config.yaml").is_file():
        del values["adapter"]
        made_by = method_config(read_config_file(maker / "config.yaml"), maker, seen)
        values.update({f"adapter.{key}": value for key, value in made_by.items()})
    return values


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path} is not valid UTF-8 YAML ({exc}); it was damaged after the run wrote it.") from exc
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path} holds a YAML {type(config).__name__}, not a mapping of config keys; it was damaged "
                          "after the run wrote it.")
    return config


def unique_directories(run_dirs: Sequence[str | Path], notes: list[str]) -> list[tuple[str, Path]]:
    """Each run directory once (as first spelled, and resolved): the same run given twice, under another
    spelling or through a symlink, is one run, not two seeds."""
    spellings: dict[Path, list[str]] = {}
    for directory in run_dirs:
        spellings.setdefault(Path(directory).resolve(), []).append(str(directory))
    for resolved, given in spellings.items():
        if len(given) > 1:
            notes.append(f"{resolved} was given {len(given)} times ({', '.join(given)}); it is one run and counts "
                         "once.")
    return [(given[0], resolved) for resolved, given in spellings.items()]


def parse_labels(labels: Sequence[str] | Mapping[str, str], directories: list[tuple[str, Path]]) -> dict[Path, str]:
    """`--label DIR=NAME` values as {resolved run directory: NAME}. DIR may itself hold `=` (sweep points do),
    so the split is the first `=` whose left side is one of the run directories given."""
    items = [f"{directory}={name}" for directory, name in labels.items()] if isinstance(labels, Mapping) else labels
    given = {resolved: spelled for spelled, resolved in directories}
    named: dict[Path, str] = {}
    for text in items:
        splits = [(Path(text[:at]).resolve(), text[at + 1:].strip()) for at, char in enumerate(text) if char == "="]
        match = next(((directory, name) for directory, name in splits if directory in given), None)
        if match is None:
            raise ConfigError(f"--label {text}: pass DIR=NAME where DIR is one of the run directories given "
                              f"({', '.join(given.values())}) and NAME the method's name in the table.")
        directory, name = match
        if not name:
            raise ConfigError(f"--label {text}: NAME after `=` is empty; give the method's name, e.g. "
                              f"--label {given[directory]}=es-sigma0.002.")
        if named.get(directory, name) != name:
            raise ConfigError(f"--label gives {given[directory]} two names ({named[directory]!r} and {name!r}); "
                              "pass one --label per run directory.")
        named[directory] = name
    return named


def differing_keys(configs: list[dict]) -> list[str]:
    """Keys whose values are not the same in every config (a key one config lacks counts as differing)."""
    keys = list(dict.fromkeys(key for config in configs for key in config))
    return [key for key in keys if len({_canonical(config.get(key, _MISSING)) for config in configs}) > 1]


def _canonical(value: Any) -> str:
    return "<missing>" if value is _MISSING else json.dumps(value, sort_keys=True, default=str)


def _shown(values: list[Any]) -> list[str]:
    """How each row's value of one key shows in its label: local paths (resolved, so absolute) by their shortest
    tail that tells them apart, other values (a hub id too) as they are."""
    if all(isinstance(value, str) and Path(value).is_absolute() for value in values):
        distinct = set(values)
        for depth in range(1, max(len(Path(value).parts) for value in distinct) + 1):
            tails = {value: "/".join(Path(value).parts[-depth:]) for value in distinct}
            if len(set(tails.values())) == len(distinct):
                return [tails[value] for value in values]
    return ["-" if value is _MISSING else value if isinstance(value, str) else json.dumps(value, default=str)
            for value in values]


def _row_labels(name: str, configs: list[dict]) -> tuple[list[str], list[str]]:
    """Labels of rows that share the method name `name` but not their config: the name plus the values of the
    (first LABEL_KEYS) keys they differ in; and all those keys."""
    keys = differing_keys(configs)
    shown = {key: _shown([config.get(key, _MISSING) for config in configs]) for key in keys[:LABEL_KEYS]}
    more = f" +{len(keys) - LABEL_KEYS} keys" if len(keys) > LABEL_KEYS else ""
    labels = [" ".join([name, *(f"{key}={shown[key][index]}" for key in shown)]) + more
              for index in range(len(configs))]
    return labels, keys


def group_runs(runs: list[dict], notes: list[str]) -> None:
    """Name each run's row (its "method"): its --label, else its method name plus the keys that tell it from
    runs of the same name with another config. Runs equal in everything but the seed share a row."""
    _note_pooled_labels(runs, notes)
    by_config: dict[str, list[dict]] = {}
    for run in runs:
        if run.get("label") is None:
            by_config.setdefault(_canonical([run["method"], run["method_config"]]), []).append(run)
    by_name: dict[str, list[list[dict]]] = {}
    for group in by_config.values():
        by_name.setdefault(group[0]["method"], []).append(group)
    for name, groups in by_name.items():
        if len(groups) > 1:
            labels, keys = _row_labels(name, [group[0]["method_config"] for group in groups])
            for group, label in zip(groups, _unique(labels)):
                for run in group:
                    run["method"] = label
            notes.append(f"runs of `{name}` differ in {', '.join(keys)}, not only in the seed, so they are "
                         f"{len(groups)} rows; to pool runs you consider one method, name them with --label DIR=NAME.")
    for run in runs:
        run["method"] = run.get("label") or run["method"]
    _check_label_clash(runs)
    _note_repeated_seeds(runs, notes)


def _unique(labels: list[str]) -> list[str]:
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    seen: dict[str, int] = {}
    unique = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        unique.append(label if counts[label] == 1 else f"{label} #{seen[label]}")
    return unique


def _note_pooled_labels(runs: list[dict], notes: list[str]) -> None:
    """A --label over runs of different configs pools them (the user's call), and says so."""
    for name in dict.fromkeys(run["label"] for run in runs if run.get("label") is not None):
        group = [run for run in runs if run.get("label") == name]
        keys = differing_keys([{"method": run["method"], **run["method_config"]} for run in group])
        if keys:
            notes.append(f"--label `{name}` pools {len(group)} runs whose configs differ in {', '.join(keys)}, not "
                         "only in the seed (as the labels ask; without them they would be separate rows).")


def _check_label_clash(runs: list[dict]) -> None:
    """A --label NAME that is also the row name of unlabelled runs would pool them without either being asked."""
    labelled = {run["label"]: run["run"] for run in runs if run.get("label") is not None}
    for name, directory in labelled.items():
        others = [run["run"] for run in runs if run.get("label") is None and run["method"] == name]
        if others:
            raise ConfigError(f"--label {directory}={name}: `{name}` is also the row of {', '.join(others)} (named "
                              "from its config), which would pool them unasked; label those runs too (--label "
                              f"{others[0]}={name}) if they are the same method, or choose another name.")


def _note_repeated_seeds(runs: list[dict], notes: list[str]) -> None:
    for name in dict.fromkeys(run["method"] for run in runs):
        group = [run for run in runs if run["method"] == name]
        seeds = [_canonical(run["seed"]) for run in group]
        repeats = [f"{run['run']} (seed {run['seed']})" for run, seed in zip(group, seeds) if seeds.count(seed) > 1]
        if repeats:
            notes.append(f"`{name}`: {', '.join(repeats)} share a seed; runs of one config and seed repeat each "
                         "other rather than sample new seeds, so the spread and the 95% interval are too narrow.")
