"""Claims of the run-to-run stability study and the drift study (retention, KL, the anchor)."""

from __future__ import annotations

from collections.abc import Callable

from bench.claims._common import interval_text, load, pct, premise, spread_row


def stability_arithmetic() -> str:
    spread = load("stability/stability_eval_budget_arithmetic.json")["spread"]["accuracy"]
    es, grpo = spread["es"]["48"], spread["grpo"]["48"]
    return (f"ES {es['mean']:.1f}% with std {es['std']:.1f} points, GRPO {grpo['mean']:.1f}% with std "
            f"{grpo['std']:.1f} (5 seeds each, 30 minutes of training at one CPU thread, n = 512, 48 tokens)")


def stability_budget() -> str:
    method = load("stability/stability_budget_arithmetic/compare.json")["methods"][0]
    values = [100 * value for value in method["final_per_seed"]]
    mean = sum(values) / len(values)
    std = (sum((value - mean) ** 2 for value in values) / (len(values) - 1)) ** 0.5
    return f"{mean:.1f}% with std {std:.1f} points ({len(values)} seeds, same budget and n)"


def _stability_budget_runs() -> tuple[list[float], list[float], dict, dict]:
    """ES's final accuracy per seed trained at 48 tokens and at 10 (both read at 48), and each setting's spread."""
    method = load("stability/stability_budget_arithmetic/compare.json")["methods"][0]
    spread = load("stability/stability_eval_budget_arithmetic.json")["spread"]["accuracy"]
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
    premise(sorted(big) == sorted(sorted(range(len(at_10)), key=lambda seed: at_10[seed])[:2]),
            "stability-budget-change", "the two seeds that gain most are the two that were lowest")
    rise = 100 * method["final_mean"] - spread["es"]["48"]["mean"]
    return (f"the mean rises by {rise:.0f} points: the two low seeds "
            f"gain {gains[big[0]]:.1f} and {gains[big[1]]:.1f} points, seed {middle} {gains[middle]:.1f}, seeds "
            f"{' and '.join(str(seed) for seed in sorted(small))} stay within {max(abs(gains[s]) for s in small):.1f}. "
            f"ES still spreads wider than GRPO (std {spread['grpo']['48']['std']:.1f}) and ends lower "
            f"({spread['grpo']['48']['mean']:.1f}%)")


def stability_intro() -> str:
    at_48, at_10, method, spread = _stability_budget_runs()
    es, grpo = spread["es"]["48"], spread["grpo"]["48"]
    narrower = es["std"] / (100 * method["final_std"])
    return (f"std {es['std']:.1f} against {grpo['std']:.1f} points). Trained at the evaluation's 48 tokens instead of "
            f"10, shorter than the answers it is scored on, the same five ES seeds spread {narrower:.1f} times "
            f"narrower (std {100 * method['final_std']:.1f} points) and end "
            f"{100 * method['final_mean'] - es['mean']:+.0f} points from where they ended (both tested under What it "
            "means)")


def stability_formats() -> str:
    """The forms ES's arithmetic runs drifted to (stability_formats) and how each scores by budget."""
    runs = load("stability/stability_formats_arithmetic.json")["runs"]
    budgets = {name: {budget: 100 * value["accuracy"] for budget, value in model["metrics"].items()}
               for name, model in load("stability/stability_eval_budget_arithmetic.json")["models"].items()}
    es = [budgets[f"es-seed{seed}"] for seed in range(5)]
    form = {seed: runs[f"es-seed{seed}"]["forms"] for seed in range(5)}
    right = {seed: runs[f"es-seed{seed}"]["accuracy"] for seed in range(5)}
    lost = [es[seed]["48"] - es[seed]["24"] for seed in (3, 4)]
    grpo = [runs[f"grpo-seed{seed}"]["forms"]["equation"] for seed in range(5)]
    seed1_flat = max(es[1].values()) - min(es[1].values()) < 0.5
    dominant = {name: max(run["forms"], key=run["forms"].get) for name, run in runs.items()}
    premise([dominant[f"es-seed{seed}"] for seed in range(5)] == ["equation", "answer is", "equation", "answer is",
                                                                  "answer is"],
            "stability-formats", "ES seeds 0 and 2 answer mostly in equations and seeds 1, 3 and 4 in 'The answer is'")
    premise(all(dominant[f"grpo-seed{seed}"] == "equation" for seed in range(5)), "stability-formats",
            "every GRPO seed kept the equation form")
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
    base = load("stability/stability_eval_budget_conciseness.json")["spread"]["contains_solution"]["base"]["128"]
    return f"{base['mean']:.1f}% at 128 tokens"


