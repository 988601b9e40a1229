"""Ray: what evotune's driver costs per iteration as a pool grows to a thousand workers (the real driver loop over a
simulated pool, with Ray's per-message cost measured on a real cluster), and a real 2-node run against one process."""

from __future__ import annotations

from statistics import median

from bench.claims._common import load
from bench.labbook.spec import StudyPage

SIMULATED = "ray_cluster/ray_coordinator_simulated.json"
TWO_NODES = ("ray_cluster/ray_two_nodes_arithmetic.json", "ray_cluster/ray_two_nodes_arithmetic_single_rerun.json",
             "ray_cluster/ray_two_nodes_arithmetic_two_nodes_rerun.json")
ARMS = {"single_process": "one process", "two_nodes": "two nodes"}
GOAL = 0.02  # the driver's share of an iteration the design aims to stay under


def _rows() -> list[dict]:
    return sorted(load(SIMULATED)["rows"], key=lambda row: row["workers"])


def _growing(values: list[float]) -> bool:
    return all(later > earlier for earlier, later in zip(values, values[1:]))


def under_goal() -> str:
    """Whether the largest simulated pool's driver share, Ray's per-message cost included, is under the goal."""
    largest = _rows()[-1]
    share = largest["estimated_share_with_ray"]
    return f"{'under' if share < GOAL else 'over'} the {GOAL:.0%} goal"


def stragglers() -> str:
    """The pool sizes whose median virtual iteration ran past the modeled iteration time: the stragglers' cost."""
    seconds = load(SIMULATED)["iteration_seconds"]
    late = [row for row in _rows() if median(row["virtual_iteration_s"]) > seconds]
    if not late:
        return f"no pool size's median virtual iteration ran past {seconds:.0f} s"
    sizes = " and ".join(f"{row['workers']:,} workers ({median(row['virtual_iteration_s']):.1f} s)" for row in late)
    return f"the median virtual iteration ran past {seconds:.0f} s at {sizes}"


def driver_meaning() -> str:
    """How the driver's estimated share and the bytes per iteration move with the pool's size, and the largest
    share against the goal: the page's answer to what the driver costs up to a thousand workers."""
    rows = _rows()
    shares = [row["estimated_share_with_ray"] for row in rows]
    sent = [row["bytes_per_iteration"] for row in rows]
    over = [f"{row['workers']:,}" for row in rows if row["estimated_share_with_ray"] >= GOAL]
    goal = (f"stayed under the {GOAL:.0%} goal" if not over
            else f"reached the {GOAL:.0%} goal at {' and '.join(over)} workers")
    return (f"In the simulation the driver's share of an iteration, Ray's per-message cost included, "
            f"{'grew' if _growing(shares) else 'did not grow steadily'} with the pool ({shares[0]:.2%} at "
            f"{rows[0]['workers']:,} workers to {shares[-1]:.2%} at {rows[-1]['workers']:,}) and {goal}; the bytes "
            f"per iteration {'grew' if _growing(sent) else 'did not grow steadily'} with the workers ({sent[0]:,} to "
            f"{sent[-1]:,}).")


def _runs() -> list[tuple[str, dict]]:
    """(arm, its record) for every run of every two-node file, in file order."""
    return [(arm, data[arm]) for data in map(load, TWO_NODES) for arm in ARMS if arm in data]


def same_scores() -> str:
    """Whether every run, both arms, scored every iteration alike, and whether the pair compared tensor by tensor
    ended on the same weights: the check that two nodes compute what one process does."""
    runs = _runs()
    scores = {tuple(record["reward_mean"]) for _, record in runs}
    compared = [load(name)["final_weights_identical"] for name in TWO_NODES]
    compared = [value for value in compared if value is not None]
    pairs = "the pair" if len(compared) == 1 else f"the {len(compared)} pairs"
    weights = (f"{pairs} compared tensor by tensor ended on "
               f"{'the same weights' if all(compared) else 'different weights'}" if compared
               else "no pair's weights were compared")
    first = ", ".join(f"{value:.4f}" for value in runs[0][1]["reward_mean"])
    alike = f"All {len(runs)} runs" if len(scores) == 1 else f"Not all {len(runs)} runs"
    return (f"{alike} scored every iteration alike (reward_mean {first}{'' if len(scores) == 1 else ' in the first'}), "
            f"and {weights}: on one "
            f"machine, two nodes {'computed' if len(scores) == 1 and all(compared) else 'did not compute'} what one "
            "process does.")


