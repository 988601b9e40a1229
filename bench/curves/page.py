"""The learning curves' page: template and transfer accuracy against the run's own CPU seconds per arm (seed bands),
the CPU seconds each arm took to reach 30/40/50% on the template, the slope over its last 20 minutes with an
interval, and one sentence per arm that its numbers support. Read from bench/results/curves/scores/ (score.py).

    python -m bench.curves.page          # the plot (bench/results/curves/curves.png); the table is a claim
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from scipy.stats import t as t_distribution

from .arms import RESULTS

THRESHOLDS = (0.30, 0.40, 0.50)
LAST_SECONDS = 1200.0  # the last 20 minutes of a 2-thread run: 1,200 CPU seconds at the quickstart's shape


def load_scores(results: Path = RESULTS) -> dict[str, list[dict[str, Any]]]:
    """{arm: [each seed's score file]}, arms in the order their files sort."""
    arms: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((results / "scores").glob("*.json")):
        record = json.loads(path.read_text())
        arms.setdefault(record["arm"], []).append(record)
    return arms


def mean_curve(seeds: list[dict[str, Any]], which: str) -> list[tuple[float, float, float, float]]:
    """(mark in CPU seconds, mean, lowest, highest) over the seeds at every mark all of them reached."""
    marks = sorted(set.intersection(*({mark["mark_cpu_s"] for mark in seed["marks"]} for seed in seeds)))
    curve = []
    for mark in marks:
        values = [next(item[which]["accuracy"] for item in seed["marks"] if item["mark_cpu_s"] == mark)
                  for seed in seeds]
        curve.append((mark, sum(values) / len(values), min(values), max(values)))
    return curve


def time_to_reach(curve: list[tuple[float, float, float, float]], threshold: float) -> float | None:
    """The first mark at which the seeds' mean reached `threshold` (None: not within the run)."""
    return next((mark for mark, mean, _, _ in curve if mean >= threshold), None)


def last_slope(seeds: list[dict[str, Any]], which: str = "template",
               last: float = LAST_SECONDS) -> tuple[float, float, float] | None:
    """The least-squares slope of accuracy on CPU seconds over every seed's marks in the last `last` seconds of the
    runs (seed offsets removed), in points per 10 minutes of CPU, with its 95% t interval; None below 3 points."""
    end = min(max(item["mark_cpu_s"] for item in seed["marks"]) for seed in seeds)
    points = []  # (seed, seconds, accuracy)
    for index, seed in enumerate(seeds):
        points += [(index, item["mark_cpu_s"], item[which]["accuracy"]) for item in seed["marks"]
                   if end - last <= item["mark_cpu_s"] <= end]
    centred = []
    for index in {seed for seed, _, _ in points}:
        mine = [(x, y) for seed, x, y in points if seed == index]
        mean_x, mean_y = sum(x for x, _ in mine) / len(mine), sum(y for _, y in mine) / len(mine)
        centred += [(x - mean_x, y - mean_y) for x, y in mine]
    sxx = sum(x * x for x, _ in centred)
    freedom = len(centred) - 1 - len({seed for seed, _, _ in points})  # one mean per seed and the slope
    if sxx == 0 or freedom < 1:
        return None
    slope = sum(x * y for x, y in centred) / sxx
    residual = sum((y - slope * x) ** 2 for x, y in centred) / freedom
    half = t_distribution.ppf(0.975, freedom) * math.sqrt(residual / sxx)  # the slope's 95% t interval
    scale = 100 * 600  # accuracy per CPU second -> points per 600 CPU seconds
    return slope * scale, (slope - half) * scale, (slope + half) * scale


def still_iterations(seeds: list[dict[str, Any]], results: Path = RESULTS) -> tuple[int, int] | None:
    """(iterations that moved nothing, iterations) over an ES arm's seeds, read from the update logs the runs kept
    (replay/ARM_seedN/updates.json): an iteration whose coefficients are all 0 had every candidate score alike, so
    its step was nil. MeZO's two candidates on a reward of whole answers tie often. None: no kept log (GRPO)."""
    from evotune.files.checkpoint import _load_update_log

    logs = [results / "replay" / f"{seed['arm']}_seed{seed['seed']}" / "updates.json" for seed in seeds]
    if not all(log.is_file() for log in logs):
        return None
    entries = [entry for log in logs for entry in _load_update_log(log)]
    return sum(not any(entry["coefficients"]) for entry in entries), len(entries)


def sentence(label: str, curve: list, transfer: list, slope: tuple[float, float, float] | None,
             still: tuple[int, int] | None = None) -> str:
    """What the arm's numbers support, in one sentence; `still`: still_iterations's count, named where any was."""
    by_time: dict[float, list[str]] = {}  # thresholds first reached at one mark are named together
    for threshold in THRESHOLDS:
        seconds = time_to_reach(curve, threshold)
        if seconds is not None:
            by_time.setdefault(seconds, []).append(f"{100 * threshold:.0f}%")
    best = [f"{', '.join(names[:-1]) + ' and ' if len(names) > 1 else ''}{names[-1]} by {seconds:,.0f} CPU s"
            for seconds, names in by_time.items()]
    start, end = curve[0][1], curve[-1][1]
    first, last = f"{100 * transfer[0][1]:.1f}%", f"{100 * transfer[-1][1]:.1f}%"  # one figure: "stayed at"
    text = (f"{label} went from {100 * start:.1f}% to {100 * end:.1f}% on the template"
            + (f" (reaching {', '.join(best)})" if best else f" (not reaching {100 * THRESHOLDS[0]:.0f}%)")
            + (f" and stayed at {first} past it" if first == last else f" and from {first} to {last} past it"))
    if still and still[0]:
        text += (f"; {still[0]:,} of its {still[1]:,} iterations ({100 * still[0] / still[1]:.0f}%) moved nothing "
                 "(every candidate scored alike)")
    if slope is None:
        return text + "; too few marks to read its last slope."
    value, low, high = slope
    trend = "still rising" if low > 0 else "falling" if high < 0 else "flat within the noise"
    return text + (f"; over its last 20 minutes {value:+.1f} points per 10 CPU-minutes [{low:+.1f}, {high:+.1f}]: "
                   f"{trend}.")


def share(fraction: float) -> str:
    """A share in percent, whole where that is exact to a tenth, else to a tenth: 0.8958 reads 89.6%, not a 90% that
    sits on the flag's own threshold."""
    percent = 100 * fraction
    return f"{percent:.0f}%" if abs(percent - round(percent)) < 0.05 else f"{percent:.1f}%"


def transfer_cut(seeds: list[dict[str, Any]]) -> str:
    """Where, at a seed's last mark, the transfer split's scored budget ended fewer than ENDED_SHARE_FLAG of its
    answers (the method study's flag), which of three things that means. 'answers cut' where the largest budget
    checked scored more for some seed: the score at the scored budget is a floor. Where it scored less (answers that
    run on change a correct one), it says so, with that score. Otherwise the unended answers run on without changing
    the score (a model that loops, not a budget that cuts):
    ' (80.2% ended within 192 tokens, 81.2% within 256; scored the same from 64 to 256)'."""
    from bench.method_matrix.tables import ENDED_SHARE_FLAG

    lasts = [seed["marks"][-1]["transfer"] for seed in seeds]
    scored = str(lasts[0].get("scored_budget"))
    ended = min(last.get("ended_by_budget", {}).get(scored, 1.0) for last in lasts)
    if ended >= ENDED_SHARE_FLAG:
        return ""
    budgets = sorted(int(budget) for budget in lasts[0]["accuracy_by_budget"])  # (64, 128, 192, 256)
    largest = str(budgets[-1])
    ended_largest = min(last["ended_by_budget"][largest] for last in lasts)
    shares = f"{share(ended)} ended within {scored} tokens, {share(ended_largest)} within {largest}"
    at_largest = sum(last["accuracy_by_budget"][largest] for last in lasts) / len(lasts)
    changes = [last["accuracy_by_budget"][largest] - last["accuracy_by_budget"][scored] for last in lasts]
    if any(change > 0 for change in changes):
        return f" (answers cut: {shares}, which scored {100 * at_largest:.1f}%)"
    if any(change < 0 for change in changes):
        return f" ({shares}, which scored {100 * at_largest:.1f}%: answers that ran on lost correct ones)"
    # the smallest budget from which every seed's score stays what it is at the largest
    settled = min(budget for budget in budgets if all(
        last["accuracy_by_budget"][str(later)] == last["accuracy_by_budget"][largest]
        for last in lasts for later in budgets if later >= budget))
    return f" ({shares}; scored the same from {settled} to {largest})"


def curves_table(results: Path = RESULTS) -> str:
    """The curves page's table (a claim): per arm, its seeds, where it started and ended, the CPU seconds to reach
    each threshold, its last slope. Its sentence per arm (`sentence`) is the page's meaning, a claim of its own."""
    arms = load_scores(results)
    if not arms:
        return "not run yet (`python -m bench.curves.run`, then `python -m bench.curves.score`)"
    heads = " | ".join(f"CPU s to {100 * threshold:.0f}%" for threshold in THRESHOLDS)
    lines = ["", "", f"| arm | seeds | template: start -> end | transfer: start -> end | {heads} | last 20 minutes, "
             "points per 10 CPU-minutes [95%] |", "|---" * (5 + len(THRESHOLDS)) + "|"]
    for seeds in arms.values():
        label = seeds[0]["label"]
        curve, transfer = mean_curve(seeds, "template"), mean_curve(seeds, "transfer")
        slope = last_slope(seeds)
        reached = " | ".join(f"{seconds:,.0f}" if seconds is not None else "not reached"
                             for seconds in (time_to_reach(curve, threshold) for threshold in THRESHOLDS))
        slope_text = f"{slope[0]:+.1f} [{slope[1]:+.1f}, {slope[2]:+.1f}]" if slope else "too few marks"
        lines.append(f"| {label} | {len(seeds)} | {100 * curve[0][1]:.1f}% -> {100 * curve[-1][1]:.1f}% | "
                     f"{100 * transfer[0][1]:.1f}% -> {100 * transfer[-1][1]:.1f}%{transfer_cut(seeds)} | {reached} | "
                     f"{slope_text} |")
    waiting = [path.stem.replace("_seed", " seed ") for path in sorted((results / "runs").glob("*.json"))
               if not (results / "scores" / path.name).is_file()]
    if waiting:  # a run trained in one session and scored in a later one (an ES run's kept replay)
        lines += ["", f"Trained, not scored yet (not in the table): {', '.join(waiting)}."]
    return "\n".join(lines) + "\n"


def plot(results: Path = RESULTS) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for index, seeds in enumerate(load_scores(results).values()):
        for axis, which in zip(axes, ("template", "transfer")):
            curve = mean_curve(seeds, which)
            marks = [mark for mark, *_ in curve]
            axis.plot(marks, [100 * mean for _, mean, _, _ in curve], color=f"C{index}",
                      label=f"{seeds[0]['label']} ({len(seeds)} seed{'s' if len(seeds) > 1 else ''})")
            axis.fill_between(marks, [100 * low for *_, low, _ in curve], [100 * high for *_, high in curve],
                              color=f"C{index}", alpha=0.2)
    for axis, title in zip(axes, ("held-out, training template", "transfer split (never trained on)")):
        axis.set_title(title)
        axis.set_xlabel("the run's own CPU seconds")
    axes[0].set_ylabel("accuracy (%): seeds' mean\nband: lowest to highest seed")
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    out = results / "curves.png"
    figure.savefig(out, dpi=120)
    return out


if __name__ == "__main__":
    print(f"wrote {plot()}")