def stability_sources_checks() -> str:
    """How close 32 tokens score to 48 for the ES models, and how far another held-out split moved each model."""
    models = load("stability/stability_eval_budget_arithmetic.json")["models"]
    budget = max(abs(model["metrics"]["32"]["accuracy"] - model["metrics"]["48"]["accuracy"])
                 for name, model in models.items() if name.startswith("es-"))
    splits = {name: value for name, value in load("stability/stability_sources_arithmetic.json")["differences"].items()
              if name.startswith("evaluation set")}
    moved = max(abs(value["difference"]) for value in splits.values())
    holds_zero = all(value["ci95"][0] <= 0 <= value["ci95"][1] for value in splits.values())
    return (f"within {100 * budget:.1f} points of 48 for the study's ES models", f"moved at most {100 * moved:.1f} "
            f"points, {'every interval holding zero' if holds_zero else 'not every interval holding zero'}")


def stability_sources_budget() -> str:
    return stability_sources_checks()[0]


def stability_sources_split() -> str:
    return stability_sources_checks()[1]


def drift_arithmetic() -> str:
    data = load("drift/drift_arithmetic.json")
    final, equal = data["methods"], data["at_equal_target"]["methods"]
    names = {"es": "full-es", "lowrank": "lowrank-es", "grpo": "GRPO"}
    accuracy = ", ".join(f"{label} {100 * final[key]['target_accuracy']['mean']:.1f}%" for key, label in names.items())
    kl = ", ".join(f"{label} {equal[key]['retain/conciseness/kl']['mean']:.4f}" for key, label in names.items())
    # each run is read at its first evaluation at or above the level, so the accuracies there differ: say them
    there = ", ".join(f"{label} {100 * equal[key]['target_accuracy']['mean']:.1f}%" for key, label in names.items())
    return (f"after 30 minutes at one CPU thread, {accuracy} (at 24 new tokens, 2 seeds each, n = 512); KL to "
            f"the base on another task's prompts at each run's first evaluation at or above "
            f"{100 * data['at_equal_target']['level']:.1f}% accuracy (where it stood at {there}): {kl}")


def _drift(key: str, metric: str, where: str = "final") -> float:
    data = load("drift/drift_arithmetic.json")
    methods = data["methods"] if where == "final" else data["at_equal_target"]["methods"]
    return methods[key][metric]["mean"]


def drift_rescored() -> str:
    models = load("stability/stability_eval_budget_arithmetic.json")["models"]
    names = [f"{method}-seed{seed}" for method in ("es", "grpo") for seed in (0, 1)]
    at = {budget: ", ".join(f"{100 * models[name]['metrics'][budget]['accuracy']:.1f}" for name in names)
          for budget in ("48", "24")}
    return (f"the full-es and GRPO final models of seeds 0 and 1 score {at['48']}%, against {at['24']}% at 24 tokens "
            f"(the table's budget)")


def drift_keeps() -> str:
    kl = "retain/conciseness/kl"
    equal_ratio = _drift("es", kl, "equal") / _drift("grpo", kl, "equal")
    final_ratio = _drift("es", kl) / _drift("grpo", kl)
    return (f"full-es moves {pct(_drift('es', 'distance/changed_fraction'))} of the weights and reaches "
            f"{equal_ratio:.0f}x GRPO's KL on the retention prompts at the same accuracy level "
            f"({_drift('es', kl, 'equal'):.3f} vs {_drift('grpo', kl, 'equal'):.3f} on conciseness; {final_ratio:.0f}x "
            f"at the end of the runs, {_drift('es', kl):.3f} vs {_drift('grpo', kl):.3f})")


