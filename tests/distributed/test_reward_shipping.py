"""A reward that lives only beside the config reaches the workers of a `ray start` cluster through Ray's runtime_env
(`py_modules`), as it would reach another machine: the workers import Ray's shipped copy, not the user's folder."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import TINY_EVAL_BUDGET, requires_ray

pytestmark = [*requires_ray, pytest.mark.engine]  # a `ray start` head and a pool: the engine tier

REWARD = """import os


def logged_length(prompts, completions, log, **kwargs):
    # which copy of this module scored, and in which process: the test reads it back
    with open(log[0], "a") as handle:
        handle.write(f"{os.getpid()} {__file__}\\n")
    return [min(len(completion), 8) / 8 for completion in completions]
"""


@pytest.mark.parametrize("cluster", ["ray start", "local"])
def test_a_ray_pool_scores_with_a_reward_shipped_from_beside_the_config(cluster, tiny_model_dir, tmp_path):
    """On a `ray start` head (as on a cluster of machines) and on the local Ray a run starts for itself."""
    from bench.reliability.cluster import free_port, own_head

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    name = "shipped_rewards_only_here"
    (project / f"{name}.py").write_text(REWARD)
    log = tmp_path / "scored_by.txt"
    rows = [{"prompt": f"Say {word}.", "log": str(log)} for word in ("one", "two", "three", "four", "five", "six")]
    (project / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    port = free_port()
    (project / "task.yaml").write_text(yaml.safe_dump(dict(
        model=tiny_model_dir, task="custom", dataset=str(project / "data.jsonl"), reward_fns=[f"{name}:logged_length"],
        space="lowrank", population_size=4, antithetic=True, batch_size=2, sigma=0.05, learning_rate=0.05,
        iterations=1, max_new_tokens=4, num_eval=2, eval_every=0, eval_max_new_tokens=TINY_EVAL_BUDGET,
        dtype="float32", report_to=[], distributed="ray", workers=1, ray_timeout=60,
        **({"ray_address": f"127.0.0.1:{port}"} if cluster == "ray start" else {}))))
    environment = {key: value for key, value in os.environ.items() if key not in ("RAY_ADDRESS", "PYTHONPATH")}
    if cluster == "ray start":  # token authentication in the head's shell and the driver's, as docs/ray-cluster.md
        import secrets  # says: the same token in both, whatever ~/.ray/auth_token another head left on this machine

        from bench.reliability.cluster import token_environment

        environment = token_environment(environment, secrets.token_hex(16))
    with own_head(environment, port, num_cpus=2) if cluster == "ray start" else contextlib.nullcontext():
        done = subprocess.run([sys.executable, "-m", "evotune.cli.main", "train", str(project / "task.yaml"),
                               "--output-dir", str(elsewhere / "run")], cwd=elsewhere, env=environment,
                              capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    scored = [line.split(" ", 1) for line in log.read_text().splitlines()]
    files = {Path(file) for _, file in scored}
    shipped = {file for file in files if file != project / f"{name}.py"}
    # the driver scores the held-out prompts with the user's file; the worker with Ray's copy of it
    assert project / f"{name}.py" in files, files
    assert shipped and all("runtime_resources" in str(file) and file.name == f"{name}.py" for file in shipped), files
    assert len({pid for pid, _ in scored}) >= 2  # two processes scored: the driver and the actor
