"""Reward hacking on conciseness: Qiu et al.'s conciseness experiment (Evolution Strategies at Scale, arXiv
2509.24372), reward against the per-token KL to the base for an ES grid and GRPO, and whether the answer survives."""

from __future__ import annotations

import math
import statistics

from bench.claims._common import RESULTS, load
from bench.claims.comparisons import CONCISENESS_SETTINGS, _conciseness_means
from bench.labbook.chance import LEVEL, beyond_chance, needed_gap
from bench.labbook.spec import StudyPage

GRID_SEEDS = (0, 1)  # the seeds every setting of the grid ran
COMPARE_NAMES = {"es full/openes": "full-es", "es svd_lora/cma": "ESSA", "grpo": "GRPO"}


def setting_of(model: str) -> str:
    """A result's setting label (CONCISENESS_SETTINGS) from the model path it was scored from."""
    key = "base" if "/" not in model else "/".join(model.split("/")[-3:-1])
    for label, method, setting in CONCISENESS_SETTINGS:
        if key == ("base" if method == "base" else f"{method}/{setting}"):
            return label
    return key


def per_seed() -> dict[int, dict[str, dict]]:
    """Every scored run by seed, then setting label (seeds 2 and up hold only the settings the stability study ran)."""
    files = sorted((RESULTS / "conciseness_pareto").glob("eval_conciseness_pareto_seed*.json"))
    found = {}
    for path in files:
        seed = int(path.stem.rsplit("seed", 1)[1])
        found[seed] = {setting_of(result["model"]): result for result in load(path.relative_to(RESULTS).as_posix())
                       ["results"]}
    return found


def method_of(label: str) -> str:
    return label.split(" ")[0]


def dominates(first: dict, second: dict) -> bool:
    """Whether a run has both the higher reward and the lower KL to the base."""
    return first["reward"] > second["reward"] and first["kl_per_token"] < second["kl_per_token"]


def names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def verdict() -> str:
    """Qiu et al.'s claim (ES reaches a reward at less KL than GRPO) judged on the grid's means over seeds 0 and 1:
    which runs of one method have both a higher reward and a lower KL than runs of the other, on how many seeds that
    holds too, and where ES's lower-KL settings stand in reward."""
    means = {label: mean for label, mean in _conciseness_means().items() if label != "base"}
    seeds = per_seed()
    es = [label for label in means if method_of(label) == "ES"]
    grpo = [label for label in means if method_of(label) == "GRPO"]
    grpo_wins = [(winner, loser) for winner in grpo for loser in es if dominates(means[winner], means[loser])]
    es_wins = [(winner, loser) for winner in es for loser in grpo if dominates(means[winner], means[loser])]
    beaten = sorted({loser for _, loser in grpo_wins})
    held = [sum(dominates(seeds[seed][winner], seeds[seed][loser]) for seed in GRID_SEEDS)
            for winner, loser in grpo_wins]
    lower_kl = [label for label in es if all(means[label]["kl_per_token"] < means[other]["kl_per_token"]
                                             for other in grpo)]
    below = [label for label in lower_kl if all(means[label]["reward"] < means[other]["reward"] for other in grpo)]
    if grpo_wins and not es_wins:
        answer = "does not hold"
    elif es_wins and not grpo_wins:
        answer = "holds"
    elif es_wins:
        answer = "holds only in part"
    else:
        answer = "is not settled by the grid (no run beats another on both)"
    sentence = f"At this budget Qiu et al.'s claim {answer}"
    if beaten:
        consistent = ("on each seed too" if min(held) == len(GRID_SEEDS) else
                      f"on at least {min(held)} of the {len(GRID_SEEDS)} seeds")
        sentence += f": GRPO had both the higher reward and the lower KL against {names(beaten)}, {consistent}"
    if es_wins:
        sentence += f"; {names(sorted({winner for winner, _ in es_wins}))} beat a GRPO run on both"
    if lower_kl:
        sentence += (f"; the ES settings with less KL than every GRPO run, {names(lower_kl)}, "
                     + ("had lower reward than every GRPO run" if below == lower_kl else
                        "did not all have lower reward"))
    return sentence + "."


