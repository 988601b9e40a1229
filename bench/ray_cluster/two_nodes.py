"""A real 2-node Ray run of examples/arithmetic.yaml on this machine, next to the single-process run.

The cluster is ray.cluster_utils.Cluster: a head and one worker node, one CPU each, each its own raylet, so the
two actors (SPREAD) run on two nodes as on two machines, only without a network between them. Both runs are
`evotune train` in a process of its own, as a user runs it; time per iteration is metrics.jsonl's `time_s` (the
first iteration of the Ray run includes starting the actors and loading the model in each):

    python -m bench.ray_cluster.two_nodes --iterations 2

Writes bench/results/ray_cluster/ray_two_nodes_arithmetic.json, with whether the two runs' final weights are
bit-identical.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import write_result

ROOT = Path(__file__).resolve().parents[2]


def train(output: Path, settings: list[str]) -> dict:
    """`evotune train examples/arithmetic.yaml` with `settings` (--set pairs); its per-iteration times and wall."""
    command = [sys.executable, "-c", "from evotune.cli.main import console_main; raise SystemExit(console_main())",
               "train", str(ROOT / "examples" / "arithmetic.yaml"), "--output-dir", str(output)]
    for setting in settings:
        command += ["--set", setting]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - started
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    steps = [record for record in records if "time_s" in record]
    return {"iteration_s": [round(record["time_s"], 2) for record in steps], "wall_s": round(wall, 1),
            "reward_mean": [record["reward_mean"] for record in steps],
            "bytes_exchanged": [record.get("bytes_exchanged") for record in steps]}


def same_weights(a: Path, b: Path) -> bool:
    import torch
    from safetensors.torch import load_file

    first, second = load_file(str(a / "final" / "model.safetensors")), load_file(str(b / "final" / "model.safetensors"))
    return first.keys() == second.keys() and all(torch.equal(first[name], second[name]) for name in first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--arms", nargs="+", default=["single", "two-nodes"], choices=["single", "two-nodes"],
                        help="which runs (one arm alone: e.g. the single process again on a quieter machine)")
    parser.add_argument("--name", default="ray_two_nodes_arithmetic")
    args = parser.parse_args()
    common = [f"iterations={args.iterations}", "num_eval=8", "eval_every=0", "checkpoint_every=1", "report_to=[]"]
    directory = Path(tempfile.mkdtemp(prefix="evotune-two-nodes-"))
    runs = {}
    if "single" in args.arms:
        runs["single_process"] = train(directory / "single", common)
    if "two-nodes" in args.arms:
        runs["two_nodes"] = two_nodes(directory / "two-nodes", common)
    identical = same_weights(directory / "single", directory / "two-nodes") if len(runs) == 2 else None
    write_result(args.name, {
        "command": "python -m bench.ray_cluster.two_nodes " + " ".join(sys.argv[1:]),
        "config": "examples/arithmetic.yaml --set " + " --set ".join(common),
        "cluster": "ray.cluster_utils.Cluster on this machine: head + 1 worker node, 1 CPU each; 2 actors "
                   "(worker_num_cpus=1, SPREAD); the driver outside Ray holds a replica for evaluation and final/",
        **runs, "final_weights_identical": identical}, study="ray_cluster")


def two_nodes(output: Path, common: list[str]) -> dict:
    """The same run on a head and one worker node (1 CPU each), two actors."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        return train(output, common + ["distributed=ray", "workers=2", "worker_num_cpus=1",
                                       f"ray_address={cluster.address}"])
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
