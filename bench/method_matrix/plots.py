"""The method matrix's plots, from bench/results/method_matrix/ alone: held-out accuracy per arm with every seed
shown, accuracy against the KL to the start, and the training reward over time. One colour per method (the same in
every plot), one marker per seed."""

from __future__ import annotations

from pathlib import Path

from bench.method_matrix.arms import METHODS, TASKS, TRAINING_SECONDS
from bench.method_matrix.rows import STUDY, arms, sft_alone, start
from bench.method_matrix.tables import TASK_NAMES

COLOURS = {"full_es": "#1f77b4", "es_lora": "#17becf", "lowrank": "#2ca02c", "mezo": "#8c564b", "essa": "#9467bd",
           "grpo_lora": "#d62728", "grpo_full": "#ff7f0e"}
MARKERS = ["o", "s", "^", "D", "v"]  # seed 0, 1, 2, 3, 4


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def accuracy_plot(results: Path, output: Path) -> Path:
    """Held-out accuracy of every run, a column per method and a panel per task; the arm's mean as a bar."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(TASKS), figsize=(6 * len(TASKS), 4.5), squeeze=False)
    for axis, task in zip(axes[0], TASKS, strict=True):
        for column, found in enumerate(arms(results, task)):
            colour = COLOURS[found.method]
            for run in found.runs:  # an open marker: a run step-matched on another machine type (the tables' mark)
                axis.scatter(column, run.accuracy, edgecolors=colour, facecolors="none" if run.step_matched else colour,
                             marker=MARKERS[run.seed % len(MARKERS)], zorder=3)
            if found.runs:
                axis.hlines(found.mean, column - 0.3, column + 0.3, color=colour, linewidth=2)
        # the base model, or on a warm-start task the mean of the seeds' SFT starts measured so far
        starts = [record["accuracy"] for seed in TASKS[task]["seeds"]
                  if (record := start(results, task, seed)) is not None]
        if starts:
            label = ("the start (base model)" if not TASKS[task]["warm_start"] else
                     f"the start (SFT, mean of {len(starts)} seed{'s' if len(starts) > 1 else ''})")
            axis.axhline(100 * sum(starts) / len(starts), color="grey", linestyle="--", linewidth=1, label=label)
        alone = sft_alone(results, task)  # where only ESSA starts from an SFT: that SFT measured alone
        if alone:
            seeds = f"{len(alone)} seed{'s' if len(alone) > 1 else ''}"
            axis.axhline(sum(run.accuracy for run in alone) / len(alone), color=COLOURS["essa"], linestyle=":",
                         linewidth=1, label=f"ESSA's SFT alone (mean of {seeds})")
        if starts or alone:
            axis.legend(loc="lower right", fontsize=8)
        axis.set_xticks(range(len(METHODS)), [spec["label"] for spec in METHODS.values()], rotation=25, ha="right")
        axis.set_ylabel("held-out accuracy (%)")
        axis.set_title(f"{TASK_NAMES[task]}: after {TRAINING_SECONDS / 60:.0f} min at one CPU thread", fontsize=10)
    handles = [plt.Line2D([], [], color="black", marker=marker, linestyle="", label=f"seed {seed}")
               for seed, marker in enumerate(MARKERS)]
    handles.append(plt.Line2D([], [], color="black", marker="o", markerfacecolor="none", linestyle="",
                              label="step-matched on another CPU"))
    figure.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8)
    figure.tight_layout(rect=(0, 0, 1, 0.93))
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def accuracy_kl_plot(results: Path, output: Path) -> Path:
    """Held-out accuracy against the KL to the start on other tasks' prompts, 2-digit addition, every run."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6.5, 4.5))
    for found in arms(results, "arithmetic"):
        for index, run in enumerate(found.runs):
            axis.scatter(run.mean_kl, run.accuracy, color=COLOURS[found.method],
                         marker=MARKERS[run.seed % len(MARKERS)], label=found.label if index == 0 else None)
    axis.set_xlabel("KL to the start on conciseness and IFEval prompts (per token)")
    axis.set_ylabel("held-out accuracy (%)")
    axis.set_title("2-digit addition: what each run learned against how far it moved", fontsize=10)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def reward_plot(results: Path, output: Path) -> Path:
    """Mean training reward against training seconds (SFT charged to ESSA), a panel per method, a line per seed."""
    plt = _pyplot()
    figure, axes = plt.subplots(2, 3, figsize=(12, 6), sharex=True, sharey=True)
    for axis, found in zip(axes.flat, arms(results, "arithmetic"), strict=False):
        for run in found.runs:
            curve = run.data["training"]["reward_curve"]
            axis.plot([point[0] for point in curve], [point[1] for point in curve], color=COLOURS[found.method],
                      marker=MARKERS[run.seed % len(MARKERS)], markersize=3, linewidth=1, label=f"seed {run.seed}")
        axis.set_title(found.label + ("" if found.runs else " (not run yet)"), fontsize=10)
        axis.set_xlabel("training seconds")
        axis.set_ylabel("mean training reward")
        if found.runs:
            axis.legend(fontsize=7)
    figure.suptitle("2-digit addition: training reward over the equal training time", fontsize=11)
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def write_plots(results: Path = STUDY) -> list[Path]:
    return [accuracy_plot(results, results / "accuracy.png"), accuracy_kl_plot(results, results / "accuracy_kl.png"),
            reward_plot(results, results / "training_reward.png")]