def interval_se(result: dict) -> float:
    """The standard error of a run's mean reward, from its 95% interval."""
    low, high = result["reward_ci95"]
    return (high - low) / 2 / 1.96


def mean_and_se(label: str) -> tuple[float, float]:
    """A setting's mean reward over the grid's seeds and its standard error (each seed's own questions)."""
    runs = [per_seed()[seed][label] for seed in GRID_SEEDS]
    return (statistics.mean(run["reward"] for run in runs),
            math.sqrt(sum(interval_se(run) ** 2 for run in runs)) / len(runs))


def gap() -> str:
    """The reward gap between the best GRPO and the best ES setting (means over seeds 0 and 1) against the gap a 95%
    test needs with the runs taken as independent samples, and each one's gap over the base on the same test."""
    means = _conciseness_means()
    best = {method: max((label for label in means if method_of(label) == method), key=lambda label:
                        means[label]["reward"]) for method in ("GRPO", "ES")}
    (first, first_se), (second, second_se) = (mean_and_se(best[method]) for method in ("GRPO", "ES"))
    needed = 1.96 * math.hypot(first_se, second_se)
    higher, lower = ("GRPO", "ES") if first >= second else ("ES", "GRPO")
    relation = "beyond" if abs(first - second) > needed else "within"
    base, base_se = mean_and_se("base")
    above = [method for method, (value, se) in (("GRPO", (first, first_se)), ("ES", (second, second_se)))
             if value - base > 1.96 * math.hypot(se, base_se)]
    over_base = ("both are above the base's" if len(above) == 2 else
                 f"only {names(above)} is above the base's" if above else "neither is above the base's")
    return (f"The best {higher} setting's reward ({best[higher]}) is {abs(first - second):.1f} above the best "
            f"{lower}'s ({best[lower]}), {relation} the {needed:.1f} a 95% test needs over {len(GRID_SEEDS)} seeds "
            f"(runs taken as independent samples of their questions); {over_base} {base:.1f} beyond that test.")


def paired_p(differences: list[float]) -> float:
    """Two-sided p of the paired t-test that per-seed differences average 0."""
    from scipy.stats import ttest_1samp

    return float(ttest_1samp(differences, 0.0).pvalue)


def paired() -> str:
    """The ES and the GRPO setting that ran on every seed: on how many seeds GRPO's reward, KL and share of answers
    kept were higher, with a paired t-test over the seeds (each seed scores both on its own questions)."""
    seeds = per_seed()
    shared = sorted(set.intersection(*(set(runs) for runs in seeds.values())) - {"base"})
    es, grpo = (next(label for label in shared if method_of(label) == method) for method in ("ES", "GRPO"))
    parts, higher = [], {}
    for key, what in (("reward", "the higher reward"), ("kl_per_token", "the higher KL"),
                      ("contains_solution", "more replies holding the answer")):
        differences = [seeds[seed][grpo][key] - seeds[seed][es][key] for seed in sorted(seeds)]
        p_value = paired_p(differences)
        above = sum(difference > 0 for difference in differences)
        higher[key] = p_value < LEVEL and statistics.mean(differences) > 0
        parts.append(f"{what} on {above} of {len(differences)} seeds (p = {p_value:.3f})")
    trade = ("ES stayed closer to the base only at a lower reward" if higher["reward"] and higher["kl_per_token"] else
             "the seeds do not separate both the reward and the KL")
    return (f"Over the {len(seeds)} seeds both ran (paired t-test over the seeds), {grpo} against {es} had "
            f"{names(parts)}: {trade}.")




