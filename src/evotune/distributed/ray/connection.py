"""Joining Ray (a local instance, or a cluster within a bounded time with errors that say what to check), and
booking the driver replica's GPUs in Ray's books before any actor starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...config.checks import check_ray_address
from ...errors import ConfigError
from ...import_utils import is_ray_available


def import_ray():
    """The ray module, or an error that names the extra to install."""
    if not is_ray_available():
        raise ConfigError("`distributed: ray` needs Ray: pip install 'evotune[ray]' (or set `distributed: local`).")
    import ray

    return ray


def machine_cpus() -> int:
    """The CPU cores this process may use (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def connect(address: str | None, timeout: float = 30.0, py_modules: list[str] | None = None) -> Any:
    """Ray, initialized once: the cluster at `address` (or $RAY_ADDRESS), else a local instance with this
    machine's cores (and the GPUs Ray finds). "local" is explicit because a bare ray.init() joins any cluster
    that `ray start` left running on this machine. Joining a cluster is bounded by `timeout` seconds, and every
    failure is one line naming the address, what was tried and what to check. py_modules: local files or package
    folders (a reward module beside the config) that Ray ships to every worker of the job, on any node (Ray takes
    local paths only at the job's start, so a Ray this process already joined ships nothing)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    runtime_env = {"runtime_env": {"py_modules": py_modules}} if py_modules else {}
    address = address or os.environ.get("RAY_ADDRESS")
    if not address or address == "local":
        ray.init(address="local", include_dashboard=False, logging_level="ERROR", num_cpus=machine_cpus(),
                 **runtime_env)
        return ray
    source = "`ray_address`" if address != os.environ.get("RAY_ADDRESS") else "$RAY_ADDRESS"
    try:  # every route to an address (the config, $RAY_ADDRESS, sweep --ray-address) passes the config's check
        check_ray_address(address)
    except ConfigError as error:
        raise ConfigError(str(error).replace("`ray_address`", source, 1)) from None
    if address != "auto":
        _probe(address, source, timeout)
    _init_bounded(ray, address, source, timeout, runtime_env)
    return ray


CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")  # where `ray start` records this machine's newest head


def _current_cluster() -> str | None:
    """The address `ray start` recorded for a cluster on this machine (what `auto` looks for), if any."""
    try:
        return CURRENT_CLUSTER.read_text().strip() or None
    except OSError:
        return None


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    return host.strip("[]"), int(port)


def _probe(address: str, source: str, timeout: float) -> None:
    """A TCP connection to the head's port first: a closed port or an unreachable host fails here in seconds,
    where ray.init would retry for minutes."""
    import socket

    host, port = _host_port(address)
    try:
        socket.create_connection((host, port), timeout=min(timeout, 10.0)).close()
    except OSError as error:
        raise ConfigError(f"{source} {address}: nothing answers at {host} port {port} ({error.strerror or error}). "
                          f"Check that `ray start --head` runs on {host} and that {port} is the port it printed "
                          "(the GCS port, 6379 unless --port set another; ray:// addresses use the Ray Client port, "
                          "10001), and that no firewall is between; unset ray_address and $RAY_ADDRESS for a local "
                          "Ray instance.") from None


def _init_bounded(ray: Any, address: str, source: str, timeout: float,
                  runtime_env: dict[str, Any] | None = None) -> None:
    """ray.init on a thread, waited for at most `timeout` seconds."""
    import threading

    outcome: dict[str, BaseException | None] = {}

    def init() -> None:
        try:
            ray.init(address=address, include_dashboard=False, logging_level="ERROR", **(runtime_env or {}))
            outcome["error"] = None
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=init, name="evotune-ray-init", daemon=True)
    thread.start()
    thread.join(timeout)
    checks = ("Check that the cluster runs (`ray status` on its head) and that this is its address; a cluster "
              "started by `ray start` with token authentication (Ray 2.60's default) needs RAY_AUTH_MODE=token and "
              "its token in this shell too (docs/ray-cluster.md); and that this machine's Ray version is the "
              "cluster's.")
    running = _current_cluster() if address == "auto" else None
    if "error" not in outcome:
        where = f"auto (the cluster `ray start` left running here, {running})" if running else address
        raise ConfigError(f"{source} {where}: something answers there but did not complete Ray's handshake within "
                          f"{timeout:g} s (ray_timeout). {checks}")
    if outcome["error"] is not None:
        if running:  # `auto` found this machine's cluster and could not join it: the same checks as an address's
            raise ConfigError(f"{source} auto: the cluster `ray start` left running here ({running}, from "
                              f"{CURRENT_CLUSTER}) did not let this process join ({type(outcome['error']).__name__}). "
                              f"{checks}") from None
        if address == "auto":
            raise ConfigError(f"{source} auto: no running Ray cluster was found on this machine "
                              f"({type(outcome['error']).__name__}). Start one with `ray start --head`, give the "
                              "head's HOST:PORT, or unset ray_address and $RAY_ADDRESS for a local Ray "
                              "instance.") from None
        raise ConfigError(f"{source} {address}: Ray could not join the cluster ({type(outcome['error']).__name__}: "
                          f"{str(outcome['error']).splitlines()[0] if str(outcome['error']) else ''}). "
                          f"{checks}") from None


class GPUReservation:
    """An actor that does nothing but hold GPUs in Ray's books for the driver's own replica."""

    def gpu_ids(self) -> list[str]:
        return [str(gpu) for gpu in import_ray().get_gpu_ids()]

    def booked_gpus(self) -> float:
        return import_ray().get_runtime_context().get_assigned_resources().get("GPU", 0.0)


def reserve_driver_gpus(num_gpus: float, address: str | None, timeout: float = 30.0,
                        py_modules: list[str] | None = None) -> tuple[Any, list[str]]:
    """Book `num_gpus` GPUs of the driver's node for the driver's replica; returns (the holding actor, the GPU
    ids Ray gave it). Keep the actor alive for as long as the driver's engine runs (ray.kill releases them).
    py_modules: connect's, as this joins Ray before the pool does."""
    ray = connect(address, timeout, py_modules)
    free = ray.available_resources().get("GPU", 0.0)
    if free < num_gpus:
        raise ConfigError(f"the driver's own engine needs {num_gpus:g} GPUs and Ray has {free:g} free; free some, "
                          "or lower `tensor_parallel_size` / `worker_num_gpus`.")
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    holder = ray.remote(num_cpus=0, num_gpus=num_gpus, max_restarts=0)(GPUReservation).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
    return holder, ray.get(holder.gpu_ids.remote())


def reserve_for_driver(num_gpus: float, address: str | None, timeout: float, engine: bool,
                       device: str, py_modules: list[str] | None = None) -> tuple[Any, str | None]:
    """Book the driver replica's GPUs (reserve_driver_gpus) and point its model at them: a vLLM engine through
    CUDA_VISIBLE_DEVICES, which its processes read when they start; an hf model in this process, where CUDA may
    already be initialised, by naming the device. Returns (the reservation, the hf model's device or None)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    holder, ids = reserve_driver_gpus(num_gpus, address, timeout, py_modules)
    if engine:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
        return holder, None
    if not ids or not device.startswith("cuda"):
        return holder, None
    order = visible.split(",") if visible else None
    return holder, f"cuda:{order.index(ids[0]) if order else int(ids[0])}"


def shutdown() -> None:
    """Stop this process's Ray connection (a local instance stops with it)."""
    if is_ray_available():
        import_ray().shutdown()
