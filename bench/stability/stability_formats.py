"""What each arithmetic run's final model writes (bench/stability/stability_formats.sh): the share of its held-out
answers in each form, and how often it states the right sum and then writes another number after it, which the task's
reward (the last number in the completion) scores as wrong. Runs that end at different accuracies often differ
here more than in their arithmetic, which is one place run-to-run spread comes from.

    python -m bench.stability.stability_formats runs/drift --seeds 0 1 2 3 4 --num-eval 512

Forms, first match wins: "number" (the completion is one number), "equation" (it starts with "a + b = c"),
"answer is" (it says "the answer is ..."), "other". The columns are shares of the held-out questions.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from bench.common import study_results, write_result
from evotune.tasks.arithmetic import build_arithmetic, numbers
from evotune.tracking.tracker import read_metrics

FORMS = (("number", re.compile(r"^\s*-?[\d,]+\s*\.?\s*$")),
         ("equation", re.compile(r"^\s*-?\d+\s*\+\s*-?\d+\s*=\s*-?[\d,]+")),
         ("answer is", re.compile(r"answer is", re.IGNORECASE)))


def form(completion: str) -> str:
    return next((name for name, pattern in FORMS if pattern.search(completion)), "other")


def describe(samples: Path, seed: int, num_eval: int) -> dict:
    """Shares of each form, the accuracy, and the share that write the right sum but end on another number."""
    answers = {row["prompt"][-1]["content"]: float(row["answer"])
               for row in build_arithmetic(seed=seed, num_eval=num_eval).eval_rows}
    rows = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    if len(rows) != num_eval:
        raise SystemExit(f"{samples}: {len(rows)} answers, expected {num_eval}; delete it and its eval-final.json "
                         "and re-run bench/stability/stability_formats.sh")
    forms = {name: 0 for name, _ in FORMS} | {"other": 0}
    overwritten = correct = 0
    for row in rows:
        text, expected = row["completion"], answers[row["prompt"][-1]["content"]]
        forms[form(text)] += 1
        found = numbers(text)
        correct += bool(found) and found[-1] == expected
        overwritten += bool(found) and found[-1] != expected and expected in found
    return {"accuracy": correct / len(rows), "right_then_overwritten": overwritten / len(rows),
            "mean_characters": sum(len(row["completion"]) for row in rows) / len(rows),
            "forms": {name: count / len(rows) for name, count in forms.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--methods", nargs="+", default=["es", "grpo"])
    parser.add_argument("--num-eval", type=int, default=512)
    parser.add_argument("--name", default="stability_formats_arithmetic")
    args = parser.parse_args()
    table: dict[str, dict] = {}
    for method in args.methods:
        for seed in args.seeds:
            run = args.runs / f"{method}-seed{seed}"
            if not (run / "samples-final.jsonl").exists():
                continue
            row = describe(run / "samples-final.jsonl", seed, args.num_eval)
            # the run's own last evaluation, to show `evotune eval` of final/ scores what training logged
            logged = [record for record in read_metrics(run / "metrics.jsonl") if "eval/accuracy" in record]
            table[run.name] = {**row, "logged_accuracy": logged[-1]["eval/accuracy"] if logged else None}
    if not table:
        raise SystemExit(f"no samples-final.jsonl under {args.runs}/<method>-seed<N>: "
                         "run bench/stability/stability_formats.sh")
    command = (f"bash bench/stability/stability_formats.sh  (table: python -m bench.stability.stability_formats "
               f"{args.runs} --seeds "
               f"{' '.join(map(str, args.seeds))} --methods {' '.join(args.methods)} --num-eval {args.num_eval})")
    names = [name for name, _ in FORMS] + ["other"]
    lines = [f"Command: `{command}`", "", "Shares of each run's held-out answers (n = "
             f"{args.num_eval}, 32 new tokens, bench/stability/eval_samples.sh).", "",
             "| run | accuracy | logged in training | right sum, then another number | mean characters | "
             + " | ".join(names) + " |", "|---" * (5 + len(names)) + "|"]
    for run, row in table.items():
        logged = "-" if row["logged_accuracy"] is None else f"{row['logged_accuracy']:.3f}"
        lines.append(f"| {run} | {row['accuracy']:.3f} | {logged} | {row['right_then_overwritten']:.3f} | "
                     f"{row['mean_characters']:.0f} | " + " | ".join(f"{row['forms'][n]:.2f}" for n in names) + " |")
    write_result(args.name, {"command": command, "runs": table}, study="stability")
    (study_results("stability") / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
