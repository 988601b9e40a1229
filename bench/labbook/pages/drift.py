"""What fine-tuning costs: retention, KL and distance from the base per method, and whether anchored weight decay
(AWD, Schweighofer et al., "Overcoming Forgetting in LLM Fine-Tuning with Evolution Strategies", arXiv 2605.30148)
buys retention, on 2-digit addition at equal training time."""

from __future__ import annotations

from itertools import combinations

from scipy.stats import norm

from bench.claims._common import load, pct
from bench.claims.stability import DRIFT_METHODS
from bench.labbook.chance import LEVEL, p_text
from bench.labbook.spec import StudyPage
from evotune.evaluation.statistics import wilson_interval

DATA = "drift/drift_arithmetic.json"
RUNS = "stability/stability_arithmetic/compare.json"  # the same runs' curves, as `evotune compare` read them
KL = "retain/conciseness/kl"
IFEVAL_KL = "retain/ifeval/kl"
TARGET = "target_accuracy"
SHORT = "target_accuracy_truncated"
RETENTION = {"retain/conciseness/contains_solution": "conciseness correctness",
             "retain/ifeval/prompt_strict": "IFEval strict"}




def questions(entry: dict) -> int:
    """How many questions (over both seeds) an accuracy pools: the count whose Wilson interval the file records."""
    low, high = entry["ci95"]
    for total in range(1, 100_000):
        successes = round(entry["mean"] * total)
        if abs(successes - entry["mean"] * total) < 1e-6:
            found = wilson_interval(successes, total)
            if abs(found[0] - low) < 1e-9 and abs(found[1] - high) < 1e-9:
                return total
    raise ValueError(f"no question count matches the interval {entry['ci95']}")


def two_proportion_p(first: dict, second: dict) -> float:
    """Two-sided p of a two-proportion z test (pooled) between two accuracies over their pooled questions."""
    n_first, n_second = questions(first), questions(second)
    pooled = (first["mean"] * n_first + second["mean"] * n_second) / (n_first + n_second)
    if pooled in (0.0, 1.0):
        return 1.0
    error = (pooled * (1 - pooled) * (1 / n_first + 1 / n_second)) ** 0.5
    return float(2 * norm.sf(abs(first["mean"] - second["mean"]) / error))


def apart(first: dict, second: dict) -> bool:
    """Whether two methods' seed ranges of a measure (KL, distance) do not overlap."""
    return first["range"][1] < second["range"][0] or second["range"][1] < first["range"][0]


