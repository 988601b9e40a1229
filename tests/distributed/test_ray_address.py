"""Cluster addresses fail fast and clearly (loopback addresses only): the form is checked before anything starts,
joining is bounded by `ray_timeout`, every failure is one line naming the address and what to check, and a
local Ray is sized to the machine, refusing workers it cannot place."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from helpers import requires_ray, tiny_config

from evotune.config.checks import check_ray_address
from evotune.errors import ConfigError


@pytest.mark.parametrize("address", ["not_an_address", "host:", ":6379", "10.0.0.5:99999", "http://10.0.0.5:80",
                                     "10.0.0.5", "two words:6379"])
def test_a_malformed_address_is_refused_before_anything_starts(address):
    with pytest.raises(ConfigError, match="is not a cluster address: give HOST:PORT"):
        check_ray_address(address)


@requires_ray
def test_an_address_from_the_environment_or_a_sweep_gets_the_same_check(monkeypatch):
    """$RAY_ADDRESS and `sweep --ray-address` reach Ray through connect(), which checks the form as the config does,
    naming where the address came from, before Ray is started (a garbage address was an int() traceback)."""
    import ray

    from evotune.distributed.ray.connection import connect

    assert not ray.is_initialized()
    monkeypatch.setenv("RAY_ADDRESS", "garbage")
    with pytest.raises(ConfigError, match=r"^\$RAY_ADDRESS is 'garbage', which is not a cluster address"):
        connect(None)
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(ConfigError, match=r"^`ray_address` is 'host:', which is not a cluster address"):
        connect("host:")  # what sweep --ray-address passes
    assert not ray.is_initialized()


@pytest.mark.parametrize("address", [None, "auto", "10.0.0.5:6379", "ray://head.example:10001", "[::1]:6379",
                                     "localhost:1"])
def test_well_formed_addresses_pass(address):
    check_ray_address(address)


def test_the_config_names_only_the_key_that_is_wrong(tiny_model_dir):
    with pytest.raises(ConfigError, match=r"^`straggler_factor` is -1\.0; give a factor above 1"):
        tiny_config(tiny_model_dir, distributed="ray", workers=2, straggler_factor=-1.0)
    with pytest.raises(ConfigError, match=r"^`prompt_shards` is 0; give at least 1"):
        tiny_config(tiny_model_dir, distributed="ray", workers=2, prompt_shards=0)
    with pytest.raises(ConfigError, match=r"^`workers` is 0; give the number of model replicas") as refused:
        tiny_config(tiny_model_dir, distributed="ray", workers=0)
    assert "set `distributed: ray`" not in str(refused.value)
    with pytest.raises(ConfigError, match="`ray_address` is 'nowhere'"):
        tiny_config(tiny_model_dir, distributed="ray", workers=2, ray_address="nowhere")
    with pytest.raises(ConfigError, match="`ray_timeout` is 0"):
        tiny_config(tiny_model_dir, distributed="ray", workers=2, ray_timeout=0)


def train_with(tiny_model_dir, tmp_path, *settings, timeout=120) -> tuple[subprocess.CompletedProcess, float]:
    """`evotune train` on the tiny model in its own process (no Ray of this test process involved)."""
    command = [sys.executable, "-m", "evotune.cli.main", "train", "--output-dir", str(tmp_path / "run"),
               "--set", f"model={tiny_model_dir}", "--set", "report_to=[]", "--set", "iterations=1",
               "--set", "population_size=2", "--set", "batch_size=2", "--set", "distributed=ray", *settings]
    environment = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment)
    return done, time.perf_counter() - started


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """evotune's error paragraph (the CLI wraps it at the terminal's width), its whitespace made single spaces."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    message = done.stderr[done.stderr.index("evotune: error:"):]
    return " ".join(message.split())


@pytest.mark.engine  # waits out Ray's connect: the engine tier
@requires_ray
def test_a_closed_port_fails_in_seconds_naming_what_to_check(tiny_model_dir, tmp_path):
    done, seconds = train_with(tiny_model_dir, tmp_path, "--set", "workers=2", "--set", "ray_address=127.0.0.1:1")
    error = one_line_error(done)
    assert "`ray_address` 127.0.0.1:1: nothing answers at 127.0.0.1 port 1" in error and "ray start --head" in error
    assert seconds < 60
    assert not (tmp_path / "run" / "checkpoint").exists()


