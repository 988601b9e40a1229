"""Round 4's cluster cases, on a real Ray cluster started with the `ray` CLI on this machine, as a user starts one:

* a token-authenticated cluster (`RAY_AUTH_MODE=token` at `ray start`): a driver without that mode must be refused
  in one line that names `RAY_AUTH_MODE=token`; with the mode and the token it must train;
* two nodes (a head and a second node, each its own raylet): the second node's raylet killed with `kill -9` after
  the run's first iteration; the run must finish, its lost actor replaced, and end bit for bit on the weights of
  the same run in one process.

Each case stops every Ray process of this machine at its end (`ray stop --force`): run round 4 on a machine with no
other Ray at work. Used by bench/reliability/round4.py.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.reliability.harness import ENVIRONMENT, Case, Result, base_values, cli, flat, run, write_yaml
from evotune.distributed.ray.connection import CURRENT_CLUSTER  # where `auto` looks

RAY_CLI = ["ray"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class CliCluster:
    """A Ray cluster of `ray start` processes on this machine: the head, then any further nodes, each its own
    raylet on its own ports (as on separate machines, only without a network between them)."""

    def __init__(self, environment: dict[str, str]):
        self.environment = environment
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Ray's socket paths must stay short: a temp dir under /tmp, not the work dir
        self.temp_dir = tempfile.mkdtemp(prefix="evotune-ray-")
        self.node_ports: list[int] = []

    def _start(self, *arguments: str) -> None:
        done = subprocess.run([*RAY_CLI, "start", *arguments, "--disable-usage-stats"], env=self.environment,
                              capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise RuntimeError(f"`ray start {' '.join(arguments)}` failed: {flat(done.stderr)[-600:]}")

    def start_head(self, num_cpus: int) -> CliCluster:
        self._start("--head", "--port", str(self.port), "--num-cpus", str(num_cpus), "--temp-dir", self.temp_dir,
                    "--include-dashboard", "false", "--node-ip-address", "127.0.0.1")
        return self

    def add_node(self, num_cpus: int) -> int:
        """A second raylet joining the head; returns its node-manager port (what finds its process)."""
        node_port = free_port()
        self._start("--address", self.address, "--num-cpus", str(num_cpus), "--node-manager-port", str(node_port),
                    "--object-manager-port", str(free_port()), "--node-ip-address", "127.0.0.1")
        self.node_ports.append(node_port)
        return node_port

    def raylet_pid(self, node_port: int) -> int:
        import psutil

        for process in psutil.process_iter(["pid", "cmdline"]):
            command = " ".join(process.info["cmdline"] or [])
            if "raylet" in command and f"--node_manager_port={node_port}" in command:
                return process.info["pid"]
        raise RuntimeError(f"no raylet with node manager port {node_port} is running")

    def stop(self) -> None:
        subprocess.run([*RAY_CLI, "stop", "--force"], env=self.environment, capture_output=True, timeout=120)


@contextmanager
def own_head(environment: dict[str, str], port: int, num_cpus: int = 1) -> Iterator[None]:
    """A `ray start --head` at the default temp dir (where `ray_address: auto` looks), stopped by killing only its own
    process group. `ray stop --force` would also kill every other Ray on the machine, a test runner's in-process
    Ray included, and the process that started it dies with it. One such head at a time on this machine (a file
    lock, across the test tier's worker processes): two heads in the default temp dir share its `session_latest`,
    and a driver then read the other head's token ("Authentication token is missing or incorrect")."""
    import fcntl

    with open(HEAD_LOCK, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield from _own_head(environment, port, num_cpus)


HEAD_LOCK = Path(tempfile.gettempdir()) / "evotune-ray-default-head.lock"


def _own_head(environment: dict[str, str], port: int, num_cpus: int) -> Iterator[None]:
    head = subprocess.Popen([*RAY_CLI, "start", "--head", "--block", "--port", str(port), "--num-cpus", str(num_cpus),
                             "--include-dashboard", "false", "--node-ip-address", "127.0.0.1",
                             "--disable-usage-stats"], env=environment, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while f":{port}" not in (CURRENT_CLUSTER.read_text() if CURRENT_CLUSTER.exists() else ""):
            if head.poll() is not None:
                raise RuntimeError(f"`ray start --head` failed: {flat(head.stderr.read())[-600:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("`ray start --head` did not record its address in 180 s")
            time.sleep(0.2)
        yield
    finally:
        # --block keeps the head's processes (GCS, raylet, its workers) in this one session
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()


def token_environment(environment: dict[str, str], token: str) -> dict[str, str]:
    return {**environment, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}


def token_cluster(model: Path, work: Path) -> Result:
    """A driver without token mode is refused by name; with it the run trains (Result.out: what went wrong)."""
    token = secrets.token_hex(16)
    cluster = CliCluster(token_environment(ENVIRONMENT, token))
    started, problems = time.perf_counter(), []
    try:
        cluster.start_head(num_cpus=2)
        values = base_values(str(model), iterations=1, eval_every=0, distributed="ray", workers=2,
                             ray_address=cluster.address, ray_timeout=20)
        config = write_yaml(work / "token.yaml", values)
        plain = run(cli("train", config, "--output-dir", work / "token_refused"))  # no RAY_AUTH_MODE
        text = flat(plain.err)
        if plain.rc == 0 or "RAY_AUTH_MODE=token" not in text or cluster.address not in text:
            problems.append(f"without token mode: exit {plain.rc}, not refused naming the address and "
                            f"RAY_AUTH_MODE=token: {text[-300:]}")
        if "Traceback" in text:
            problems.append("a Python traceback without token mode")
        with_token = subprocess.run(cli("train", config, "--output-dir", work / "token_trained"),
                                    env=token_environment(ENVIRONMENT, token), capture_output=True, text=True,
                                    timeout=600)
        if with_token.returncode != 0 or not (work / "token_trained" / "final").exists():
            problems.append(f"with token mode: exit {with_token.returncode}: {flat(with_token.stderr)[-300:]}")
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        problems.append(str(error))
    finally:
        cluster.stop()
    return Result(0, "; ".join(problems), "", time.perf_counter() - started)


def same_final_weights(first: Path, second: Path) -> int:
    """How many tensors of two runs' final models differ (-1: a final model is missing)."""
    import torch
    from safetensors.torch import load_file

    paths = [run_dir / "final" / "model.safetensors" for run_dir in (first, second)]
    if not all(path.exists() for path in paths):
        return -1
    one, two = (load_file(str(path)) for path in paths)
    if one.keys() != two.keys():
        return max(len(one), len(two))
    return sum(not torch.equal(one[name], two[name]) for name in one)


def killed_raylet(model: Path, work: Path) -> Result:
    """Two nodes, the second's raylet killed after iteration 1: the run finishes on the one-process weights."""
    # enough iterations (a fraction of a second each) that the loss is noticed while the run goes on
    values = base_values(str(model), iterations=40, eval_every=0, checkpoint_every=5)
    reference = work / "raylet_single"
    single = run(cli("train", write_yaml(work / "raylet_single.yaml", values), "--output-dir", reference), timeout=600)
    if single.rc != 0:
        return Result(0, f"the one-process run failed: {flat(single.err)[-300:]}", "", single.seconds)
    # token authentication, as Ray 2.60's `ray start --head` turns on wherever ~/.ray/auth_token exists: every
    # node and the driver carry the mode and the token
    environment = token_environment(ENVIRONMENT, secrets.token_hex(16))
    cluster = CliCluster(environment)
    started, problems = time.perf_counter(), []
    output = work / "raylet_killed"
    try:
        cluster.start_head(num_cpus=2)  # room for the replacement actor after the second node is gone
        node_port = cluster.add_node(num_cpus=1)
        config = write_yaml(work / "raylet.yaml", {**values, "distributed": "ray", "workers": 2,
                                                   "worker_num_cpus": 1, "ray_address": cluster.address})
        training = subprocess.Popen(cli("train", config, "--output-dir", output), env=environment,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        metrics = output / "metrics.jsonl"
        while training.poll() is None and time.perf_counter() - started < 300:
            if metrics.exists() and '"iteration": 1,' in metrics.read_text() and '"time_s"' in metrics.read_text():
                break
            time.sleep(0.2)
        if training.poll() is not None:
            problems.append(f"the run ended before its first iteration was recorded (exit {training.returncode})")
        else:
            os.kill(cluster.raylet_pid(node_port), signal.SIGKILL)
            _, err = training.communicate(timeout=600)
            (work / "raylet_killed.stderr").write_text(err)
            if training.returncode != 0:
                said = [line for line in err.splitlines() if "evotune" in line.lower() or "Error" in line]
                problems.append(f"the run did not finish after the raylet was killed: exit {training.returncode}: "
                                f"{flat(' '.join(said[-3:]))[-400:]}")
            else:
                replaced = max((record.get("workers_replaced", 0) for record in map(json.loads,
                                metrics.read_text().splitlines())), default=0)
                if replaced < 1:  # SPREAD put an actor on the second node: losing it must have been noticed
                    problems.append("no actor was replaced: the killed node held none, or its loss went unseen")
                differing = same_final_weights(reference, output)
                if differing:
                    problems.append(f"{differing} tensors differ from the one-process run" if differing > 0
                                    else "a final model is missing")
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        problems.append(str(error))
    finally:
        cluster.stop()
    return Result(0, "; ".join(problems), "", time.perf_counter() - started)


def cluster_cases(runs: dict, work: Path) -> list[Case]:
    def held(result: Result) -> str | None:
        return result.out or None

    return [
        Case("cluster address", "a token-authenticated cluster (ray start with RAY_AUTH_MODE=token)",
             lambda: token_cluster(runs["model"], work), outcome=held),
        Case("real cluster", "two nodes started with the ray CLI, the second's raylet killed (kill -9) after "
             "iteration 1", lambda: killed_raylet(runs["model"], work), outcome=held),
    ]
