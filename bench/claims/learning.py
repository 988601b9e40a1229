"""Claims of the learning studies: the quickstarts, the sweeps, the evaluation budget and Countdown."""

from __future__ import annotations

import json
from collections.abc import Callable

from bench.claims._common import load, pct, seeds_text


def shipped_quickstart(data: dict) -> tuple[list[dict], dict | None]:
    """The runs of the quickstart `evotune train` ships (QUICKSTART's settings) and their summary over seeds: the
    file's only setting, or, where candidate quickstarts were measured side by side, the group that is QUICKSTART."""
    from evotune.config.train import QUICKSTART

    if "by_settings" not in data:
        return data["runs"], data["gain_over_seeds"]
    for group in data["by_settings"]:
        if all(group["settings"][key] == value for key, value in QUICKSTART.items() if key in group["settings"]):
            return [run for run in data["runs"] if run["settings"] == group["settings"]], group["gain_over_seeds"]
    raise ValueError("no setting measured in quickstart_heldout.json is the shipped QUICKSTART: measure it again")


def quickstart() -> str:
    data = load("quickstart/quickstart_heldout.json")
    runs, summary = shipped_quickstart(data)
    budget = str(data["eval_max_new_tokens"])
    after = ", ".join(f"{100 * run['accuracy'][budget]:.1f}%" for run in runs)
    intervals = ", ".join(f"[{run['gain_ci95'][0]:+.1f}, {run['gain_ci95'][1]:+.1f}]" for run in runs)
    minutes = [run["wall_time_s"] / 60 for run in runs]
    largest = max(runs[0]["gain_points_by_budget"], key=int)
    at_largest = sum(run["gain_points_by_budget"][largest] for run in runs) / len(runs)
    return (f"base {100 * data['base']['accuracy'][budget]:.1f}% -> {after} (seeds "
            f"{', '.join(str(run['seed']) for run in runs)}): a gain of {summary['mean']:.1f} points on average "
            f"(std {summary['std']:.1f}; per seed 95% intervals {intervals}), n = {data['num_prompts']} fresh "
            f"questions scored at {budget} new tokens ({at_largest:.1f} points at {largest}), each run "
            f"{min(minutes):.1f}-{max(minutes):.1f} minutes on {runs[0]['threads']} cores of an "
            f"{data['machine']['cpu']} (torch {data['machine']['torch']})")


def quickstart_candidates() -> str:
    """Each quickstart measured side by side in quickstart_heldout.json: its method, gains and wall times."""
    data = load("quickstart/quickstart_heldout.json")
    parts = []
    for group in data.get("by_settings", []):
        settings = group["settings"]
        gains = ", ".join(f"{gain:+.1f}" for gain in group["gain_points"])
        minutes = ", ".join(f"{seconds / 60:.1f}" for seconds in group["wall_time_s"])
        probes = ", ".join(f"{probe:.2f}" for probe in group["probe_s"] or [])
        method = {"full": "full-es", "lowrank": "lowrank-es"}.get(settings["space"], f"{settings['space']} ES")
        parts.append(f"{method}, {settings['population_size']} members x {settings['batch_size']} "
                     f"prompts, {settings['iterations']} iterations (seed{'s' if len(group['seeds']) > 1 else ''} "
                     f"{', '.join(str(seed) for seed in group['seeds'])}): gain {gains} points in {minutes} minutes"
                     + (f" (speed probe {probes} s)" if probes else ""))
    threads = ", ".join(sorted({str(run["threads"]) for run in data["runs"]}))
    return "; ".join(parts) + f", n = {data['num_prompts']} fresh questions, one after the other on {threads} " \
        f"cores of an {data['machine']['cpu']}" if parts else "no quickstarts were measured side by side"


def grpo_quickstart() -> str:
    """`evotune grpo` with no config, measured as the train quickstart is (bench/quickstart/run.sh, COMMAND=grpo)."""
    data = load("quickstart/grpo_quickstart_heldout.json")
    budget = str(data["eval_max_new_tokens"])
    runs = "; ".join(f"seed {run['seed']}: {100 * run['accuracy'][budget]:.1f}% ({run['gain_points']:+.1f} points "
                     f"[{run['gain_ci95'][0]:+.1f}, {run['gain_ci95'][1]:+.1f}], {run['wall_time_s'] / 60:.1f} "
                     "minutes)" for run in data["runs"])
    return (f"base {100 * data['base']['accuracy'][budget]:.1f}% -> {runs}; n = {data['num_prompts']:,} at {budget} "
            f"new tokens, {data['runs'][0]['threads']} cores of an {data['machine']['cpu']}")