def kl_order(methods: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """The methods from least to most KL on the conciseness prompts, and the neighbours whose seed ranges overlap."""
    order = sorted(methods, key=lambda key: methods[key][KL]["mean"])
    overlapping = [(low, high) for low, high in zip(order, order[1:]) if not apart(methods[low][KL], methods[high][KL])]
    return order, overlapping


def order_text(methods: dict, order: list[str], overlapping: list[tuple[str, str]]) -> str:
    listed = ", ".join(f"{DRIFT_METHODS[key]} {methods[key][KL]['mean']:.3f}" for key in order)
    if not overlapping:
        return f"{listed} (each one's two seeds apart from the next's)"
    pairs = "; ".join(f"{DRIFT_METHODS[low]} and {DRIFT_METHODS[high]}" for low, high in overlapping)
    return f"{listed} (the two seeds' ranges overlap for {pairs})"


def kl_ranking() -> str:
    """The methods ordered by their KL to the base on the retention prompts, the study's direct measure of how far
    each moved the base's behaviour, at equal target accuracy and at the end of the runs; neighbours are called
    apart only where their two seeds' ranges do not overlap, and IFEval's prompts are checked for the same order."""
    data = load(DATA)
    parts = []
    for label, methods in (("at equal target accuracy", data["at_equal_target"]["methods"]),
                           ("at the end of the runs", data["methods"])):
        methods = {key: row for key, row in methods.items() if KL in row}
        order, overlapping = kl_order(methods)
        same = order == sorted(methods, key=lambda key: methods[key][IFEVAL_KL]["mean"])
        parts.append(f"{label}, {order_text(methods, order, overlapping)}, "
                     f"{'the same order' if same else 'another order'} on IFEval's prompts")
    return f"The KL to the base on the conciseness prompts, from least to most: {'; '.join(parts)}."


def separated_pairs(methods: dict) -> tuple[int, list[str]]:
    """(how many pairwise retention tests ran, the ones that separate at LEVEL) over every pair of methods."""
    tests, found = 0, []
    for metric, name in RETENTION.items():
        for first, second in combinations([key for key in methods if metric in methods[key]], 2):
            tests += 1
            p = two_proportion_p(methods[first][metric], methods[second][metric])
            if p < LEVEL:
                high, low = sorted((first, second), key=lambda key: -methods[key][metric]["mean"])
                found.append(f"{DRIFT_METHODS[high]} {pct(methods[high][metric]['mean'])} against "
                             f"{DRIFT_METHODS[low]} {pct(methods[low][metric]['mean'])} on {name}, {p_text(p)}")
    return tests, found


def retention_tests() -> str:
    """Every pair of methods on each retention score (conciseness correctness, IFEval strict), at the end of the runs
    and at equal target accuracy, by a two-proportion test over both seeds' questions at the 5% level, uncorrected:
    the scores rest on few questions, so the page says which pairs separate, against how many chance alone gives."""
    data = load(DATA)
    parts, tests, separated = [], 0, 0
    for label, methods in (("at the end of the runs", data["methods"]),
                           ("at equal target accuracy", data["at_equal_target"]["methods"])):
        count, found = separated_pairs(methods)
        tests, separated = tests + count, separated + len(found)
        parts.append(f"{len(found) or 'none'} of {count} {label}" + (f" ({'; '.join(found)})" if found else ""))
    chance = LEVEL * tests
    verdict = "no more often than chance" if separated <= chance else "more often than chance"
    return (f"Two-proportion tests of every pair of methods on each retention score ({LEVEL:g} level, uncorrected) "
            f"separate {' and '.join(parts)}, where chance alone separates about {chance:.0f} of {tests}: the "
            f"retention scores separate the methods {verdict}.")


def lowrank_meaning() -> str:
    """Whether lowrank-es is the ES variant that moved the base least (lowest KL at the end and at equal accuracy),
    whether its target accuracy separates from full-es's and its retention scores from GRPO's (two-proportion
    tests), and how it scores at training's 10 tokens against every other method."""
    data = load(DATA)
    final, equal = data["methods"], data["at_equal_target"]["methods"]
    variants = [key for key in final if key != "grpo"]
    least = [min(variants, key=lambda key: rows[key][KL]["mean"]) for rows in (final, equal)]
    if least != ["lowrank", "lowrank"]:
        return ("lowrank-es is not the ES variant with the least KL to the base both at the end and at equal "
                f"accuracy (least: {DRIFT_METHODS[least[0]]} at the end, {DRIFT_METHODS[least[1]]} at equal accuracy).")
    lowrank, es, grpo = final["lowrank"], final["es"], final["grpo"]
    accuracy_p = two_proportion_p(lowrank[TARGET], es[TARGET])
    retention_p = min(two_proportion_p(lowrank[metric], grpo[metric]) for metric in RETENTION)
    accuracy = ("not separated from" if accuracy_p >= LEVEL else
                "above" if lowrank[TARGET]["mean"] > es[TARGET]["mean"] else "below")
    shortest = min(final, key=lambda key: final[key][SHORT]["mean"]) == "lowrank"
    return (f"Of the ES variants lowrank-es has the least KL to the base on the retention prompts, at the end "
            f"({lowrank[KL]['mean']:.3f}) and at equal accuracy ({equal['lowrank'][KL]['mean']:.3f}), with target "
            f"accuracy {accuracy} full-es's ({pct(lowrank[TARGET]['mean'])} against {pct(es[TARGET]['mean'])}, "
            f"{p_text(accuracy_p)}) and retention scores "
            f"{'not separated from' if retention_p >= LEVEL else 'separated from'} GRPO's "
            f"({'smallest ' if retention_p >= LEVEL else ''}{p_text(retention_p)}); at training's 10 tokens it "
            f"scores {pct(lowrank[SHORT]['mean'])}, {'the least' if shortest else 'not the least'} of all methods.")


def updates_per_run() -> tuple[int, int]:
    """The fewest and most updates the full-es runs of seeds 0 and 1 made: samples seen / (population x prompts)."""
    runs = [run for run in load(RUNS)["runs"] if run["method"].startswith("es") and run["seed"] in (0, 1)]
    counts = [run["curve"][-1]["samples"] // (run["method_config"]["population_size"]
                                               * run["method_config"]["batch_size"]) for run in runs]
    return min(counts), max(counts)


