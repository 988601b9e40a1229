"""Where ES's run-to-run spread comes from (bench/stability_sources.sh): each final model's accuracy on each
held-out split, and the differences that isolate one source of randomness each, with 95% intervals.

    python bench/stability_sources.py runs/stability_sources --name stability_sources_arithmetic

Runs (seed, data_seed): es-seed0 (0, 0), es-seed1 (1, 1), noise-seed0 (1, 0), data-seed0 (0, 1). Differences:
    noise           noise-seed0 - es-seed0 on split 0    only the noise differs (same prompts, same questions)
    data            data-seed0 - es-seed0 on split 0     only the prompts trained on differ (scored on one split)
    everything      es-seed1 - es-seed0 on split 0       seed and data both differ (what seeds 0-4 sample)
    evaluation set  a model's split 1 - split 0          the same weights on other questions
An interval of a difference is the normal one for two independent proportions (conservative for two models
scored on the same questions, whose errors correlate).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

from common import RESULTS, write_result
from evotune.evaluation import wilson_interval

PAIRS = {"noise": ("noise-seed0", "es-seed0", 0), "data": ("data-seed0", "es-seed0", 0),
         "everything": ("es-seed1", "es-seed0", 0)}


def load(runs: Path) -> dict[str, dict[int, dict]]:
    """model -> split -> {accuracy, num_eval, ci95}."""
    scores: dict[str, dict[int, dict]] = {}
    for path in sorted(runs.glob("eval-*-split*.json")):
        match = re.fullmatch(r"eval-(.+)-split(\d+)\.json", path.name)
        if match:
            (result,) = json.loads(path.read_text())
            correct = round(result["accuracy"] * result["num_eval"])
            scores.setdefault(match.group(1), {})[int(match.group(2))] = {
                "accuracy": result["accuracy"], "num_eval": result["num_eval"],
                "ci95": list(wilson_interval(correct, result["num_eval"]))}
    return scores


def difference(first: dict, second: dict) -> dict:
    """first - second with the normal 95% interval of a difference of two independent proportions."""
    p, q = first["accuracy"], second["accuracy"]
    half = 1.96 * math.sqrt(p * (1 - p) / first["num_eval"] + q * (1 - q) / second["num_eval"])
    return {"difference": p - q, "ci95": [p - q - half, p - q + half]}


def differences(scores: dict[str, dict[int, dict]]) -> dict[str, dict]:
    out = {}
    for name, (first, second, split) in PAIRS.items():
        if split in scores.get(first, {}) and split in scores.get(second, {}):
            out[name] = difference(scores[first][split], scores[second][split])
    for model, splits in scores.items():
        if 0 in splits and 1 in splits:
            out[f"evaluation set ({model})"] = difference(splits[1], splits[0])
    return out


def markdown(scores: dict[str, dict[int, dict]], diffs: dict[str, dict], command: str) -> str:
    splits = sorted({split for by_split in scores.values() for split in by_split})
    lines = [f"Command: `{command}`", "", "| final model | " + " | ".join(f"split {s}" for s in splits) + " |",
             "|---" * (len(splits) + 1) + "|"]
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
    parser.add_argument("--name", default="stability_sources_arithmetic")
    args = parser.parse_args()
    scores = load(args.runs)
    if not scores:
        raise SystemExit(f"no eval-<model>-split<N>.json under {args.runs}: run bench/stability_sources.sh")
    diffs = differences(scores)
    command = f"bash bench/stability_sources.sh  (table: python bench/stability_sources.py {args.runs})"
    write_result(args.name, {"command": command, "scores": scores, "differences": diffs})
    (RESULTS / f"{args.name}.md").write_text(markdown(scores, diffs, command))
    print(markdown(scores, diffs, command))


if __name__ == "__main__":
    main()