def kept_answers() -> str:
    """Each grid setting's share of replies still holding the answer against the base's, over the grid's seeds'
    questions together: which fell or rose beyond chance (two-proportion test at 95%), and the largest drop."""
    means = _conciseness_means()
    base = means.pop("base")["contains_solution"]
    count = sum(per_seed()[seed]["base"]["num_eval"] for seed in GRID_SEEDS)
    changes = {label: mean["contains_solution"] - base for label, mean in means.items()}
    tests = {label: beyond_chance(base + change, base, count) for label, change in changes.items()}
    fell = [label for label in changes if changes[label] < 0 and tests[label]]
    rose = [label for label in changes if changes[label] > 0 and tests[label]]
    worst = min(changes, key=changes.get)
    drop = (f"the largest change down, {worst}, {100 * changes[worst]:+.1f} points against "
            f"{100 * needed_gap(base + changes[worst], base, count):.1f} needed" if changes[worst] < 0 else "none fell")
    lost = (f"{names(fell)} lost answers beyond chance" if fell else
            "no setting lost answers beyond chance: no sign of replies shortened by dropping the answer")
    gained = f"; {names(rose)} held the answer more often than the base, beyond chance" if rose else ""
    return (f"Against the base's {100 * base:.1f}% of replies holding the answer (n = {count}), {lost} ({drop})"
            f"{gained}.")


def equal_samples() -> str:
    """At the shared sample budget, each method's share of replies holding the answer against the base's (the ES and
    GRPO runs' first evaluation) and against its own start, two-proportion tests at 95% over both seeds' questions."""
    compare = load("es_vs_grpo/compare_conciseness_correctness/compare.json")
    budget = next(int(key.split("_")[1]) for key in compare["methods"][0] if key.startswith("at_"))
    runs = {method["method"]: [run for run in compare["runs"] if run["method"] == method["method"]]
            for method in compare["methods"]}
    base = statistics.mean(run["curve"][0]["value"] for run in runs["grpo"])
    count = sum(run["num_eval"] for run in runs["grpo"])
    below, parts = [], []
    for method in sorted(compare["methods"], key=lambda method: -method[f"at_{budget}_samples"]):
        name, value = COMPARE_NAMES.get(method["method"], method["method"]), method[f"at_{budget}_samples"]
        start = statistics.mean(run["curve"][0]["value"] for run in runs[method["method"]])
        parts.append(f"{name} {100 * value:.1f}%")
        if value < base and beyond_chance(value, base, count):
            started_low = start < base and beyond_chance(start, base, count)
            moved = beyond_chance(value, start, count)
            below.append(f"{name} is below it beyond chance" + (
                f", and already was at its start ({100 * start:.1f}%, after its SFT), from which its search "
                + ("moved it beyond chance" if moved else "did not move it beyond chance") if started_low else ""))
    verdict = "; ".join(below) if below else "no method is below it beyond chance"
    return (f"At {budget:,} sampled completions the share of replies holding the answer was {', '.join(parts)}, "
            f"against the base's {100 * base:.1f}% (n = {count}): {verdict}.")


PER_SAMPLE_NAMES = {"es full/openes": "full-es", "es svd_lora/cma": "ESSA", "grpo": "GRPO"}


def conciseness_at_equal_samples() -> str:
    """Each method's held-out conciseness reward at the shared sample budget (mean of each seed's last evaluation
    within it), from each method's first evaluation, and full-es's at the end of its longer run."""
    compare = load("es_vs_grpo/compare_conciseness/compare.json")
    budget = next(int(key.split("_")[1]) for key in compare["methods"][0] if key.startswith("at_"))
    parts = []
    for method in sorted(compare["methods"], key=lambda method: -method[f"at_{budget}_samples"]):
        runs = [run for run in compare["runs"] if run["method"] == method["method"]]
        start = statistics.mean(run["curve"][0]["value"] for run in runs)
        name = PER_SAMPLE_NAMES.get(method["method"], method["method"])
        longer = (f" ({method['final_mean']:.1f} at {method['samples_seen']:,})" if method["samples_seen"] > budget
                  else "")
        parts.append(f"{name} {method[f'at_{budget}_samples']:.1f} from {start:.1f}{longer}")
    return (f"held-out reward at {budget:,} sampled completions (means over {len(compare['runs']) // len(parts)} "
            f"seeds, each from its first evaluation): {', '.join(parts)}")