def speed_reference() -> str:
    data = load("quickstart/speed_reference.json")
    measured = data["probe"]
    return (f"on an {data['machine']['cpu']} ({measured['dtype']}, {measured['threads']} threads) the probe took "
            f"{measured['probe_s']:.2f} s and the quickstart (seed {data['seed']}) {data['quickstart_s'] / 60:.1f} "
            f"minutes")


def eval_budget_arithmetic() -> str:
    """The base model's held-out accuracy at each token budget; equal neighbours share one value."""
    data = load("eval_budget/eval_budget_arithmetic.json")
    groups: list[tuple[str, list[int]]] = []
    for row in data["rows"]:
        value = pct(row["accuracy"])
        if groups and groups[-1][0] == value:
            groups[-1][1].append(row["max_new_tokens"])
        else:
            groups.append((value, [row["max_new_tokens"]]))

    def tokens(budgets: list[int]) -> str:
        return str(budgets[0]) if len(budgets) == 1 else ", ".join(map(str, budgets[:-1])) + f" and {budgets[-1]}"

    parts = [f"{value} at {tokens(budgets)}" for value, budgets in groups]
    parts[0] += " new tokens"
    return (f"{', '.join(parts[:-1])} and {parts[-1]} (base model, n = {data['num_eval']}, {data['dtype']}, "
            f"greedy)")


def countdown_small() -> str:
    data = load("countdown_small/stages_countdown_small.json")
    rows = sorted(data["rows"], key=lambda row: row["seed"])
    names = (("essa", "ESSA"), ("es", "full-es on the merged model"), ("grpo", "GRPO"))
    methods = ", ".join(f"{label} {seeds_text(row[key]['final']['value'] for row in rows)}" for key, label in names)
    return (f"SFT takes accuracy from {seeds_text(row['base']['value'] for row in rows)} to "
            f"{seeds_text(row['sft']['value'] for row in rows)} (seeds 0 / 1); from there, {methods} "
            f"(n = {data['num_eval']})")


def eval_budget_ratio() -> str:
    rows = load("eval_budget/eval_budget_arithmetic.json")["rows"]
    accuracy = {row["max_new_tokens"]: row["accuracy"] for row in rows}
    return f"{max(accuracy.values()) / accuracy[min(accuracy)]:.1f}x at {min(accuracy)} tokens"


def countdown_base_format() -> str:
    (row,) = load("learning/eval_countdown.json")["results"]
    return f"{row['accuracy']:.0%} greedy, format {row['format']:g}"


def countdown_format() -> str:
    rows = load("countdown_small/stages_countdown_small_format.json")["rows"]
    base = {f"{row['base']['value']:.0%}" for row in rows}
    sft = {f"{row['sft']['value']:.0%}" for row in rows}
    kept = all(row[method]["final"]["value"] == row["sft"]["value"]
               for row in rows for method in ("essa", "grpo", "es") if method in row)
    return (f"from {' / '.join(sorted(base))} to {' / '.join(sorted(sft))} with SFT and "
            f"{'stayed there' if kept else 'moved after it'}")


def countdown_changes() -> str:
    """How far each method moved accuracy from its SFT start, per seed: the moves beyond 5 points named."""
    rows = load("countdown_small/stages_countdown_small.json")["rows"]
    names = {"essa": "ESSA", "es": "full-es", "grpo": "GRPO"}
    beyond = [f"{label} on seed {row['seed']} ({100 * (row[key]['final']['value'] - row['sft']['value']):+.1f})"
              for row in sorted(rows, key=lambda row: row["seed"]) for key, label in names.items()
              if abs(row[key]["final"]["value"] - row["sft"]["value"]) > 0.05]
    return f"every change stays within 5 points of its start{' except ' + ', '.join(beyond) if beyond else ''}"


SWEEP_GRIDS = ("shape", "population", "sigma_lr", "antithetic", "shaping", "reward", "weights", "parameters",
               "optimizer")


def sweep_arithmetic() -> str:
    """Every point of bench/sweep_arithmetic/'s grids: its setting and final validation accuracy (seed 0)."""
    lines = ["", "", "| grid | setting | final accuracy |", "|---|---|---|"]
    start = None
    for grid in SWEEP_GRIDS:
        data = load(f"sweep_arithmetic/{grid}.json")
        for row in data["rows"]:
            start = row["start_mean"] if start is None else start
            assert row["start_mean"] == start, (grid, row)
            setting = ", ".join(f"{key} {json.dumps(row[key]) if isinstance(row[key], (dict, list)) else row[key]}"
                                for key in data["keys"])
            lines.append(f"| {grid} | `{setting}` | {pct(row['final_mean'])} |")
    lines.append(f"| start (every point) | | {pct(start)} |")
    return "\n".join(lines) + "\n\n"


