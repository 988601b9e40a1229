"""Claims of the ES-vs-GRPO comparisons (equal time, equal samples) and the conciseness Pareto study."""

from __future__ import annotations

from collections.abc import Callable

from bench.claims._common import load, pct

CONCISENESS_SETTINGS = (("base", "base", ""), ("ES alpha 4e-3 x sigma 1e-3", "es", "learning_rate=0.004,sigma=0.001"),
                        ("ES 4e-3 x 2e-3", "es", "learning_rate=0.004,sigma=0.002"),
                        ("ES 8e-3 x 1e-3", "es", "learning_rate=0.008,sigma=0.001"),
                        ("ES 8e-3 x 2e-3", "es", "learning_rate=0.008,sigma=0.002"),
                        ("GRPO beta 0", "grpo", "beta=0.0"), ("GRPO beta 0.04", "grpo", "beta=0.04"))


def _conciseness_means() -> dict[str, dict[str, float]]:
    """Each CONCISENESS_SETTINGS label's reward, KL and share correct, means over seeds 0 and 1."""
    rows: dict[str, list[dict]] = {}
    for seed in (0, 1):
        for result in load(f"conciseness_pareto/eval_conciseness_pareto_seed{seed}.json")["results"]:
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
        lines.append(f"| {label} | {mean['reward']:.1f} | {kl} | {pct(mean['contains_solution'])} |")
    return "\n".join(lines) + "\n\n"


def conciseness_pareto_summary() -> str:
    """The best GRPO and the best ES setting by reward, with their KL, and the base (means over seeds 0 and 1)."""
    groups: dict[str, list[dict]] = {}
    for seed in (0, 1):
        for result in load(f"conciseness_pareto/eval_conciseness_pareto_seed{seed}.json")["results"]:
            model = result["model"]
            groups.setdefault("base" if "/" not in model else "/".join(model.split("/")[-3:-1]), []).append(result)
    means = {key: {metric: sum(r[metric] for r in results) / len(results) for metric in ("reward", "kl_per_token")}
             for key, results in groups.items()}

    def best(method: str) -> dict:
        return max((value for key, value in means.items() if key.startswith(method + "/")), key=lambda v: v["reward"])

    grpo, es = best("grpo"), best("es")
    return (f"GRPO {grpo['reward']:.1f} at KL {grpo['kl_per_token']:.3f}, best ES {es['reward']:.1f} at KL "
            f"{es['kl_per_token']:.3f} (base {means['base']['reward']:.1f})")


CLAIMS: dict[str, Callable[[], str]] = {
    "conciseness-pareto": conciseness_pareto,
    "conciseness-pareto-summary": conciseness_pareto_summary,
    "conciseness-correct": conciseness_correct,
}