CLAIMS = {"conciseness-verdict": verdict, "conciseness-gap": gap, "conciseness-paired": paired,
          "conciseness-kept-answers": kept_answers, "conciseness-equal-samples": equal_samples,
          "conciseness-per-sample": conciseness_at_equal_samples}

PAGE = StudyPage(
    slug="conciseness",
    order=80,
    title="Reward hacking on conciseness",
    short="reward against KL to the base, ES grid against GRPO",
    folder="conciseness_pareto/",
    asked="Qiu et al. report that ES reaches a given reward on conciseness with less reward hacking and less drift "
          "from the base than GRPO. Does that hold here, reward against the KL to the base?",
    setup="""Qiu et al.'s experiment (`bench/conciseness_pareto/`): reward `-|len(completion) - len(solution)|`,
1,280 sampled completions per run (ES: 10 iterations of 16 members x 8 prompts, a grid of learning rate alpha and
sigma; GRPO: 20 steps x 8 prompts x 8, LoRA lr 1e-4, beta 0 and 0.04), seeds 0 and 1, each seed's runs scored on
its own 64 held-out questions with the per-token KL (k3) to the base model and `contains_solution` (is the right
answer still in the reply?). ES 4e-3 x 2e-3 and GRPO beta 0 also ran seeds 2-4 (the [stability](stability.md)
study's runs). The same protocol at an equal sample budget per method, over training:
`bash bench/es_vs_grpo/compare_methods.sh` (full-es, ESSA from a LoRA SFT on the reference answers, and GRPO,
seeds 0 and 1).""",
    files=("conciseness_pareto/*.json", "es_vs_grpo/compare_conciseness_correctness/compare.json",
           "es_vs_grpo/compare_conciseness/compare.json"),
    results="""Means over seeds 0 and 1:<!-- claim:conciseness-pareto --><!-- /claim -->

In short: <!-- claim:conciseness-pareto-summary --><!-- /claim -->.
Correctness against the base: <!-- claim:conciseness-correct --><!-- /claim -->.

Each run's reward against its KL to the base model (means over the seeds large, each seed small), and
correctness in the second panel (`bench/results/conciseness_pareto/conciseness_pareto.png`):

![Reward against per-token KL to the base on conciseness, ES grid and GRPO, with correctness]"""
            "(plots/conciseness_pareto/conciseness_pareto.png)" """

At an equal sample budget per method, <!-- claim:conciseness-per-sample --><!-- /claim -->:

![Reward against sampled completions on conciseness: ES, ESSA, GRPO]"""
            "(plots/es_vs_grpo/compare_conciseness/reward_vs_samples.png)" """

`contains_solution` against sampled completions at an equal sample budget per method:

![contains_solution against sampled completions on conciseness: ES, ESSA, GRPO]"""
            "(plots/es_vs_grpo/compare_conciseness_correctness/contains_solution_vs_samples.png)",
    meaning=("conciseness-verdict", "conciseness-gap", "conciseness-paired", "conciseness-kept-answers",
             "conciseness-equal-samples"),
    rerun="""`bash bench/conciseness_pareto/conciseness_pareto.sh` writes `bench/results/conciseness_pareto/`
(`SEEDS="2 3 4" LEARNING_RATES=4e-3 SIGMAS=2e-3 BETAS=0.0 PARETO=0 bash bench/conciseness_pareto/conciseness_pareto.sh`
the extra seeds); `bash bench/es_vs_grpo/compare_methods.sh` the curves over training; `python -m bench.labbook.render`
renders this page from them.""",
)
