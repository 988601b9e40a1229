"""Helpers shared by the benchmarks: RSS readings and result files."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def rss_bytes() -> int:
    """Current resident set size of this process (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS, so later peaks exclude model loading."""
    Path("/proc/self/clear_refs").write_text("5")


def cpu_facts() -> dict:
    """The CPU's model name and the flags that decide bfloat16's speed here (AMX tiles, AVX-512 BF16): what makes
    two result files' machines one machine type (a model name alone, e.g. "Intel(R) Xeon(R) Processor", does not)."""
    from evotune.backends.models import cpu_flags, cpu_model

    flags = cpu_flags()
    return {"cpu": cpu_model(), "amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags}


def machine() -> dict:
    import torch

    return {**cpu_facts(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M")}


def seed_summary(values, seeds: list) -> dict:
    """Each seed's value, their mean, standard deviation, range and a bootstrap 95% interval of the standard
    deviation (evotune compare's seed_spread, so evotune compare's tables and the stability scripts' agree)."""
    import numpy as np

    from evotune.runs.compare import seed_spread

    array = np.asarray(values, dtype=float)  # (seeds,)
    spread = seed_spread([{"final": value, "seed": seed} for value, seed in zip(array, seeds)])
    return {"per_seed": array.tolist(), "mean": float(array.mean()), "std": float(array.std(ddof=1)),
            "range": spread["final_range"], "std_ci95": spread["final_std_ci95"]}


def accuracy_by_budget(backend, task, rows: list[dict], budgets: list[int]) -> dict:
    """Accuracy per prompt with the answer cut at each budget, {budget: (prompts,)}: one greedy generation at the
    largest budget, re-decoded at each smaller one (greedy decoding's first K tokens do not depend on the budget)."""
    import numpy as np

    from evotune.evaluation.generation import generate_in_chunks

    completions = generate_in_chunks(backend, rows, max(budgets))
    tokenizer = backend.tokenizer
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in completions]
    result = {}
    for budget in budgets:
        cut = [tokenizer.decode(row[:budget], skip_special_tokens=True) for row in ids]
        result[budget] = np.asarray(task.metric_values("accuracy", rows, cut), dtype=float)  # (prompts,)
    return result


def study_results(study: str) -> Path:
    """The folder of one study's result files, bench/results/STUDY/ (created)."""
    folder = RESULTS / study
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def commit_file(path: Path, message: str, study: str) -> None:
    """Commit one result file alone (other staged changes of the checkout stay as they are), retrying while another
    git command holds the index lock; a study's runner calls it as each job's file lands."""
    folder = Path(path).parent
    for attempt in range(10):
        added = subprocess.run(["git", "add", "--", str(path)], cwd=folder, capture_output=True, text=True)
        done = added.returncode == 0 and subprocess.run(
            ["git", "commit", "-q", "-m", message, "--only", "--", str(path)], cwd=folder, capture_output=True,
            text=True).returncode == 0
        if done:
            return
        time.sleep(3 + attempt)
    print(f"{study}: could not commit {path}; commit it by hand", file=sys.stderr, flush=True)


def write_result(name: str, payload: dict, study: str) -> Path:
    """Write bench/results/STUDY/NAME.json: PAYLOAD with the machine it ran on."""
    path = study_results(study) / f"{name}.json"
    path.write_text(json.dumps({**payload, "machine": machine()}, indent=2))
    print(json.dumps(payload, indent=2))
    return path