def anchor_effect(key: str, methods: dict) -> str:
    """One anchor strength against full-es: KL (seed ranges apart or not), target accuracy (two-proportion test)
    and retention scores (two-proportion tests)."""
    anchored, free = methods[key], methods["es"]
    accuracy_p = two_proportion_p(anchored[TARGET], free[TARGET])
    change = 100 * (anchored[TARGET]["mean"] - free[TARGET]["mean"])
    moved = [name for metric, name in RETENTION.items()
             if two_proportion_p(anchored[metric], free[metric]) < LEVEL]
    kl = (f"{'lowered' if anchored[KL]['mean'] < free[KL]['mean'] else 'raised'} the KL on the retention prompts "
          f"from {free[KL]['mean']:.3f} to {anchored[KL]['mean']:.3f} "
          f"({'seed ranges apart' if apart(anchored[KL], free[KL]) else 'seed ranges overlapping'})")
    accuracy = (f"changed target accuracy by {change:+.1f} points ({p_text(accuracy_p)}"
                f"{', within chance' if accuracy_p >= LEVEL else ''})")
    retention = ("no retention score moved beyond chance" if not moved else
                 f"{' and '.join(moved)} moved beyond chance")
    return f"`anchor_decay` {key.removeprefix('es-anchor')} {kl}, {accuracy}, {retention}"


def anchor_meaning() -> str:
    """Whether the anchor bought retention without a cost in target accuracy: each strength against full-es, and
    lowrank-es the same way for contrast; the verdict follows the tests, and the number of updates the runs made
    says how long the pull had to act."""
    methods = load(DATA)["methods"]
    anchors = sorted((key for key in methods if key.startswith("es-anchor")),
                     key=lambda key: float(key.removeprefix("es-anchor")))
    costly = [key for key in anchors if methods[key][TARGET]["mean"] < methods["es"][TARGET]["mean"]
              and two_proportion_p(methods[key][TARGET], methods["es"][TARGET]) < LEVEL]
    lowrank_free = (methods["lowrank"][KL]["mean"] < methods["es"][KL]["mean"]
                    and not (methods["lowrank"][TARGET]["mean"] < methods["es"][TARGET]["mean"]
                             and two_proportion_p(methods["lowrank"][TARGET], methods["es"][TARGET]) < LEVEL))
    verdict = ("every anchor strength lowered target accuracy beyond chance" if costly == anchors else
               "no anchor strength lowered target accuracy beyond chance" if not costly else
               f"only `anchor_decay` {', '.join(key.removeprefix('es-anchor') for key in costly)} lowered target "
               "accuracy beyond chance")
    fewest, most = updates_per_run()
    return (f"Against full-es at the end of the runs: {'; '.join(anchor_effect(key, methods) for key in anchors)}. "
            f"So here {verdict}, while lowrank-es "
            f"{'lowered the KL without a loss beyond chance' if lowrank_free else 'did not lower the KL for free'}. "
            f"The full-es runs made {fewest}-{most} updates in their budget; a 0.5% pull per update has far longer "
            "to act in longer runs.")


def truncation_meaning() -> str:
    """Which of full-es and GRPO leads at training's 10 tokens and at the 24 of the table (two-proportion tests),
    and how much of each one's accuracy at 24 tokens survives the cut to 10: the share that says whose answers fit."""
    methods = load(DATA)["methods"]
    es, grpo = methods["es"], methods["grpo"]
    parts = []
    for key, label in ((SHORT, "at training's 10 tokens"), (TARGET, "at 24 tokens")):
        p = two_proportion_p(es[key], grpo[key])
        leader = "full-es" if es[key]["mean"] > grpo[key]["mean"] else "GRPO"
        parts.append(f"{label} {leader} leads ({pct(es[key]['mean'])} full-es against {pct(grpo[key]['mean'])} "
                     f"GRPO, {p_text(p)}{', within chance' if p >= LEVEL else ''})")
    kept = {label: row[SHORT]["mean"] / row[TARGET]["mean"] for label, row in (("full-es", es), ("GRPO", grpo))}
    more = max(kept, key=kept.get)
    shares = " and ".join(f"{label} {pct(share)}" for label, share in kept.items())
    return (f"{parts[0][0].upper()}{parts[0][1:]}; {parts[1]}. Cut to 10 tokens, {shares} of their accuracy at 24 "
            f"remain: more of {more}'s right answers fit in 10 tokens.")


def rescored_change() -> str:
    """How far the re-scoring at the untruncated 48 tokens moved the drift study's full-es and GRPO models from
    their 24-token numbers: whether the table's budget cut their answers."""
    models = load("stability/stability_eval_budget_arithmetic.json")["models"]
    names = [f"{method}-seed{seed}" for method in ("es", "grpo") for seed in (0, 1)]
    changes = [100 * (models[name]["metrics"]["48"]["accuracy"] - models[name]["metrics"]["24"]["accuracy"])
               for name in names]
    return f"none moves by more than {max(abs(change) for change in changes):.1f} points"


TABLE_HEAD = ("| method (seeds 0, 1) | target accuracy (per seed) | at 10 tokens | conciseness correct | IFEval strict "
              "| KL, conciseness prompts | relative distance from base, share of weights changed |\n"
              "|---|---|---|---|---|---|---|")
