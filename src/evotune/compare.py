"""`evotune compare RUN_DIR... --output DIR`: several runs side by side, on the budgets that matter.

Both founding papers judge ES against GRPO by held-out accuracy per sampled completion and per
wall-clock minute. Any run directory that follows the run-directory contract (config.yaml +
metrics.jsonl with `samples_seen`, `time_s` and `eval/<metric>`) can be compared, whatever
method wrote it. Runs whose configs are equal apart from the seed (and keys that cannot change the
result: logging, evaluation and checkpoint cadence, Ray placement) are seeds of one method and
share a row with a mean and a spread; runs that differ in any other key are separate rows whose
labels name the keys, unless `--label DIR=NAME` names the method. A directory counts once, however
it is spelled.

Writes DIR/compare.json, DIR/compare.md (one table and its notes) and DIR/<metric>_vs_samples.png,
DIR/<metric>_vs_time.png. Time is the cumulative training time (`time_s`), evaluation excluded.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .errors import ConfigError
from .evaluation import wilson_interval
from .run_directory import RESUMABLE_KEYS
from .tracking import dumps_strict, read_metrics

# Keys that cannot change what a run reaches, so runs that differ only in them are seeds of one method: the seed,
# the `method` name (the row's name already), and what a resume may change except the run's length (logging,
# evaluation and checkpoint cadence, where the population runs: the same rewards bit for bit).
NOT_THE_METHOD = frozenset({"seed", "method", *RESUMABLE_KEYS} - {"iterations", "max_training_seconds"})
# Config keys that may name a local file or directory: compared by what they name, however it was spelled.
PATH_KEYS = ("model", "adapter", "dataset", "eval_dataset")
# A row's label names at most this many of the keys that tell it from a same-named row (the notes name all).
LABEL_KEYS = 3
_MISSING = object()  # a key one config lacks


def method_label(config: dict) -> str:
    """A run's method: its `method` key (e.g. grpo) or ES's space/strategy."""
    if config.get("method"):
        return str(config["method"])
    return f"es {config.get('space', 'full')}/{config.get('strategy', 'openes')}"


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
        made_by = method_config(_read_config(maker / "config.yaml"), maker, seen)
        values.update({f"adapter.{key}": value for key, value in made_by.items()})
    return values


def load_run(directory: str | Path, metric: str | None, notes: list[str] | None = None) -> dict[str, Any]:
    directory = Path(directory)
    config_path, metrics_path = directory / "config.yaml", directory / "metrics.jsonl"
    if not config_path.exists() or not metrics_path.exists():
        raise ConfigError(f"{directory} is not a run directory (it needs config.yaml and metrics.jsonl); pass "
                          "the --output-dir of an `evotune train` or `evotune grpo` run.")
    config = _read_config(config_path)
    records = read_metrics(metrics_path)
    keys = {key for record in records for key in record if key.startswith("eval/")}
    metric = metric or ("eval/accuracy" if "eval/accuracy" in keys else "eval/reward")
    if metric not in keys:
        raise ConfigError(f"{directory} has no `{metric}` in metrics.jsonl (it has {sorted(keys)}); pick one with "
                          "--metric.")
    elapsed, samples, curve = 0.0, 0, []
    for record in records:  # cumulative training time and samples at every evaluation
        elapsed += record.get("time_s") or 0.0
        samples = record.get("samples_seen") or samples
        if _is_number(record.get(metric)):  # null (or NaN, from older runs): no value to compare
            curve.append({"samples": samples, "time_s": round(elapsed, 2), "value": record[metric]})
    if not curve:
        raise ConfigError(f"{metrics_path}: every `{metric}` value is null (NaN when logged), so the run has no "
                          "evaluation to compare; pick another --metric or leave this run out.")
    return {"run": str(directory), "method": method_label(config), "seed": config.get("seed"), "metric": metric,
            "num_eval": config.get("num_eval"), "curve": curve, "final": curve[-1]["value"],
            "samples_seen": samples, "train_time_s": round(elapsed, 1),
            "peak_rss_mib": max((r["peak_rss_mib"] for r in records if r.get("peak_rss_mib") is not None),
                                default=None),
            **warm_start(config, directory, notes), "method_config": method_config(config, directory)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _read_config(path: Path) -> dict[str, Any]:
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


def warm_start(config: dict, run_dir: str | Path = ".", notes: list[str] | None = None) -> dict[str, Any]:
    """The cost of the run's starting adapter when an `evotune sft` run made it (ESSA's stage 1).

    ES on an SFT adapter starts from a better model bought with labelled examples and gradient
    steps; the table shows that price next to the sampled-completion budget instead of hiding it.
    A relative `adapter` is looked up from the working directory, then from the run directory; when
    neither holds it, or its SFT run lacks metrics.jsonl, a note names the missing file.
    """
    adapter, run_dir, notes = config.get("adapter"), Path(run_dir), [] if notes is None else notes
    if not adapter:
        return {}
    found = resolve_adapter(str(adapter), run_dir)
    if found is None:
        looked = [Path(adapter)] if Path(adapter).is_absolute() else [Path(adapter).absolute(),
                                                                        (run_dir / adapter).absolute()]
        notes.append(f"{run_dir / 'config.yaml'}: its adapter `{adapter}` is missing ({' and '.join(map(str, looked))}"
                     " do not exist), so its warm-start cost (SFT steps and time) is not shown; run compare from "
                     "where the run was started, or correct `adapter` in its config.yaml.")
        return {}
    metrics_path = found.parent / "metrics.jsonl"
    if not metrics_path.exists():
        if (found.parent / "config.yaml").exists():  # an evotune run made the adapter, but its record is gone
            notes.append(f"{metrics_path} is missing, so the warm-start cost of {run_dir} (the run that made its "
                         f"adapter {found}) is not shown.")
        return {}
    records = [record for record in read_metrics(metrics_path) if "loss" in record]  # one per SFT step
    return {"warm_start_steps": len(records),
            # time_s is per step (the run-directory contract), so the warm start's time is their sum
            "warm_start_time_s": round(sum(record.get("time_s") or 0.0 for record in records), 1)}


# --- which runs are one method ------------------------------------------------------------------------


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


# --- reading the runs at equal budgets ----------------------------------------------------------------


def check_budgets(target: float | None, budget: int | None, budget_time: float | None) -> None:
    """Refuse a reading point by its flag before any run is read or any file written."""
    if target is not None and not _is_number(target):
        raise ConfigError(f"--target {target}: give the metric value to reach, a finite number (e.g. 0.15 for "
                          "accuracy), or leave --target out.")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 0):
        raise ConfigError(f"--budget {budget}: give a number of sampled completions, a whole number >= 0 (e.g. "
                          "2560), or leave --budget out to use the smallest budget any run spent.")
    if budget_time is not None and not (_is_number(budget_time) and budget_time > 0):
        raise ConfigError(f"--budget-time {budget_time}: give a positive, finite number of seconds of training "
                          "time (e.g. 600), or leave --budget-time out.")


def time_to_target(run: dict, target: float) -> dict[str, float | None]:
    """The first evaluation at or above `target`: cumulative time and samples then (None: never)."""
    for point in run["curve"]:
        if point["value"] >= target:
            return {"time_s": point["time_s"], "samples": point["samples"]}
    return {"time_s": None, "samples": None}


def value_at_budget(run: dict, budget: int) -> float | None:
    """The last evaluation made within `budget` sampled completions (None: none that early)."""
    within = [point["value"] for point in run["curve"] if point["samples"] <= budget]
    return within[-1] if within else None


def value_at_time(run: dict, seconds: float) -> float | None:
    """The last evaluation made within `seconds` of cumulative training time (None: none that early)."""
    within = [point["value"] for point in run["curve"] if point["time_s"] <= seconds]
    return within[-1] if within else None


def _readings(method: str, group: list[dict], key: str, values: list[float | None], axis: str, within: str,
              notes: list[str], spread: bool) -> dict[str, Any]:
    """The mean of each run's reading at one budget (with `spread`: also per seed and their std). A run with
    no evaluation that early makes the mean null ("-" in the table), and a note says which run and why."""
    unit = " s" if axis == "time_s" else " sampled completions"
    missing = [f"{run['run']} (first at {run['curve'][0][axis]:g}{unit})" for run, value in zip(group, values)
               if value is None]
    if missing:
        notes.append(f"`{method}` {key}: {', '.join(missing)} had no evaluation within {within}, so the method's "
                     "mean there is shown as -.")
    row: dict[str, Any] = {key: float(np.mean(values)) if not missing else None}
    if spread:
        row[f"{key}_per_seed"] = values
        row[f"{key}_std"] = float(np.std(values, ddof=1)) if not missing and len(group) > 1 else None
    return row


def summarize(runs: list[dict], target: float | None, budget: int | None = None,
              budget_time: float | None = None, notes: list[str] | None = None) -> list[dict]:
    """One row per method: final metric mean, spread over seeds, a 95% interval, budgets, memory.

    `budget` (default: the smallest budget any run spent) adds each method's mean metric at that
    many sampled completions, so runs of unequal length still meet at one equal budget; `budget_time`
    does the same at equal training time (seconds), with the per-seed values and their spread.
    """
    notes = [] if notes is None else notes
    budget = min(run["samples_seen"] for run in runs) if budget is None else budget
    rows = []
    for method in dict.fromkeys(run["method"] for run in runs):
        group = [run for run in runs if run["method"] == method]
        finals = np.array([run["final"] for run in group], dtype=float)
        row = {"method": method, "runs": len(group),
               **_readings(method, group, f"at_{budget}_samples", [value_at_budget(run, budget) for run in group],
                           "samples", f"{budget} sampled completions", notes, spread=False),
               "final_mean": float(finals.mean()),
               "final_std": float(finals.std(ddof=1)) if len(group) > 1 else 0.0,
               "samples_seen": int(np.mean([run["samples_seen"] for run in group])),
               "train_time_s": float(np.mean([run["train_time_s"] for run in group])),
               "peak_rss_mib": max((run["peak_rss_mib"] or 0) for run in group) or None}
        if budget_time is not None:
            row.update(_readings(method, group, f"at_{budget_time:g}s", [value_at_time(run, budget_time)
                                                                         for run in group],
                                 "time_s", f"{budget_time:g} s of training", notes, spread=True))
        row.update(_warm_start_row(method, group, notes))
        if group[0]["metric"].endswith("accuracy") and all(run["num_eval"] for run in group):
            total = sum(run["num_eval"] for run in group)  # pooled over seeds' held-out sets
            row["final_ci95"] = list(wilson_interval(float(sum(r["final"] * r["num_eval"] for r in group)), total))
        if target is not None:
            reached = [time_to_target(run, target) for run in group]
            times = [r["time_s"] for r in reached if r["time_s"] is not None]
            row["reached_target"] = f"{len(times)}/{len(group)}"
            row["time_to_target_s"] = float(np.mean(times)) if times else None
        rows.append(row)
    return rows


def _warm_start_row(method: str, group: list[dict], notes: list[str]) -> dict[str, Any]:
    """SFT steps and time before the ES budget, when every run of the row has them."""
    without = [run["run"] for run in group if "warm_start_time_s" not in run]
    if len(without) == len(group):
        return {}
    if without:
        notes.append(f"`{method}`: warm-start columns left out, since {', '.join(without)} have no warm-start "
                     "record (see the notes above).")
        return {}
    return {"warm_start_steps": int(np.mean([run["warm_start_steps"] for run in group])),
            "warm_start_time_s": float(np.mean([run["warm_start_time_s"] for run in group]))}


def _plot(runs: list[dict], axis_key: str, path: Path, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(run["method"] for run in runs))
    figure, axis = plt.subplots(figsize=(6.5, 4))
    for run in runs:
        color = f"C{methods.index(run['method'])}"
        xs = [point[axis_key] for point in run["curve"]]
        axis.plot(xs, [point["value"] for point in run["curve"]], marker="o", color=color, alpha=0.8,
                  label=f"{run['method']} (seed {run['seed']})")
    axis.set(xlabel=label, ylabel=f"held-out {runs[0]['metric']}", title=f"{runs[0]['metric']} vs {label}")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def compare_runs(run_dirs: Sequence[str | Path], output_dir: str | Path, metric: str | None = None,
                 target: float | None = None, budget: int | None = None, budget_time: float | None = None,
                 labels: Sequence[str] | Mapping[str, str] | None = None) -> dict[str, Any]:
    """Compare runs (see the module docstring). `labels`: `DIR=NAME` strings (or {DIR: NAME}) naming runs'
    methods, which overrides grouping by config. Every input is checked before anything is written."""
    check_budgets(target, budget, budget_time)
    notes: list[str] = []
    directories = unique_directories(run_dirs, notes)
    named = parse_labels(labels or [], directories)
    output = Path(output_dir)
    _check_output_dir(output)  # before reading: reading and plotting the runs may take a while
    runs = []
    for spelled, resolved in directories:
        runs.append({**load_run(spelled, metric, notes), "label": named.get(resolved)})
    metrics = {run["metric"] for run in runs}
    if len(metrics) > 1:
        raise ConfigError(f"the runs report different metrics ({sorted(metrics)}); choose one with --metric.")
    group_runs(runs, notes)
    summary = summarize(runs, target, budget, budget_time, notes)
    result = {"metric": runs[0]["metric"], "target": target, "methods": summary, "notes": notes, "runs": runs}
    text, markdown = dumps_strict(result, indent=2), format_markdown(summary, runs[0]["metric"], notes)
    output.mkdir(parents=True, exist_ok=True)  # every input checked and every output formed: now write
    name = runs[0]["metric"].replace("eval/", "")
    _plot(runs, "samples", output / f"{name}_vs_samples.png", "sampled completions")
    _plot(runs, "time_s", output / f"{name}_vs_time.png", "training time (s)")
    (output / "compare.json").write_text(text)  # null, never NaN: strict JSON
    (output / "compare.md").write_text(markdown + "\n")
    return result


def _check_output_dir(output: Path) -> None:
    """The nearest existing part of `output` must be a directory (compare writes several files into it)."""
    for part in (output, *output.parents):
        if part.exists():
            if not part.is_dir():
                raise ConfigError(f"--output {output}: {part} is a file; compare writes a directory (compare.json, "
                                  "compare.md and plots). Choose a directory path.")
            return


def _cell(value: Any) -> str:
    """A table cell: floats to 4 significant digits, lists of them to 3 decimals, no value as "-"."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join("-" if v is None else f"{v:.3f}" for v in value) + "]"
    return str(value)


def format_markdown(rows: list[dict], metric: str, notes: Sequence[str] = ()) -> str:
    keys = [key for key in dict.fromkeys(key for row in rows for key in row) if key != "method"]
    lines = [f"| method | {' | '.join(keys)} |", "|---" * (len(keys) + 1) + "|"]
    for row in rows:
        lines.append(f"| {row['method']} | {' | '.join(_cell(row.get(key)) for key in keys)} |")
    text = (f"{metric}; at_N_samples = mean of each seed's last evaluation within N sampled completions; final = "
            "last held-out evaluation; - = no value\n\n" + "\n".join(lines))
    return text + ("\n\nNotes:\n" + "\n".join(f"- {note}" for note in notes) if notes else "")