def drift_retention_scores() -> str:
    methods = load("drift/drift_arithmetic.json")["methods"]
    ifeval = {key: methods[key]["retain/ifeval/prompt_strict"] for key in ("es", "grpo")}
    overlap = ifeval["es"]["ci95"][1] >= ifeval["grpo"]["ci95"][0]
    same = len(set(ifeval["es"]["per_seed"])) == 1
    concise = {key: methods[key]["retain/conciseness/contains_solution"]["mean"] for key in methods}
    lowest = min(concise, key=concise.get)
    others = [value for key, value in concise.items() if key != lowest]
    return (f"on IFEval full-es ended at {pct(ifeval['es']['mean'])}"
            f"{' in both seeds' if same else ''} and GRPO at {pct(ifeval['grpo']['mean'])}, "
            f"{'but the two intervals overlap' if overlap else 'and the two intervals do not overlap'}; conciseness "
            f"correctness ended between {pct(min(others))} and {pct(max(others))} for every method except "
            f"{DRIFT_METHODS[lowest]} ({pct(concise[lowest])})")


def drift_lowrank() -> str:
    kl, distance = "retain/conciseness/kl", "distance/relative_l2"
    return (f"at the same 30 minutes it ended at {pct(_drift('lowrank', 'target_accuracy'))} (full-es "
            f"{pct(_drift('es', 'target_accuracy'))}) with {_drift('es', kl) / _drift('lowrank', kl):.1f}x less KL "
            f"than full-es and {pct(_drift('lowrank', distance) / _drift('es', distance))} of its distance")


def drift_lowrank_short() -> str:
    return f"{pct(_drift('lowrank', 'target_accuracy_truncated'))} at 10 tokens"


def drift_anchor_detail() -> str:
    methods = load("drift/drift_arithmetic.json")["methods"]
    free, strong, weak = methods["es"], methods["es-anchor10"], methods["es-anchor1.25"]
    kl, distance = "retain/conciseness/kl", "distance/relative_l2"
    shrink = 1 - weak[distance]["mean"] / free[distance]["mean"]
    premise(strong[distance]["mean"] < free[distance]["mean"] and strong[kl]["mean"] < free[kl]["mean"]
            and strong["target_accuracy"]["mean"] < free["target_accuracy"]["mean"] and 0 < shrink,
            "drift-anchor-detail", "the anchor at 10 cut the distance and the KL and lowered accuracy, and at 1.25 "
            "shrank the distance")
    minutes = load("drift/drift_arithmetic.json")["budget_s"] / 60
    return (f"At 10 it cut the distance to {pct(strong[distance]['mean'] / free[distance]['mean'])} and the KL "
            f"{free[kl]['mean'] / strong[kl]['mean']:.1f}x, and IFEval stayed at "
            f"{pct(strong['retain/ifeval/prompt_strict']['mean'])}, but target accuracy fell from "
            f"{pct(free['target_accuracy']['mean'])} to {pct(strong['target_accuracy']['mean'])} (its two seeds: "
            f"{', '.join(pct(v) for v in strong['target_accuracy']['per_seed'])}; full-es: "
            f"{', '.join(pct(v) for v in free['target_accuracy']['per_seed'])}). At 1.25 the distance shrank only "
            f"{pct(shrink)} in {minutes:.0f} minutes, the KL {pct(1 - weak[kl]['mean'] / free[kl]['mean'])}, and "
            "accuracy was "
            f"{pct(weak['target_accuracy']['mean'])}")


def drift_truncation() -> str:
    return (f"at training's 10 tokens GRPO's models score {pct(_drift('grpo', 'target_accuracy_truncated'))} and full "
            f"ES's {pct(_drift('es', 'target_accuracy_truncated'))}; at 24 tokens "
            f"{pct(_drift('grpo', 'target_accuracy'))} and {pct(_drift('es', 'target_accuracy'))}")


def stability_budget_gain() -> str:
    """How the stability study's final models score from 48 to 128 tokens, and which gained from 24 to 48."""
    models = load("stability/stability_eval_budget_arithmetic.json")["models"]
    late = {name: max(abs(model["metrics"][budget]["accuracy"] - model["metrics"]["48"]["accuracy"])
                       for budget in ("64", "96", "128")) for name, model in models.items()}
    gains = [100 * (model["metrics"]["48"]["accuracy"] - model["metrics"]["24"]["accuracy"])
             for model in models.values()]
    big = sorted(gain for gain in gains if gain >= 5)
    return (f"{sum(value == 0 for value in late.values())} of {len(models)} scored the same at every budget from 48 "
            f"to 128 and the others moved by at most {100 * max(late.values()):.1f} points, while {len(big)} ES runs "
            f"scored {' and '.join(f'{gain:.0f}' for gain in big)} points more at 48 than at 24")