PLOT = ("![Target accuracy, retention, KL and distance from the base over training time per method, and retention "
        "against target accuracy](plots/drift/drift_arithmetic.png)")

CLAIMS = {
    "drift-kl-ranking": kl_ranking,
    "drift-retention-tests": retention_tests,
    "drift-lowrank-meaning": lowrank_meaning,
    "drift-anchor-meaning": anchor_meaning,
    "drift-truncation-meaning": truncation_meaning,
    "drift-rescored-change": rescored_change,
}

PAGE = StudyPage(
    slug="drift",
    order=70,
    title="What fine-tuning costs: retention, drift and an anchor",
    short="what fine-tuning costs on other tasks, KL and distance from the base, the anchor",
    folder="drift/",
    asked="What does fine-tuning cost the base model on other tasks (retention, KL to the base, distance of the "
          "weights), per method at equal training time and at equal target accuracy, and does an anchor toward the "
          "base (`anchor_decay`) buy retention?",
    setup="""`bench/drift/`: the built-in SmolLM2-135M-Instruct on 2-digit addition, 30 training minutes per run
(`max_training_seconds: 1800`, evaluation excluded), one CPU thread each, held-out n = 512 per seed at the task's
budget then, 24 tokens (each final model also at training's 10 tokens). Every evaluation also scores retention on
conciseness (`contains_solution`, 64 questions at 128 tokens) and IFEval (prompt-level strict, 23 of its 24 prompts
offline, at 256 tokens) with the per-token KL to the base on those prompts, and the distance of the weights from the
base. Methods, fixed before any run: full-es (`bench/configs/arithmetic_10tok.yaml`), ES + `anchor_decay` 1.25 (the
AWD paper's 0.5% pull per update) and 10 (the paper's lambda at our learning rate: 4% per update), lowrank-es
(`bench/configs/lowrank_arithmetic_10tok.yaml`), grpo-lora (`bench/configs/grpo_arithmetic_10tok.yaml`); seeds 0
and 1. Every run computed in bfloat16 (`dtype: auto` on a CPU with AMX; ES keeps its mean in fp32). Intervals: Wilson
over both seeds' questions for accuracies, the two seeds' range for KL and distance. Equal target accuracy: each
run's first evaluation at or above the lowest method's mean final accuracy. Tests: two-proportion z tests over both
seeds' questions at the 0.05 level.""",
    files=("drift/*.json", "stability/stability_arithmetic/compare.json",
           "stability/stability_eval_budget_arithmetic.json"),
    notes=("The configs named are those the runs had; the examples of those names have since moved to the method "
           "study's settings.",
           "`anchor_decay` 10 pulls 4% of the distance back per update; 1.25 is the paper's 0.5% per update.",
           "The KL is a direct measure; the retention scores are noisy (IFEval has 23 prompts here)."),
    results="In one line: <!-- claim:drift-arithmetic --><!-- /claim -->.\n\n" + TABLE_HEAD
            + """<!-- claim:drift-table --><!-- /claim -->

¹ The runs' first evaluation (iteration 0) on each seed's held-out split, at 24 tokens
(`bench/results/stability/stability_arithmetic/compare.json`). ² The runs' iteration-0 evaluations scored the base
model's retention, but no result file keeps them (the study's table script reads only the final and equal-accuracy
evaluations), so no number is given for it. <!-- claim:drift-equal-target --><!-- /claim -->

At the untruncated 48 tokens (`bench/results/stability/stability_eval_budget_arithmetic.md`), scored
again, <!-- claim:drift-rescored --><!-- /claim -->: <!-- claim:drift-rescored-change --><!-- /claim -->
(the anchor and low-rank runs were not re-scored).

KL and distance, full-es against GRPO: <!-- claim:drift-keeps --><!-- /claim -->.

Retention scores: <!-- claim:drift-retention-scores --><!-- /claim -->.

lowrank-es: <!-- claim:drift-lowrank --><!-- /claim -->; at training's budget it
scores <!-- claim:drift-lowrank-short --><!-- /claim -->.

The anchor against full-es. <!-- claim:drift-anchor-detail --><!-- /claim -->.

Truncation: <!-- claim:drift-truncation --><!-- /claim -->.

The curves over training time (accuracy, retention, KL, distance) and retention against target accuracy
(`bench/results/drift/drift_arithmetic.png`):

""" + PLOT,
    meaning=("drift-kl-ranking", "drift-retention-tests", "drift-lowrank-meaning", "drift-anchor-meaning",
             "drift-truncation-meaning"),
    rerun="""`bash bench/drift/drift_study.sh` (resumable), then `python -m bench.drift.drift_table RUNS --budget
1800` writes `bench/results/drift/drift_arithmetic.{json,md,png}`; `python -m bench.labbook.render` renders this page
from them.""",
)
