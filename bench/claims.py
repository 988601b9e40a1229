"""Measured numbers quoted in README.md and docs/, rendered from their result files.

A quoted claim sits between `<!-- claim:NAME -->` and `<!-- /claim -->`. `tests/test_claims.py` fails when the
text there differs from what NAME renders from `bench/results/`, so a number cannot outlive its data;
`docs/hooks.py` renders the docs site's copies at build time; `python bench/claims.py --update` rewrites every
quoted span from the result files (after a study re-ran).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SPAN = re.compile(r"<!-- claim:(?P<name>[\w-]+) -->(?P<text>.*?)<!-- /claim -->", re.S)
QUOTING_FILES = ("README.md", "docs/*.md")


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def quickstart() -> str:
    data = _load("quickstart_heldout.json")
    budget, summary = str(data["eval_max_new_tokens"]), data["gain_over_seeds"]
    runs = data["runs"]
    after = ", ".join(f"{100 * run['accuracy'][budget]:.1f}%" for run in runs)
    intervals = ", ".join(f"[{run['gain_ci95'][0]:+.1f}, {run['gain_ci95'][1]:+.1f}]" for run in runs)
    minutes = [run["wall_time_s"] / 60 for run in runs]
    largest = max(runs[0]["gain_points_by_budget"], key=int)
    at_largest = sum(run["gain_points_by_budget"][largest] for run in runs) / len(runs)
    return (f"base {100 * data['base']['accuracy'][budget]:.1f}% -> {after} (seeds "
            f"{', '.join(str(run['seed']) for run in runs)}): a gain of {summary['mean']:.1f} points on average "
            f"(std {summary['std']:.1f}; per seed 95% intervals {intervals}), n = {data['num_prompts']} fresh "
            f"questions scored at {budget} new tokens ({at_largest:.1f} points at {largest}), each run "
            f"{min(minutes):.1f}-{max(minutes):.1f} minutes on {runs[0]['threads']} CPU cores")


def stability_arithmetic() -> str:
    spread = _load("stability_eval_budget_arithmetic.json")["spread"]["accuracy"]
    es, grpo = spread["es"]["48"], spread["grpo"]["48"]
    return (f"ES {es['mean']:.1f}% with std {es['std']:.1f} points, GRPO {grpo['mean']:.1f}% with std "
            f"{grpo['std']:.1f} (5 seeds each, 30 minutes of training at one CPU thread, n = 512, 48 tokens)")


def stability_budget() -> str:
    method = _load("stability_budget_arithmetic/compare.json")["methods"][0]
    values = [100 * value for value in method["final_per_seed"]]
    mean = sum(values) / len(values)
    std = (sum((value - mean) ** 2 for value in values) / (len(values) - 1)) ** 0.5
    return f"{mean:.1f}% with std {std:.1f} points ({len(values)} seeds, same budget and n)"


def gpu_h200() -> str:
    rows = {row["method"].split(" (")[0]: row for row in _load("gpu_h200_hf.json")["rows"]}
    full, low = rows["full ES"], rows["low-rank ES"]
    return (f"full ES {full['candidate_evals_per_second']:.1f} candidate evals/s ({full['seconds_per_iteration']} s "
            f"per iteration), low-rank ES {low['candidate_evals_per_second']:.1f} "
            f"({low['seconds_per_iteration']} s per iteration; held-out {low['accuracy_before']}% -> "
            f"{low['accuracy_after']}% in {low['after_seconds']} s)")


def drift_arithmetic() -> str:
    data = _load("drift_arithmetic.json")
    final, equal = data["methods"], data["at_equal_target"]["methods"]
    names = {"es": "full ES", "lowrank": "low-rank ES", "grpo": "GRPO"}
    accuracy = ", ".join(f"{label} {100 * final[key]['target_accuracy']['mean']:.1f}%" for key, label in names.items())
    kl = ", ".join(f"{label} {equal[key]['retain/conciseness/kl']['mean']:.4f}" for key, label in names.items())
    return (f"after 30 minutes at one CPU thread, {accuracy} (untruncated, 2 seeds each, n = 512); KL to the base "
            f"on another task's prompts at equal accuracy ({100 * data['at_equal_target']['level']:.1f}%): {kl}")


def lowrank_throughput_cpu() -> str:
    data = _load("lowrank_throughput.json")
    ratios = {key.split("_")[0]: value["speedup_over_full"]["lowrank_batched"]
              for key, value in data["results"].items()}
    return (", ".join(f"{ratio:.2f}x at {prompts} prompts per member" for prompts, ratio in ratios.items())
            + f" ({data['dtype']}, {data['torch_threads']} thread)")


CLAIMS: dict[str, Callable[[], str]] = {
    "drift-arithmetic": drift_arithmetic, "lowrank-throughput-cpu": lowrank_throughput_cpu,
    "quickstart": quickstart, "stability-arithmetic": stability_arithmetic, "stability-budget": stability_budget,
    "gpu-h200": gpu_h200}


def render(name: str) -> str:
    if name not in CLAIMS:
        raise KeyError(f"no claim named {name!r} in bench/claims.py (known: {', '.join(CLAIMS)})")
    return CLAIMS[name]()


def substitute(text: str) -> str:
    """Every quoted span rendered anew from the result files."""
    return SPAN.sub(lambda m: f"<!-- claim:{m['name']} -->{render(m['name'])}<!-- /claim -->", text)


def quoting_files() -> list[Path]:
    return sorted({path for pattern in QUOTING_FILES for path in ROOT.glob(pattern)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="rewrite the quoted spans from the result files")
    args = parser.parse_args()
    for path in quoting_files():
        text = path.read_text()
        fresh = substitute(text)
        if fresh != text:
            print(f"{'updated' if args.update else 'stale'}: {path.relative_to(ROOT)}")
            if args.update:
                path.write_text(fresh)


if __name__ == "__main__":
    main()