def stability_sources() -> str:
    differences = load("stability/stability_sources_arithmetic.json")["differences"]

    def points(key):
        d = differences[key]
        return f"{-100 * d['difference']:.1f} points [{-100 * d['ci95'][1]:.1f}, {-100 * d['ci95'][0]:.1f}]"

    return (f"changing only the noise (same prompts) cost {points('noise')}; changing only the training prompts "
            f"{points('data')}; both {-100 * differences['everything']['difference']:.1f}")


def stability_averaging() -> str:
    models = load("stability/stability_averaging_arithmetic.json")["models"]
    names = ("final iterate", "average of the last 9", "average of the last 18")
    means = ", ".join(f"{100 * models[name]['mean']:.1f}" for name in names[:-1])
    return (f"std {100 * models[names[0]]['std']:.1f} points for the final iterates, "
            f"{100 * models[names[1]]['std']:.1f} averaged over the last 9, {100 * models[names[2]]['std']:.1f} over "
            f"the last 18; means {means} and "
            f"{pct(models[names[2]]['mean'])}")


DRIFT_METHODS = {"es": "full-es", "es-anchor1.25": "ES + anchor 1.25", "es-anchor10": "ES + anchor 10",
                 "lowrank": "lowrank-es", "grpo": "GRPO (LoRA)"}


def drift_table() -> str:
    """The drift study's rows at the end of the runs (appended to a table whose header precedes it): the base model
    as the runs' first evaluation found it, then each method."""
    methods = load("drift/drift_arithmetic.json")["methods"]
    first = {run["seed"]: run["curve"][0]["value"]
             for run in load("stability/stability_arithmetic/compare.json")["runs"]
             if run["method"].startswith("es") and run["seed"] in (0, 1)}
    short = next(row for row in load("eval_budget/eval_budget_arithmetic.json")["rows"] if row["max_new_tokens"] == 10)
    lines = [f"| base model | {pct(first[0])}, {pct(first[1])} ¹ | {pct(short['accuracy'])} (n = 256, another "
             f"split: `eval_budget_arithmetic.json`) | not kept ² | not kept ² | 0 | 0 |"]
    for key, label in DRIFT_METHODS.items():
        m = methods[key]
        seeds = ", ".join(f"{100 * value:.1f}" for value in m["target_accuracy"]["per_seed"])
        kl = m["retain/conciseness/kl"]
        lines.append(f"| {label} | {interval_text(m['target_accuracy'])} ({seeds}) "
                     f"| {pct(m['target_accuracy_truncated']['mean'])} "
                     f"| {interval_text(m['retain/conciseness/contains_solution'])} "
                     f"| {interval_text(m['retain/ifeval/prompt_strict'])} "
                     f"| {kl['mean']:.3f} ({kl['range'][0]:.3f}-{kl['range'][1]:.3f}) "
                     f"| {m['distance/relative_l2']['mean']:.4f}, {pct(m['distance/changed_fraction']['mean'])} |")
    return "\n" + "\n".join(lines)


def drift_equal_target() -> str:
    """The drift study at equal target accuracy: each run's first evaluation at or above the lowest method's mean."""
    equal = load("drift/drift_arithmetic.json")["at_equal_target"]
    reached = ", ".join(f"{label} {equal['methods'][key]['runs_reaching']}" for key, label in DRIFT_METHODS.items())
    lines = ["", "", f"At equal target accuracy (each run's first evaluation at or above {pct(equal['level'])}, the "
             f"lowest method's mean final accuracy; runs that reached it: {reached}):", "",
             "| method | target accuracy there | training s | conciseness correct | IFEval strict | KL, conciseness "
             "| KL, IFEval |", "|---|---|---|---|---|---|---|"]
    for key, label in DRIFT_METHODS.items():
        m = equal["methods"][key]
        lines.append(f"| {label} | {pct(m['target_accuracy']['mean'])} | {m['training_s']['mean']:,.0f} "
                     f"| {pct(m['retain/conciseness/contains_solution']['mean'])} "
                     f"| {pct(m['retain/ifeval/prompt_strict']['mean'])} | {m['retain/conciseness/kl']['mean']:.3f} "
                     f"| {m['retain/ifeval/kl']['mean']:.3f} |")
    return "\n".join(lines) + "\n\n"


