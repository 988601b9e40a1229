"""Evaluate a population on a Ray actor pool: one model replica per actor, only seeds travel.

ES is embarrassingly parallel (Salimans et al. 2017; Qiu et al., arXiv 2509.24372; ESSA,
arXiv 2507.04453, reports near-linear scaling from 8 to 128 GPUs). Each actor holds a replica
(backend, space, task) built from the run's config; the driver holds the strategy. Per
iteration the driver sends work units, each a candidate (a seed and scale, or a small vector) with
the row indices of a shard of the prompts, and gets back the unit's per-prompt rewards, which the driver
combines exactly (units.py: any sharding gives the same rewards); then every actor applies the same update
from (seeds, coefficients), or adopts CMA-ES's small mean vector, so weights never cross the
wire after start-up. Units go to actors as they free up, spread over the cluster's nodes; a late
unit is sent again (first copy back wins); an actor that dies (or its node) has its unit re-run
elsewhere and is replaced by one rebuilt from the last checkpoint plus the update log, which starts
when the cluster has room again (a node joins), so the iteration's result does not change.
Every `checksum_every` iterations all replicas hash their mean and a mismatch stops the run.

GPUs: each actor asks Ray for its replica's GPUs (a vLLM engine: `tensor_parallel_size` of them; one
actor's resources are always on one node, so its ranks share a machine). The driver holds a replica of
its own (evaluation, checkpoints, final/), so `reserve_driver_gpus` books its GPUs in Ray first, on the
driver's node, and the driver's engine is started on exactly those: no actor is ever given a GPU the
driver's engine holds. A killed actor takes its engine processes down with it (Ray reaps an actor's
children, and every process with a separate-process engine runs a watchdog, backends/watchdog.py).

This package holds every import of ray: connection.py (joining Ray, booking the driver's GPUs), worker.py
(the actor's body), pool.py (RayEvaluator) and tasks.py (sweep's parallel runs).
"""

from .connection import GPUReservation, machine_cpus, reserve_driver_gpus, reserve_for_driver, shutdown
from .pool import RayEvaluator
from .tasks import run_tasks
from .worker import ReplicaWorker

__all__ = ["GPUReservation", "RayEvaluator", "ReplicaWorker", "machine_cpus", "reserve_driver_gpus",
           "reserve_for_driver", "run_tasks", "shutdown"]
