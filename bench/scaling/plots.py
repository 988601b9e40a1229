"""The scaling page's plots, from bench/results/scaling/ alone: peak memory and seconds per token against
parameters, log-log, one colour per arm, each arm's fitted slope in the legend; a cell that did not fit (or was
predicted not to) is an x at the memory it reached, or that its smallest unit was predicted to ask for.

    python -m bench.scaling.plots      # writes bench/results/scaling/memory.png and time.png
"""

from __future__ import annotations

from pathlib import Path

from .arms import ARMS
from .page import ran_by_arm, records, seconds_per_unit, slope
from .run import DTYPE, RESULTS


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(kind: str, results: Path = RESULTS / DTYPE, output: Path | None = None) -> Path:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8, 5.5))
    colours = plt.get_cmap("tab20")
    value = (lambda record: record["peak_rss_mib"] / 1024) if kind == "memory" else seconds_per_unit
    for index, (arm, found) in enumerate(ran_by_arm(results).items()):
        if not found:
            continue
        fitted = slope(found, value)
        label = ARMS[arm]["label"] + (f" (slope {fitted:.2f})" if fitted is not None else "")
        axes.plot([record["parameters"] for record in found], [value(record) for record in found], "o-",
                  color=colours(index), label=label)
        if kind == "memory":
            refused = [record for (_, name), record in records(results).items()
                       if name == arm and record["status"] != "ran"]
            axes.plot([record["parameters"] for record in refused],
                      [(record.get("stopped_at_mib") or record.get("predicted_peak_at_smallest_unit_mib")
                        or record["predicted_peak_mib"]) / 1024 for record in refused],
                      "x", color=colours(index), markersize=9)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("parameters (at SmolLM2's 49,152-token vocabulary)")
    axes.set_ylabel("peak RSS (GiB)" if kind == "memory" else "seconds per new token (SFT: per sequence)")
    axes.set_title("Peak memory by model size (x: did not fit, at the least it asked for)" if kind == "memory"
                   else "Time per candidate- or completion-token by model size")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7, loc="best")
    figure.tight_layout()
    output = output or results.parent / f"{kind}.png"
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def main() -> None:
    for kind in ("memory", "time"):
        print(plot(kind))


if __name__ == "__main__":
    main()
