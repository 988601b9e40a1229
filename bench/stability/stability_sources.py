"""Where ES's run-to-run spread comes from (bench/stability/stability_sources.sh): each final model's accuracy on each
held-out split, and the differences that isolate one source of randomness each, with 95% intervals.

    python -m bench.stability.stability_sources runs/stability_sources --num-eval 512 \\
        --name stability_sources_arithmetic

Runs (seed, data_seed): es-seed0 (0, 0), es-seed1 (1, 1), noise-seed0 (1, 0), data-seed0 (0, 1). Differences:
    noise           noise-seed0 - es-seed0 on split 0    only the noise differs (same prompts, same questions)
    data            data-seed0 - es-seed0 on split 0     only the prompts trained on differ (scored on one split)
    everything      es-seed1 - es-seed0 on split 0       seed and data both differ (what seeds 0-4 sample)
    evaluation set  a model's split 1 - split 0          the same weights on other questions
The arithmetic task draws its training and held-out questions from the data seed, so data seed 1's 2,000
training questions hold about a quarter of data seed 0's held-out ones (8,100 questions exist). Every number here
is therefore taken on the questions of a split that no compared run trained on: the split's held-out questions
outside data seeds 0's and 1's training sets (each model's answer per question comes from `evotune eval
--samples`). Two models on the same questions are compared question by question (the paired normal interval of
the per-question differences); a model on two splits, as two independent proportions.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import numpy as np

from bench.common import study_results, write_result
from evotune.evaluation.statistics import wilson_interval
from evotune.tasks.arithmetic import arithmetic_reward, build_arithmetic

PAIRS = {"noise": ("noise-seed0", "es-seed0", 0), "data": ("data-seed0", "es-seed0", 0),
         "everything": ("es-seed1", "es-seed0", 0)}
DATA_SEEDS = (0, 1)  # the data seeds of the compared runs: their training questions are left out of every split


def question(prompt: list[dict]) -> str:
    return prompt[-1]["content"]


def clean_questions(split: int, num_eval: int, trained: set[str]) -> dict[str, str]:
    """question -> answer: split `split`'s held-out questions outside `trained`."""
    return {question(row["prompt"]): row["answer"] for row in build_arithmetic(seed=split, num_eval=num_eval).eval_rows
            if question(row["prompt"]) not in trained}


def load(runs: Path, num_eval: int) -> dict[str, dict[int, dict]]:
    """model -> split -> {question: 1.0 or 0.0} on the split's clean questions, from samples-<model>-split<N>.jsonl."""
    # every question a run of DATA_SEEDS trained on, built once for all splits
    trained = {question(row["prompt"]) for seed in DATA_SEEDS
               for row in build_arithmetic(seed=seed, num_eval=num_eval).train_rows}
    answers: dict[int, dict[str, str]] = {}
    correct: dict[str, dict[int, dict]] = {}
    for path in sorted(runs.glob("samples-*-split*.jsonl")):
        match = re.fullmatch(r"samples-(.+)-split(\d+)\.jsonl", path.name)
        if not match:
            continue
        split = int(match.group(2))
        if split not in answers:
            answers[split] = clean_questions(split, num_eval, trained)
        expected = answers[split]
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if len(rows) != num_eval:
            raise SystemExit(f"{path}: {len(rows)} answers, expected {num_eval} (one evaluation of --num-eval "
                             "questions); delete it and its eval-*.json and re-run "
                             "bench/stability/stability_sources.sh")
        scored = {question(row["prompt"]): row["completion"] for row in rows}
        correct.setdefault(match.group(1), {})[split] = {
            text: arithmetic_reward([scored[text]], [answer])[0] for text, answer in expected.items()}
    return correct


def score(answers: dict[str, float]) -> dict:
    values = np.array(list(answers.values()))  # (questions,)
    return {"accuracy": float(values.mean()), "num_questions": len(values),
            "ci95": list(wilson_interval(int(values.sum()), len(values)))}


def paired_difference(first: dict[str, float], second: dict[str, float]) -> dict:
    """first - second on the same questions: mean per-question difference, normal 95% interval."""
    per_question = np.array([first[text] - second[text] for text in first])  # (questions,)
    half = 1.96 * per_question.std(ddof=1) / math.sqrt(len(per_question))
    mean = float(per_question.mean())
    return {"difference": mean, "ci95": [mean - half, mean + half], "num_questions": len(per_question)}


def independent_difference(first: dict, second: dict) -> dict:
    """first - second on other questions: the normal interval of two independent proportions."""
    p, q = first["accuracy"], second["accuracy"]
    half = 1.96 * math.sqrt(p * (1 - p) / first["num_questions"] + q * (1 - q) / second["num_questions"])
    return {"difference": p - q, "ci95": [p - q - half, p - q + half]}


def differences(correct: dict[str, dict[int, dict]]) -> dict[str, dict]:
    out = {}
    for name, (first, second, split) in PAIRS.items():
        if split in correct.get(first, {}) and split in correct.get(second, {}):
            out[name] = paired_difference(correct[first][split], correct[second][split])
    for model, splits in correct.items():
        if 0 in splits and 1 in splits:
            out[f"evaluation set ({model})"] = independent_difference(score(splits[1]), score(splits[0]))
    return out


def markdown(scores: dict[str, dict[int, dict]], diffs: dict[str, dict], command: str) -> str:
    splits = sorted({split for by_split in scores.values() for split in by_split})
    sizes = ", ".join(f"split {s}: {next(by[s]['num_questions'] for by in scores.values() if s in by)}"
                      for s in splits)
    lines = [f"Command: `{command}`", "", f"Questions no compared run trained on ({sizes})", "",
             "| final model | " + " | ".join(f"split {s}" for s in splits) + " |", "|---" * (len(splits) + 1) + "|"]
    for model, by_split in scores.items():
        cells = [f"{by_split[s]['accuracy']:.3f} [{by_split[s]['ci95'][0]:.3f}, {by_split[s]['ci95'][1]:.3f}]"
                 if s in by_split else "-" for s in splits]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines += ["", "| source | difference | 95% interval |", "|---|---|---|"]
    lines += [f"| {name} | {d['difference']:+.3f} | [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] |"
              for name, d in diffs.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--num-eval", type=int, default=512, help="the runs' and the evaluations' num_eval")
    parser.add_argument("--name", default="stability_sources_arithmetic")
    args = parser.parse_args()
    correct = load(args.runs, args.num_eval)
    if not correct:
        raise SystemExit(f"no samples-<model>-split<N>.jsonl under {args.runs}: "
                         "run bench/stability/stability_sources.sh")
    scores = {model: {split: score(answers) for split, answers in splits.items()} for model, splits in correct.items()}
    diffs = differences(correct)
    command = (f"bash bench/stability/stability_sources.sh  (table: python -m bench.stability.stability_sources "
               f"{args.runs} "
               f"--num-eval {args.num_eval})")
    write_result(args.name, {"command": command, "data_seeds_left_out": list(DATA_SEEDS), "scores": scores,
                             "differences": diffs}, study="stability")
    (study_results("stability") / f"{args.name}.md").write_text(markdown(scores, diffs, command))
    print(markdown(scores, diffs, command))


if __name__ == "__main__":
    main()
