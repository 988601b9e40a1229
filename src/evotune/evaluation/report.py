"""`evotune eval`'s outputs for people: the text table and the reward-vs-KL plot (scoring is in `evaluate`)."""

from __future__ import annotations


def plot_reward_vs_kl(results: list[dict], path: str, title: str = "") -> None:
    """Each model as a point (KL per token, accuracy or reward): Qiu et al.'s Pareto view."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = "accuracy" if "accuracy" in results[0] else "reward"
    figure, axis = plt.subplots(figsize=(6, 4))
    for index, result in enumerate(results):
        axis.scatter(result["kl_per_token"], result[key], color=f"C{index}", label=result["model"], zorder=3)
    axis.set(xlabel="KL(model || reference) per token (k3)", ylabel=f"held-out {key}", title=title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def format_table(results: list[dict]) -> str:
    """A plain text table: one row per model, scalar metrics as columns."""
    keys = [key for key in results[0] if key not in ("model", "task") and not isinstance(results[0][key], list)]
    lines = [" | ".join(["model"] + keys)]
    for result in results:
        cells = [result["model"]]
        for key in keys:
            value = result.get(key, "")
            cells.append(f"{value:.4f}" if isinstance(value, float) else str(value))
            if f"{key}_ci95" in result:
                low, high = result[f"{key}_ci95"]
                cells[-1] += f" [{low:.3f}, {high:.3f}]"
        lines.append(" | ".join(cells))
    return "\n".join(lines)
