"""ES vs GRPO: full-parameter ES against GRPO on a LoRA at equal training time (the stability study's five-seed runs),
ES, ESSA and GRPO per sampled completion on conciseness, and GRPO's peak memory in micro-batches. The comparison is
the one Qiu et al. draw between ES and GRPO (Evolution Strategies at Scale, arXiv 2509.24372), at small scale."""

from __future__ import annotations

import statistics

from bench.claims._common import load
from bench.labbook.spec import StudyPage

LEVEL = 0.05  # the level every test on this page judges at
NAMES = {"es": "full-es", "grpo": "GRPO"}
COMPARE_NAMES = {"es full/openes": "full-es", "es svd_lora/cma": "ESSA", "grpo": "GRPO"}


def final_accuracy() -> dict[str, dict]:
    """Each method's held-out accuracy per seed at 48 new tokens after its 30 minutes (the stability study's file)."""
    spread = load("stability/stability_eval_budget_arithmetic.json")["spread"]["accuracy"]
    return {NAMES[key]: spread[key]["48"] for key in NAMES}


def welch_p(first: list[float], second: list[float]) -> float:
    """Two-sided p of Welch's t-test that two sets of seeds share one mean."""
    from scipy.stats import ttest_ind

    return float(ttest_ind(first, second, equal_var=False).pvalue)


def variance_p(wider: list[float], narrower: list[float]) -> float:
    """One-sided p of the F test that `narrower`'s seeds vary less than `wider`'s."""
    from scipy.stats import f as f_distribution

    ratio = statistics.variance(wider) / statistics.variance(narrower)
    return float(f_distribution.sf(ratio, len(wider) - 1, len(narrower) - 1))


def accuracy_meaning() -> str:
    """Which method ended higher at equal time, whether Welch's t-test over the seeds separates the means, and
    whether the lower method's best seed stayed below the higher one's worst."""
    found = final_accuracy()
    higher, lower = sorted(found, key=lambda name: -found[name]["mean"])
    high, low = found[higher]["per_seed"], found[lower]["per_seed"]
    p_value = welch_p(high, low)
    verdict = "beyond seed noise" if p_value < LEVEL else "within seed noise"
    extremes = (f"; its lowest seed ({min(high):.1f}%) was above {lower}'s highest ({max(low):.1f}%)"
                if min(high) > max(low) else "")
    return (f"At equal time {higher} ended higher than {lower} ({statistics.mean(high):.1f}% against "
            f"{statistics.mean(low):.1f}%), {verdict} (Welch's t-test over {len(high)} and {len(low)} seeds, "
            f"p = {p_value:.3f}){extremes}.")


def spread_meaning() -> str:
    """Which method varied less from seed to seed, with the one-sided F test of the two variances."""
    found = final_accuracy()
    wider, narrower = sorted(found, key=lambda name: -statistics.stdev(found[name]["per_seed"]))
    wide, narrow = found[wider]["per_seed"], found[narrower]["per_seed"]
    p_value = variance_p(wide, narrow)
    stds = f"std {statistics.stdev(narrow):.1f} points against {statistics.stdev(wide):.1f}"
    if p_value < LEVEL:
        return f"{narrower} varied less from seed to seed than {wider} ({stds}; one-sided F test, p = {p_value:.4f})."
    return f"Neither method's seed spread is separated from the other's ({stds}; one-sided F test, p = {p_value:.2f})."


def memory_meaning() -> str:
    """GRPO's peak memory with the step in the most micro-batches measured, as a share of the one-batch step's."""
    runs = sorted(load("speed/grpo_memory_grpo_conciseness.json")["runs"],
                  key=lambda run: run["gradient_accumulation_steps"])
    whole, split = runs[0], runs[-1]
    share = split["peak_rss_mib"] / whole["peak_rss_mib"]
    change = "cut" if share < 1 else "raised"
    steps = whole["gradient_accumulation_steps"]
    baseline = "one batch" if steps == 1 else f"{steps} micro-batches"
    return (f"Splitting a GRPO step into {split['gradient_accumulation_steps']} micro-batches {change} its peak "
            f"memory to {100 * share:.0f}% of its peak in {baseline}.")


