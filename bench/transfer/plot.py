"""The transfer experiments' plot: each variant's gain on the template's held-out questions against its gain on the
transfer split, one point per seed (bench/results/transfer/*.json -> transfer_gains.png).

    python -m bench.transfer.plot
"""

from __future__ import annotations

from bench.common import study_results

from .variants import LABELS, result_files, variant


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = study_results("transfer")
    runs = [run for data in result_files(folder) for run in data["runs"]]
    figure, axes = plt.subplots(figsize=(7.5, 5))
    for index, name in enumerate(LABELS):
        mine = [run for run in runs if variant(run["run"]) == name]
        if mine:
            axes.scatter([run["gain_points"] for run in mine], [run["transfer"]["gain_points"] for run in mine],
                         label=LABELS[name], color=f"C{index}", marker="s" if name == "grpo_lora" else "o", s=40)
    axes.axhline(0, color="grey", linewidth=0.8)
    axes.axvline(0, color="grey", linewidth=0.8)
    axes.set_xlabel("gain on held-out questions in the training template (points)")
    axes.set_ylabel("gain on the transfer split (points)")
    axes.set_title("What each variant learned, in its template and past it (one point per seed)")
    axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    figure.savefig(folder / "transfer_gains.png", dpi=120)
    print(f"wrote {folder / 'transfer_gains.png'}")


if __name__ == "__main__":
    main()