def transfer_budget() -> str:
    """Where the transfer split's budget stops changing any phrasing's accuracy (bench/eval_budget/transfer_budget.py),
    and the answers still unended there."""
    data = load("eval_budget/transfer_budget.json")
    budget, largest = data["smallest_budget_accuracy_stops_changing"], max(data["budgets"])
    parts = []
    for model, entry in data["models"].items():
        accuracy = ", ".join(f"{name} {100 * phrasing['by_budget'][str(budget)]['accuracy']:.0f}%"
                             for name, phrasing in entry["phrasings"].items())
        unended = "; ".join(f"{name} {100 * share:.0f}%" for name, share in data["not_ended_there"][model].items())
        ended = (f" (ended within {budget}: {unended}; every other phrasing {100 * data['ended_share']:.0f}% or more)"
                 if unended else "")
        parts.append(f"{model} at {budget}: {accuracy}{ended}")
    return (f"from {budget} new tokens on, every phrasing scores what it scores at {largest} ({data['per_group']} "
            f"questions per group, one greedy generation re-read at {', '.join(str(b) for b in data['budgets'])} "
            f"tokens on an {data['machine']['cpu']}; " + "; ".join(parts) + ")")


def _score(run: dict, budget: str) -> str:
    """A run's template accuracy and its paired gain with the interval."""
    low, high = run["gain_ci95"]
    return f"{pct(run['accuracy'][budget])} ({run['gain_points']:+.1f} [{low:+.1f}, {high:+.1f}])"


def _transfer_score(run: dict, scored: str) -> str:
    transfer = run["transfer"]
    low, high = transfer["gain_ci95"]
    return f"{pct(transfer['accuracy'][scored])} ({transfer['gain_points']:+.1f} [{low:+.1f}, {high:+.1f}])"


def _transfer_header(data: dict) -> tuple[list[str], str, str, list[str]]:
    split, budget = data["transfer_split"], str(data["eval_max_new_tokens"])
    scored, groups = str(split["scored_budget"]), list(split["groups"])
    head = [f"template, {budget} new tokens (n = {data['num_prompts']})",
            f"asked in ways never trained on, {scored} new tokens (n = {sum(split['groups'].values())})",
            *groups]
    return head, budget, scored, groups


def _base_row(data: dict, cells: list[str], budget: str, scored: str, groups: list[str], trailing: int) -> str:
    """The base model's row: `cells` first, then its template, transfer and per-group accuracy, then empty cells."""
    base = data["base"]
    scores = [pct(base["accuracy"][budget]), pct(base["transfer"]["accuracy"][scored]),
              *(pct(base["transfer"]["by_group"][name]) for name in groups)]
    return "| " + " | ".join([*cells, *scores, *[""] * trailing]) + " |"


def quickstart_table() -> str:
    """The quickstart's seeds, template and transfer side by side, one row each (README's Quickstart)."""
    data = load("quickstart/quickstart_transfer_heldout.json")
    head, budget, scored, groups = _transfer_header(data)
    lines = ["", "", "| | " + " | ".join(head) + " | minutes |", "|---" * (len(head) + 2) + "|",
             _base_row(data, ["base"], budget, scored, groups, 1)]
    for run in data["runs"]:
        lines.append(f"| seed {run['seed']} | {_score(run, budget)} | {_transfer_score(run, scored)} | "
                     + " | ".join(pct(run["transfer"]["by_group"][name]) for name in groups)
                     + f" | {run['wall_time_s'] / 60:.1f} |")
    runs = data["runs"]
    lines += ["", f"Accuracy (paired gain over the base in points [95% interval]); {runs[0]['settings']['dtype']}, "
              f"{runs[0]['threads']} cores of an {data['machine']['cpu']}; by group, the share right."]
    return "\n".join(lines) + "\n"


def transfer_experiments_table() -> str:
    """Each transfer experiment's runs at one CPU-second budget: template and transfer side by side, per seed, with
    the iterations the budget bought (bench/transfer/experiments.sh)."""
    from bench.transfer.variants import LABELS, result_files, variant

    files = result_files()
    if not files:
        return "not run yet (`BUDGET=SECONDS bash bench/transfer/experiments.sh` writes the table's file)"
    head, budget, scored, groups = _transfer_header(files[0])
    lines = ["", "", "| variant | seed | iterations | " + " | ".join(head) + " |", "|---" * (len(head) + 3) + "|"]
    for data in files:
        label = "the base model" + (" (on GRPO's draw)" if data is not files[0] else "")
        lines.append(_base_row(data, [label, "", ""], budget, scored, groups, 0))
        for run in sorted(data["runs"], key=lambda run: (list(LABELS).index(variant(run["run"])), run["seed"])):
            lines.append(f"| {LABELS[variant(run['run'])]} | {run['seed']} | {run['iterations_done']} | "
                         f"{_score(run, budget)} | {_transfer_score(run, scored)} | "
                         + " | ".join(pct(run["transfer"]["by_group"][name]) for name in groups) + " |")
    machine = files[0]["machine"]
    budget_s = files[0]["runs"][0]["settings"].get("max_training_seconds")
    grpo = (" GRPO's runs are scored on their own draw of held-out questions (those its training never saw), with "
            "the same transfer split." if len(files) > 1 else "")
    lines += ["", f"Every run trained for {budget_s:g} CPU seconds (`training_clock: cpu`) on {machine['cpu']}, "
              f"{files[0]['runs'][0]['threads']} threads; accuracy (paired gain over the base in points [95% "
              f"interval]); by group, the share right.{grpo}"]
    return "\n".join(lines) + "\n"


