"""Final iterate vs the average of the last K iterates (bench/stability/stability_averaging.sh), per ES seed: accuracy
on the run's own held-out split at 32 new tokens (both), and across seeds the mean, standard deviation, range and a
bootstrap 95% interval of the standard deviation (evotune compare's seed_spread).

    python -m bench.stability.stability_averaging runs/drift --seeds 0 1 2 3 4 --counts 9 18
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.common import seed_summary, study_results, write_result


def final_accuracy(run: Path) -> float:
    """The final iterate on the run's held-out split at the averaged models' 32 tokens (eval-final.json, written by
    bench/stability/stability_formats.sh); not the run's own last evaluation, which generated 24 (the task's budget
    then) and cut some of these runs' answers."""
    path = run / "eval-final.json"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run bench/stability/stability_formats.sh first")
    return json.loads(path.read_text())[0]["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--counts", type=int, nargs="+", required=True)
    parser.add_argument("--name", default="stability_averaging_arithmetic")
    args = parser.parse_args()
    seeds = [seed for seed in args.seeds if all((args.runs / f"es-seed{seed}" / f"eval-averaged-last{count}.json")
                                                 .exists() for count in args.counts)]
    if len(seeds) < 2:
        raise SystemExit("fewer than 2 seeds have every averaged evaluation; "
                         "run bench/stability/stability_averaging.sh")
    rows = {"final iterate": [final_accuracy(args.runs / f"es-seed{seed}") for seed in seeds]}
    for count in args.counts:
        rows[f"average of the last {count}"] = [
            json.loads((args.runs / f"es-seed{seed}" / f"eval-averaged-last{count}.json").read_text())[0]["accuracy"]
            for seed in seeds]
    table = {name: seed_summary(values, seeds) for name, values in rows.items()}
    command = (f"bash bench/stability/stability_averaging.sh  (table: python -m bench.stability.stability_averaging "
               f"{args.runs} --seeds "
               + " ".join(map(str, seeds)) + " --counts " + " ".join(map(str, args.counts)) + ")")
    write_result(args.name, {"command": command, "seeds": seeds, "models": table}, study="stability")
    lines = [f"Command: `{command}`", "", "| ES model | per seed (" + ", ".join(map(str, seeds)) +
             ") | mean | std | range | std 95% CI (bootstrap) |", "|---|---|---|---|---|---|"]
    for name, row in table.items():
        lines.append(f"| {name} | " + ", ".join(f"{value:.3f}" for value in row["per_seed"]) +
                     f" | {row['mean']:.3f} | {row['std']:.3f} | {row['range']:.3f} | "
                     f"{row['std_ci95'][0]:.3f} - {row['std_ci95'][1]:.3f} |")
    (study_results("stability") / f"{args.name}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