@pytest.mark.engine  # waits out ray_timeout: the engine tier
@requires_ray
def test_an_address_where_no_ray_answers_stops_after_ray_timeout(tiny_model_dir, tmp_path):
    """Something listens on the port but never speaks Ray's protocol: ray.init would retry for minutes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = []
    threading.Thread(target=lambda: [accepted.append(server.accept()) for _ in range(8)], daemon=True).start()
    port = server.getsockname()[1]
    try:
        done, seconds = train_with(tiny_model_dir, tmp_path, "--set", "workers=2", "--set",
                                   f"ray_address=127.0.0.1:{port}", "--set", "ray_timeout=5")
    finally:
        server.close()
    error = one_line_error(done)
    # Ray gives up by itself after its own GCS timeout (5 s), or evotune after ray_timeout: either way one line
    assert (f"127.0.0.1:{port}: something answers there but did not complete Ray's handshake within 5 s" in error
            or f"127.0.0.1:{port}: Ray could not join the cluster" in error), error
    assert "RAY_AUTH_MODE=token" in error and "ray status" in error
    assert seconds < 90


@requires_ray
@pytest.mark.slow  # ~18 s of Ray start-up; the address checks above run in CI
def test_workers_a_local_ray_cannot_place_are_refused_up_front(tiny_model_dir, tmp_path):
    done, seconds = train_with(tiny_model_dir, tmp_path, "--set", "workers=1000")
    error = one_line_error(done)
    cores = len(os.sched_getaffinity(0))
    assert f"`workers` 1000 x `worker_num_cpus` 1 need 1000 CPUs; the local Ray has this machine's {cores}" in error
    assert f"Set `workers` to {cores} or fewer" in error
    assert seconds < 90


@requires_ray
def test_auto_that_finds_this_machines_cluster_but_cannot_join_names_it_and_token_auth(tmp_path, monkeypatch):
    """`auto` reads the address `ray start` recorded; when joining it fails (a token cluster joined without its
    token), the message must not say that no cluster runs: it names the one found and the token setting."""
    from evotune.distributed.ray import connection

    recorded = tmp_path / "ray_current_cluster"
    monkeypatch.setattr(connection, "CURRENT_CLUSTER", recorded)

    class Refusing:  # a stand-in for ray.init's failure to join (the real one: bench/reliability/cluster.py)
        @staticmethod
        def init(**kwargs):
            raise ConnectionError("authentication failed")

    with pytest.raises(ConfigError, match="no running Ray cluster was found"):
        connection._init_bounded(Refusing, "auto", "`ray_address`", timeout=5)
    recorded.write_text("10.1.2.3:6379\n")
    with pytest.raises(ConfigError) as refused:
        connection._init_bounded(Refusing, "auto", "`ray_address`", timeout=5)
    message = str(refused.value)
    assert "10.1.2.3:6379" in message and "RAY_AUTH_MODE=token" in message and "no running" not in message


@pytest.mark.engine  # a real cluster started with the ray CLI
@requires_ray
def test_auto_against_a_token_cluster_without_its_token_names_the_cluster_and_token_auth(tiny_model_dir, tmp_path):
    """`ray start --head` with token authentication records its address where `auto` looks; a driver without the
    token found it and could not join, and was told that no cluster runs. It must name the cluster and the token
    setting instead."""
    import secrets

    from bench.reliability.cluster import free_port, own_head, token_environment

    free = free_port()
    environment = token_environment({key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"},
                                    secrets.token_hex(16))
    # only this head is stopped afterwards: `ray stop --force` killed the test runner's own in-process Ray, and the
    # runner with it
    with own_head(environment, free):
        done, _ = train_with(tiny_model_dir, tmp_path, "--set", "workers=1", "--set", "ray_address=auto",
                             "--set", "ray_timeout=20")
    error = one_line_error(done)
    assert "no running Ray cluster was found" not in error, error
    # the address `ray start` recorded (its node's IP, at the head's port) and the token setting
    assert f":{free}" in error and "left running here" in error and "RAY_AUTH_MODE=token" in error, error