def times_meaning() -> str:
    """Two nodes against one process per iteration, paired within each file's run order, set against how much one
    arm's own time for the same iteration varied between its runs: a speedup only where the gap exceeds that."""
    runs = _runs()
    by_arm = {arm: [record["iteration_s"] for name, record in runs if name == arm] for arm in ARMS}
    gaps = [single / double for singles, doubles in zip(by_arm["single_process"], by_arm["two_nodes"])
            for single, double in zip(singles, doubles)]
    spread = max(max(times) / min(times) for series in by_arm.values() for times in zip(*series))
    faster = sum(gap > 1 for gap in gaps)
    settled = faster == len(gaps) and spread < min(gaps)
    paired = (f"Two nodes were faster than one process in {faster} of {len(gaps)} iterations paired by run (one "
              f"process took {min(gaps):.1f}x-{max(gaps):.1f}x as long)")
    if settled:
        return (f"{paired}, more than one arm's own time for the same iteration varied between its runs (up to "
                f"{spread:.1f}x): two nodes were faster.")
    return (f"{paired}, but one arm's own time for the same iteration varied up to {spread:.1f}x between its runs: "
            "these runs do not measure a speedup.")


def across_machines() -> str:
    """Whether any cluster the result files record spanned separate machines."""
    clusters = {load(name).get("cluster", "") for name in (*TWO_NODES, "ray_cluster/ray_call_cost.json")}
    one_machine = all("on this machine" in cluster for cluster in clusters)
    return ("Every Ray cluster here ran its nodes on one machine: across separate machines this has not run."
            if one_machine else "A cluster here spanned separate machines: see its result file.")


CLAIMS = {"ray-under-goal": under_goal, "ray-stragglers": stragglers, "ray-driver-meaning": driver_meaning,
          "ray-same-scores": same_scores, "ray-times-meaning": times_meaning, "ray-across-machines": across_machines}

PAGE = StudyPage(
    slug="ray",
    order=170,
    title="Ray: the driver's cost and two nodes",
    short="the driver at up to 1,000 workers (simulated), a real 2-node run against one process",
    folder="ray_cluster/",
    asked="What does evotune's driver cost per iteration as a Ray pool grows to a thousand workers, and does a real "
          "multi-node run end where one process does?",
    setup="""The driver sends each unit (a candidate and its row indices, about 100 bytes), receives its rewards (a few
dozen bytes) and sends the update (about 400 bytes for 16 antithetic seeds) to every actor: no message holds weights.
To see the driver's own cost at a scale no machine here can run as Ray actors, `bench/ray_cluster/simulate.py` runs
the real driver loop (OpenES ask and tell, the unit scheduler, stragglers re-sent) over a simulated pool behind the
same evaluator interface, where each unit takes a modeled generation time on a virtual clock (no model is loaded):
population 32, 64 prompts per iteration, unit times sized for a 60 s iteration with 10% jitter, 1% of the workers 4x
slower, 10, 100 and 1,000 workers, 5 iterations each; a 4x slower worker's unit is re-sent only after 3 median unit
times. The simulated loop has no Ray in it, so the table's last column adds Ray's cost per message, measured on the
driver with the real `RayEvaluator` and stub replicas that answer at once on a 3-node cluster (one CPU each) on one
machine (`bench/ray_cluster/ray_call_cost.py`, 5 iterations).

Two nodes: `examples/arithmetic.yaml` for 2 iterations (SmolLM2-135M, float32) on two nodes of Ray's test cluster on
one machine (one CPU each, two actors, `worker_num_cpus: 1`) against the single process with torch on both cores
(`bench/ray_cluster/two_nodes.py`); each arm was run once more on its own.""",
    notes=("\"Share of 60 s\" is the driver's CPU time over a 60 s iteration: a bound on what the workers can lose "
           "waiting for it, since the driver also works while they generate.",
           "What the simulation leaves out: Ray's own cost except as that per-message estimate (measured with 3 "
           "actors; Ray's `wait` over a thousand outstanding calls may cost more per call), network latency and "
           "bandwidth between machines, generation times that vary more than the modeled jitter, and failures. "
           "In the two-node runs the first iteration also starts the actors and loads the model in each."),
    files=("ray_cluster/*.json",),
    results="""The simulated driver:<!-- claim:ray-coordinator-table --><!-- /claim -->

Ray's own cost: <!-- claim:ray-coordinator-cost --><!-- /claim -->, <!-- claim:ray-under-goal --><!-- /claim -->.
With the stragglers, <!-- claim:ray-stragglers --><!-- /claim -->.

Two nodes against one process:<!-- claim:ray-two-nodes-table --><!-- /claim -->

The 2-node runs exchanged <!-- claim:ray-two-nodes-bytes --><!-- /claim --> per iteration.""",
    meaning=("ray-driver-meaning", "ray-same-scores", "ray-times-meaning", "ray-across-machines"),
    rerun="""`python -m bench.ray_cluster.ray_call_cost --iterations 5`, `python -m bench.ray_cluster.simulate
--workers 10 100 1000 --iterations 5`, `python -m bench.ray_cluster.two_nodes --iterations 2` and its reruns
(`--arms single --name ray_two_nodes_arithmetic_single_rerun`, `--arms two-nodes --name
ray_two_nodes_arithmetic_two_nodes_rerun`) write `bench/results/ray_cluster/`; `python -m bench.labbook.render`
renders this page from them.""",
)