def _variants(files: list[dict]) -> dict[str, dict]:
    """Each transfer variant's seeds pooled: mean template and transfer gains, and its pooled transfer accuracy."""
    from bench.transfer.variants import variant

    found: dict[str, dict] = {}
    for data in files:
        scored = str(data["transfer_split"]["scored_budget"])
        for run in data["runs"]:
            entry = found.setdefault(variant(run["run"]), {"template": [], "transfer": [], "accuracy": [], "n": 0})
            entry["template"].append(run["gain_points"])
            entry["transfer"].append(run["transfer"]["gain_points"])
            entry["accuracy"].append(run["transfer"]["accuracy"][scored])
            entry["n"] += sum(data["transfer_split"]["groups"].values())
    return found


def transfer_answer() -> str:
    """The transfer study's answer in one paragraph: which variant gained most past the template, and whether any
    ES variant is separated from the quickstart there (a difference of pooled transfer accuracies whose 95% interval,
    normal approximation over the questions, holds no 0)."""
    import math
    from statistics import mean

    from bench.transfer.variants import LABELS, result_files

    files = result_files()
    if not files:
        return "not run yet (`BUDGET=SECONDS bash bench/transfer/experiments.sh`)"
    found = _variants(files)

    def accuracy(name: str) -> float:
        return mean(found[name]["accuracy"])

    def separated(name: str, other: str = "quickstart") -> bool:
        first, second = accuracy(name), accuracy(other)
        spread = math.sqrt(first * (1 - first) / found[name]["n"] + second * (1 - second) / found[other]["n"])
        return abs(first - second) > 1.96 * spread

    es = [name for name in found if name != "grpo_lora"]
    best = max(es, key=lambda name: mean(found[name]["transfer"]))
    seeds = sorted({len(entry["transfer"]) for entry in found.values()})
    better = [name for name in es if name != "quickstart" and accuracy(name) > accuracy("quickstart")
              and separated(name)]
    plural = "" if max(seeds, default=0) == 1 else "s"
    head = f"at the quickstart's CPU seconds ({'/'.join(map(str, seeds))} seed{plural} per variant), "
    gains = f"{mean(found[best]['transfer']):+.1f} points there, {mean(found[best]['template']):+.1f} in the template"
    if best == "quickstart":
        text = head + f"the quickstart itself gained most past the template of the {len(es)} ES variants: {gains}"
    else:
        text = head + (f"the ES variant that gained most past the template was {LABELS[best]}: {gains} (the "
                       f"quickstart: {mean(found['quickstart']['transfer']):+.1f} and "
                       f"{mean(found['quickstart']['template']):+.1f})")
    if "grpo_lora" in found:
        text += (f"; grpo-lora gained {mean(found['grpo_lora']['transfer']):+.1f} past the template and "
                 f"{mean(found['grpo_lora']['template']):+.1f} in it")
    if better:
        return text + "; transferring better than the quickstart, separated from it: " + \
            ", ".join(LABELS[name] for name in better)
    return text + ("; no variant transferred better than the quickstart (none above it and separated from it), so "
                   "the quickstart stays as it is")


def curves_table() -> str:
    from bench.curves.page import curves_table as table

    return table()


CLAIMS: dict[str, Callable[[], str]] = {
    "curves-table": curves_table,
    "transfer-answer": transfer_answer,
    "quickstart-table": quickstart_table,
    "transfer-experiments-table": transfer_experiments_table,
    "transfer-budget": transfer_budget,
    "quickstart": quickstart,
    "quickstart-candidates": quickstart_candidates,
    "grpo-quickstart": grpo_quickstart,
    "speed-reference": speed_reference,
    "eval-budget-arithmetic": eval_budget_arithmetic,
    "sweep-arithmetic": sweep_arithmetic,
    "countdown-small": countdown_small,
    "eval-budget-ratio": eval_budget_ratio,
    "countdown-base-format": countdown_base_format,
    "countdown-format": countdown_format,
    "countdown-changes": countdown_changes,
}