ARITHMETIC_BUDGETS = (("48", "48 (untruncated)", "48 (untruncated)"), ("24", "24 (the runs' own evaluations)", "24"),
                      ("10", "10 (training's budget)", "10"))


def stability_arithmetic_table() -> str:
    """Each final model's accuracy at 48, 24 and 10 new tokens, five seeds per method, and their spread."""
    spread = load("stability/stability_eval_budget_arithmetic.json")["spread"]["accuracy"]
    methods = {"es": "full-es (`bench/configs/arithmetic_10tok.yaml`)",
               "grpo": "grpo-lora (`bench/configs/grpo_arithmetic_10tok.yaml`)"}
    lines = ["", "", "| method | new tokens | accuracy per seed (0-4) | mean | std [bootstrap 95%] | range |",
             "|---|---|---|---|---|---|"]
    for key, label in methods.items():
        for index, (budget, first, other) in enumerate(ARITHMETIC_BUDGETS):
            entry = spread[key][budget]
            per_seed, mean, std = spread_row(entry)
            name = label if index == 0 else ""
            tokens = first if key == "es" else other
            lines.append(f"| {name} | {tokens} | {per_seed}% | {mean}% | {std} points | {entry['range']:.1f} points |")
    return "\n".join(lines) + "\n\n"


CONCISENESS_BUDGETS = (("32", "32 (training's budget, as in the paper)", "32"),
                       ("128", "128 (the task's evaluation budget)", "128"), ("256", "256", "256"))


def stability_conciseness_table() -> str:
    """Each final model's reward gain over its seed's base model at 32, 128 and 256 new tokens, five seeds each."""
    spread = load("stability/stability_eval_budget_conciseness.json")["spread"]
    lines = ["", "", "| method | new tokens | reward gain over the base, per seed (0-4) | mean | std [bootstrap 95%] "
             "| contains_solution: mean, std |", "|---|---|---|---|---|---|"]
    for key, label in (("es", "ES"), ("grpo", "GRPO")):
        for index, (budget, first, other) in enumerate(CONCISENESS_BUDGETS):
            per_seed, mean, std = spread_row(spread["reward_gain"][key][budget])
            correct = spread["contains_solution"][key][budget]
            lines.append(f"| {label if index == 0 else ''} | {first if key == 'es' else other} | {per_seed} | {mean} "
                         f"| {std} | {correct['mean']:.1f}%, {correct['std']:.1f} points |")
    return "\n".join(lines) + "\n\n"


CLAIMS: dict[str, Callable[[], str]] = {
    "stability-arithmetic": stability_arithmetic,
    "stability-arithmetic-table": stability_arithmetic_table,
    "stability-conciseness-table": stability_conciseness_table,
    "stability-sources": stability_sources,
    "stability-averaging": stability_averaging,
    "stability-budget": stability_budget,
    "drift-arithmetic": drift_arithmetic,
    "drift-table": drift_table,
    "drift-equal-target": drift_equal_target,
    "drift-rescored": drift_rescored,
    "drift-keeps": drift_keeps,
    "drift-retention-scores": drift_retention_scores,
    "drift-lowrank": drift_lowrank,
    "drift-lowrank-short": drift_lowrank_short,
    "drift-anchor-detail": drift_anchor_detail,
    "drift-truncation": drift_truncation,
    "stability-budget-gain": stability_budget_gain,
    "stability-budget-seeds": stability_budget_seeds,
    "stability-budget-change": stability_budget_change,
    "stability-intro": stability_intro,
    "stability-formats": stability_formats,
    "stability-conciseness-base": stability_conciseness_base,
    "stability-sources-budget": stability_sources_budget,
    "stability-sources-split": stability_sources_split,
}
