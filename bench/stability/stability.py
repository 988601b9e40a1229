"""Run-to-run stability on conciseness (the small form of Qiu et al.'s repeated-runs check): one ES setting and
GRPO at beta 0, five seeds each, every run scored on its own seed's held-out questions by
bench/conciseness_pareto/conciseness_pareto.sh (eval_conciseness_pareto_seed<S>.json). Per method: each seed's reward,
`contains_solution` and KL to the base, their mean, standard deviation, range and a bootstrap 95% interval of the
standard deviation (evotune compare's seed_spread, so the arithmetic table of `evotune compare` and this one agree).

    SEEDS="2 3 4" LEARNING_RATES=4e-3 SIGMAS=2e-3 BETAS=0.0 PARETO=0 bash bench/conciseness_pareto/conciseness_pareto.sh
    python -m bench.stability.stability --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.common import seed_summary, study_results, write_result

METHODS = {"es (lr 4e-3, sigma 2e-3)": "es/learning_rate=0.004,sigma=0.002/", "grpo (beta 0)": "grpo/beta=0.0/"}
# reward_gain: the run's reward minus its base model's on the same questions; the held-out splits differ by seed,
# and so do the bases' rewards on them, so the gain is the part of each run's reward that training made
METRICS = ("reward", "reward_gain", "contains_solution", "kl_per_token")


def load(seeds: list[int]) -> dict[str, list[dict]]:
    """Per method, one record per seed: the run's held-out values and its seed's base model values."""
    runs: dict[str, list[dict]] = {method: [] for method in METHODS}
    for seed in seeds:
        path = study_results("conciseness_pareto") / f"eval_conciseness_pareto_seed{seed}.json"
        results = json.loads(path.read_text())["results"]
        base = next(result for result in results if "/" not in result["model"].rstrip("/"))
        for method, marker in METHODS.items():
            found = [result for result in results if marker in result["model"] + "/"]
            if len(found) != 1:
                raise SystemExit(f"seed {seed}: expected one {method} run ({marker}) in the evaluation, found "
                                 f"{len(found)}; run bench/conciseness_pareto/conciseness_pareto.sh "
                                 f"for this seed first")
            runs[method].append({"seed": seed, "base": base, **found[0],
                                 "reward_gain": found[0]["reward"] - base["reward"]})
    return runs


def summarize(records: list[dict]) -> dict:
    summary: dict = {"seeds": [record["seed"] for record in records]}
    for metric in METRICS:
        summary[metric] = seed_summary([record[metric] for record in records], summary["seeds"])
    summary["base_reward_per_seed"] = [record["base"]["reward"] for record in records]
    return summary


def markdown(table: dict[str, dict], command: str) -> str:
    lines = [f"Command: `{command}`", "",
             "| method | metric | per seed | mean | std | range | std 95% CI (bootstrap) |",
             "|---|---|---|---|---|---|---|"]
    for method, summary in table.items():
        for metric in METRICS:
            row = summary[metric]
            per_seed = ", ".join(f"{value:.3g}" for value in row["per_seed"])
            low, high = row["std_ci95"]
            lines.append(f"| {method} | {metric} | {per_seed} | {row['mean']:.3g} | {row['std']:.3g} | "
                         f"{row['range']:.3g} | {low:.3g} - {high:.3g} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--name", default="stability_conciseness")
    args = parser.parse_args()
    table = {method: summarize(records) for method, records in load(args.seeds).items()}
    command = "python -m bench.stability.stability --seeds " + " ".join(map(str, args.seeds))
    write_result(args.name, {"command": command, "methods": table}, study="stability")
    Path(study_results("stability") / f"{args.name}.md").write_text(markdown(table, command))


if __name__ == "__main__":
    main()