def conciseness_at_equal_samples() -> str:
    """Each method's held-out conciseness reward at the shared sample budget (mean of each seed's last evaluation
    within it), from each method's first evaluation, and full-es's at the end of its longer run."""
    compare = load("es_vs_grpo/compare_conciseness/compare.json")
    budget = next(int(key.split("_")[1]) for key in compare["methods"][0] if key.startswith("at_"))
    parts = []
    for method in sorted(compare["methods"], key=lambda method: -method[f"at_{budget}_samples"]):
        runs = [run for run in compare["runs"] if run["method"] == method["method"]]
        start = statistics.mean(run["curve"][0]["value"] for run in runs)
        name = COMPARE_NAMES.get(method["method"], method["method"])
        longer = (f" ({method['final_mean']:.1f} at {method['samples_seen']:,})" if method["samples_seen"] > budget
                  else "")
        parts.append(f"{name} {method[f'at_{budget}_samples']:.1f} from {start:.1f}{longer}")
    return (f"held-out reward at {budget:,} sampled completions (means over {len(compare['runs']) // len(parts)} "
            f"seeds, each from its first evaluation): {', '.join(parts)}")


CLAIMS = {"es-vs-grpo-accuracy": accuracy_meaning, "es-vs-grpo-spread": spread_meaning,
          "es-vs-grpo-memory": memory_meaning, "es-vs-grpo-conciseness": conciseness_at_equal_samples}

PAGE = StudyPage(
    slug="es-vs-grpo",
    order=50,
    title="ES vs GRPO",
    short="full-es against GRPO at equal wall-clock, GRPO's memory",
    folder="es_vs_grpo/",
    asked="At equal training time on the built-in model, how does full-es compare with GRPO on a LoRA, and what does "
          "GRPO's memory cost?",
    setup="""2-digit addition, 30 minutes of training per run at one CPU thread (evaluation excluded), 5 seeds each,
held-out n = 512 scored untruncated at 48 new tokens: full-es with `bench/configs/arithmetic_10tok.yaml` against
grpo-lora with `bench/configs/grpo_arithmetic_10tok.yaml` (the runs of the [stability](stability.md) study, whose page
has the per-seed table and the curves). On conciseness, ES, ESSA (from a LoRA SFT on the reference answers) and GRPO
per sampled completion, seeds 0 and 1, n = 64 (`bench/es_vs_grpo/compare_methods.sh`). GRPO's memory: one
conciseness step of 64 completions in one and in four micro-batches with `gradient_accumulation_steps`, the same
update (`tests/baselines/test_grpo.py` checks it).""",
    files=("stability/stability_eval_budget_arithmetic.json", "speed/grpo_memory_grpo_conciseness.json",
           "es_vs_grpo/compare_conciseness/compare.json"),
    results="""At equal wall-clock: <!-- claim:stability-arithmetic --><!-- /claim -->.
GRPO's peak memory: <!-- claim:grpo-memory --><!-- /claim -->.

On conciseness, <!-- claim:es-vs-grpo-conciseness --><!-- /claim -->.

![Reward against sampled completions on conciseness: ES, ESSA, GRPO]"""
            "(plots/es_vs_grpo/compare_conciseness/reward_vs_samples.png)",
    meaning=("es-vs-grpo-accuracy", "es-vs-grpo-spread", "es-vs-grpo-memory"),
    rerun="""`METHODS="es grpo" bash bench/drift/drift_study.sh` and `python -m
bench.stability.stability_eval_budget RUNS --methods es grpo --seeds 0 1 2 3 4` (the runs above, as the
[stability](stability.md) page gives them), `bash bench/es_vs_grpo/compare_methods.sh` (conciseness),
`OMP_NUM_THREADS=1 python -m bench.speed.grpo_memory --steps 3 --accumulation 1 4` (memory);
`python -m bench.labbook.render` renders this page from them.""",
    related="The matched study, every method tuned alike ([Which method?](../which-method.md)), is the comparison "
            "to read.",
)
