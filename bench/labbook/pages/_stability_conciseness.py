"""The stability page's conciseness half: how wide ES's and GRPO's seeds spread on the conciseness task and what
its evaluation budget does to that (stability.py renders them)."""

from __future__ import annotations

from scipy.stats import ttest_1samp

from bench.claims._common import load
from bench.labbook.chance import LEVEL, p_text, separated, welch

CONCISENESS = "stability/stability_eval_budget_conciseness.json"
EVALUATION_BUDGET = "128"  # the conciseness task's evaluation budget, in tokens

def conciseness_base_spread() -> str:
    """How much the seeds' base models differ in reward on their own held-out splits: why the gain is the measure."""
    base = load(CONCISENESS)["spread"]["reward"]["base"]
    return f"std {base['32']['std']:.1f} at 32 tokens, {base['256']['std']:.1f} at 256"


def conciseness_check() -> str:
    """Which budget's column reproduces each conciseness run's own last evaluation exactly: the task's evaluation
    budget where it does, else the smallest budget that does; counted per budget."""
    models = [model for name, model in load(CONCISENESS)["models"].items() if not name.startswith("base")]
    found: dict[str, int] = {}
    for model in models:
        matching = [budget for budget, value in model["metrics"].items() if value["reward"] == model["logged"]]
        budget = EVALUATION_BUDGET if EVALUATION_BUDGET in matching else min(matching, key=int, default="no")
        found[budget] = found.get(budget, 0) + 1
    parts = [f"{count} run{'s' if count != 1 else ''} at {budget} tokens"
             for budget, count in sorted(found.items(), key=lambda item: -item[1])]
    return f"each run's own last evaluation is reproduced exactly by one column ({', '.join(parts)})"


def conciseness_gain_meaning() -> str:
    """Which method gains more reward over its base on conciseness at each budget (Welch's t test over five runs
    each), and whether each method's contains_solution moved from its base's at the task's evaluation budget
    (one-sample t test of the per-seed differences, each run against its own seed's base)."""
    spread = load(CONCISENESS)["spread"]
    gains = spread["reward_gain"]
    budgets = sorted(gains["es"], key=int)
    tests = {budget: welch(gains["grpo"][budget], gains["es"][budget]) for budget in budgets}
    higher = {"GRPO" if gains["grpo"][budget]["mean"] > gains["es"][budget]["mean"] else "ES" for budget in budgets}
    lead = (f"{higher.pop()}'s mean reward gain is the higher at every budget" if len(higher) == 1 else
            "neither method's mean reward gain is the higher at every budget")
    apart = [budget for budget in budgets if tests[budget] < LEVEL]
    tested = (f"separated at {' and '.join(apart)} tokens" if apart and len(apart) < len(budgets) else
              "separated at every budget" if apart else "separated at no budget")
    listed = "; ".join(f"{budget} tokens {gains['es'][budget]['mean']:.1f} ES against "
                       f"{gains['grpo'][budget]['mean']:.1f} GRPO, {p_text(tests[budget])}" for budget in budgets)
    moved = []
    for key, label in (("grpo", "GRPO"), ("es", "ES")):
        values = spread["contains_solution_gain"][key][EVALUATION_BUDGET]["per_seed"]
        p = float(ttest_1samp(values, 0.0).pvalue) if len(set(values)) > 1 else 1.0
        moved.append(f"{sum(values) / len(values):+.1f} points for {label} ({p_text(p)}: {separated(p)})")
    return (f"On conciseness {lead}, {tested} by Welch's t test ({listed}). Against each seed's base model at "
            f"{EVALUATION_BUDGET} tokens, `contains_solution` moved {' and '.join(moved)}.")


def conciseness_budget_meaning() -> str:
    """What reading conciseness at longer budgets shows: each method's gain std at every budget with whether the two
    bootstrap intervals overlap, and how many runs stop before 128 tokens (reward unchanged from 128 to 256)
    against those that still ramble past it (reward falls)."""
    data = load(CONCISENESS)
    gains = data["spread"]["reward_gain"]
    budgets = sorted(gains["es"], key=int)
    stds = {key: " -> ".join(f"{gains[key][budget]['std']:.1f}" for budget in budgets) for key in ("es", "grpo")}
    overlap = all(gains["es"][b]["std_ci95"][0] <= gains["grpo"][b]["std_ci95"][1]
                  and gains["grpo"][b]["std_ci95"][0] <= gains["es"][b]["std_ci95"][1] for b in budgets[1:])
    stop = {}
    for key in ("es", "grpo"):
        models = [model for name, model in data["models"].items() if name.startswith(f"{key}-seed")]
        stop[key] = (sum(model["metrics"]["128"]["reward"] == model["metrics"]["256"]["reward"] for model in models),
                     len(models))
    return (f"Read at longer budgets both methods' gains scatter more (std over {', '.join(budgets)} tokens: ES "
            f"{stds['es']}, GRPO {stds['grpo']}), the bootstrap intervals of the two stds "
            f"{'overlapping' if overlap else 'apart'} past {budgets[0]}: {stop['es'][0]} of ES's {stop['es'][1]} runs "
            f"and {stop['grpo'][0]} of GRPO's {stop['grpo'][1]} stop before 128 tokens (the same reward at 256), the "
            f"others still ramble past it, which {budgets[0]} tokens hid.")
