"""On a GPU: the scripted GPU check (`bench/gpu_check/`) on a lent card, each ES arm's and GRPO's cost per iteration,
its distance from the card's limits, where an iteration's time goes, and what each method learns in the same minute.
The fraction of pure-inference throughput is EGGROLL's measure (Sarkar et al., Evolution Strategies at the Hyperscale,
arXiv 2511.16652)."""

from __future__ import annotations

from bench.claims._common import load
from bench.claims.hardware import GPU_CHECK_ARMS, GPU_CHECK_FILES, GPU_GOALS, PROFILE_COLUMNS, _gpu_check_rows
from bench.gpu_check.check import limits_distance
from bench.labbook.chance import beyond_chance
from bench.labbook.spec import StudyPage

NEAR_LIMIT = 0.5  # an arm using half of the card's bandwidth or bfloat16 peak, or more, is near that limit
LEARNING_LABELS = {"grpo": "grpo-lora", "lowrank": "lowrank-es", "full_batched": "batched full-es"}


PROSE_LABELS = {"full_batched": "batched full-es", "lowrank": "lowrank-es"}


def short_label(arm: str) -> str:
    """An arm's name in a sentence: its name in the check's table, without its parenthesis."""
    return PROSE_LABELS.get(arm, GPU_CHECK_ARMS[arm].split(" (")[0])


def names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"




def limits_meaning() -> str:
    """The largest share of the card's memory bandwidth and of its bfloat16 peak that any measured arm used (the time
    its weight reads and its arithmetic would take at those limits over its iteration), and whether that is near."""
    facts = load(GPU_CHECK_FILES[0])["facts"]
    distances = {arm: limits_distance(row, facts, bytes_per_parameter=2) for arm, (_, row) in _gpu_check_rows().items()
                 if arm in GPU_CHECK_ARMS}
    bandwidth = max(distances, key=lambda arm: distances[arm]["share_of_bandwidth"])
    compute = max(distances, key=lambda arm: distances[arm]["share_of_bf16_peak"])
    bandwidth_share = distances[bandwidth]["share_of_bandwidth"]
    compute_share = distances[compute]["share_of_bf16_peak"]
    verdict = ("No arm came near the card's limits" if max(bandwidth_share, compute_share) < NEAR_LIMIT else
               "An arm came near the card's limits")
    return (f"{verdict}: at full memory bandwidth an arm's weight reads would take at most "
            f"{100 * bandwidth_share:.2f}% of its iteration ({short_label(bandwidth)}), at bfloat16 peak its "
            f"arithmetic at most {100 * compute_share:.2f}% ({short_label(compute)}).")


def profile_parts(row: dict) -> dict[str, float]:
    """One profiled iteration's seconds per column of the profile table, with what no column holds as 'other'."""
    parts = {column: sum(row["phase_seconds"].get(phase, 0.0) for phase in phases)
             for column, phases in PROFILE_COLUMNS.items()}
    parts["other"] = row["other_seconds"]
    return parts


PART_WORDS = {"generate": "generating", "rewards": "scoring rewards", "writing candidates": "writing candidates",
              "ask + tell": "ask and tell", "update": "the update", "other": "other work"}


def profile_meaning() -> str:
    """Each profiled arm's two largest parts of an iteration, and the largest device-time entries of the arm that
    spent the largest share of its iteration writing candidates."""
    rows = {arm[len("profile_"):]: row for arm, (_, row) in _gpu_check_rows().items() if arm.startswith("profile_")}
    if not rows:
        return "No profile has run yet."
    sentences = []
    for arm, row in rows.items():
        parts = profile_parts(row)
        first, second = sorted(parts, key=lambda part: -parts[part])[:2]
        where = "GPU" if row["settings"].get("master_device") == "device" else "host"
        shares = {part: 100 * parts[part] / row["iteration_seconds"] for part in (first, second)}
        sentences.append(f"{short_label(arm)} (mean on the {where}) spent {shares[first]:.0f}% of the iteration "
                         f"{PART_WORDS[first]} and {shares[second]:.0f}% {PART_WORDS[second]}")
    writer = max(rows, key=lambda arm: profile_parts(rows[arm])["writing candidates"] / rows[arm]["iteration_seconds"])
    top = rows[writer]["top_operators"][:2]
    entries = " and ".join(f"`{entry['name']}` ({entry['self_device_ms'] / 1000:.2f} s)" for entry in top)
    return (f"In the profiled iteration, {'; '.join(sentences)}. The largest device-time entries of "
            f"{short_label(writer)} were {entries}.")


def timed(row: dict) -> list[float]:
    """The iterations an ES row's seconds per iteration is the median of: every one after the first."""
    times = row["iteration_seconds"]
    return times[1:] if len(times) > 1 else times


def span(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f} s"


def master_meaning() -> str:
    """For each space, its host-mean row against its `master_device: device` row from one device call: whether every
    timed iteration of one was faster than every one of the other, and whether their mean rewards per iteration match
    (the same seeds in both arms: equal rewards, the same run)."""
    rows = _gpu_check_rows()
    parts, same = [], []
    for arm, label in (("full_batched", "batched full-es"), ("lowrank", "lowrank-es")):
        host, device = rows[arm][1], rows[f"{arm}_device_master"][1]
        host_times, device_times = timed(host), timed(device)
        ranges = f"{span(device_times)} against {span(host_times)}"
        if max(device_times) < min(host_times):
            parts.append(f"{label} was faster in every timed iteration ({ranges})")
        elif max(host_times) < min(device_times):
            parts.append(f"{label} was slower in every timed iteration ({ranges})")
        else:
            parts.append(f"{label}'s timed iterations overlap ({ranges}), too few to separate")
        same.append(host.get("reward_mean_per_iteration") == device.get("reward_mean_per_iteration"))
    differing = [label for label, equal in zip(("batched full-es", "lowrank-es"), same) if not equal]
    rewards = ("each space's mean reward per iteration was the same either way" if not differing else
               f"the mean reward per iteration differed for {names(differing)}")
    return f"With the mean on the GPU, {'; '.join(parts)}; {rewards}."


def goals_meaning() -> str:
    """How many of the check's goals the best measured row met, and the nearest one as a share of its goal."""
    rows = _gpu_check_rows()
    reached = []
    for what, arms, key, goal in GPU_GOALS:
        values = [rows[arm][1][key] for arm in arms if arm in rows]
        if values:
            reached.append((max(values) / goal, what))
    met = sum(share >= 1 for share, _ in reached)
    open_goals = [(share, what) for share, what in reached if share < 1]
    nearest = (f"; the nearest missed goal ({max(open_goals)[1]}) reached {100 * max(open_goals)[0]:.0f}% of its "
               "target" if open_goals else "")
    return f"The check met {met} of its {len(GPU_GOALS)} goals on this card{nearest}."


def learning_rows() -> dict[str, dict[int, dict]]:
    """The fixed-wall-time learning rows by method, then seed."""
    found: dict[str, dict[int, dict]] = {}
    for arm, (_, row) in _gpu_check_rows().items():
        if arm.startswith("learn_"):
            found.setdefault(row["method"], {})[row["seed"]] = row
    return found


def gain(row: dict) -> float:
    return 100 * (row["accuracy_after"] - row["accuracy_before"])


def mean_gain(seeds: dict[int, dict]) -> float:
    return sum(map(gain, seeds.values())) / len(seeds)


def learning_meaning() -> str:
    """The methods ranked by mean gain over their seeds in the same minute; whether every seed of each gained more
    than every seed of the next, and whether on each seed two neighbours share their held-out accuracies after differ
    beyond chance (two-proportion test at 95%); the steps each made where they share a seed."""
    rows = learning_rows()
    order = sorted(rows, key=lambda method: -mean_gain(rows[method]))
    label = {method: LEARNING_LABELS.get(method, method) for method in order}
    ranked = [f"{label[method]} {mean_gain(rows[method]):+.1f} points ({len(rows[method])} "
              f"seed{'s' if len(rows[method]) > 1 else ''})" for method in order]
    overlapping, unseparated, steps = [], [], []
    for better, worse in zip(order, order[1:]):
        if min(map(gain, rows[better].values())) <= max(map(gain, rows[worse].values())):
            overlapping.append(f"{label[better]} and {label[worse]}")
        shared = sorted(rows[better].keys() & rows[worse].keys())
        for seed in shared:
            first, second = rows[better][seed], rows[worse][seed]
            if not beyond_chance(first["accuracy_after"], second["accuracy_after"], first["num_eval"]):
                unseparated.append(f"{label[better]} and {label[worse]} on seed {seed}")
        steps.append(f"{label[better]} {' and '.join(str(rows[better][seed]['steps']) for seed in shared)} against "
                     f"{label[worse]}'s {' and '.join(str(rows[worse][seed]['steps']) for seed in shared)} (seed"
                     f"{'s' if len(shared) > 1 else ''} {' and '.join(map(str, shared))})")
    ordered = ("Every seed of each gained more than every seed of the next" if not overlapping else
               f"The seeds' gains overlap for {names(overlapping)}")
    separated = ("on every seed two neighbours in this order share, the higher one's held-out accuracy after the "
                 "minute is above the other's beyond chance" if not unseparated else
                 f"chance does not separate {names(unseparated)}")
    hosts = {row["settings"].get("master_device", "host") for method, seeds in rows.items() if method != "grpo"
             for row in seeds.values()}
    where = " Every ES row ran with the mean on the host." if hosts == {"host"} else ""
    return (f"In the same minute, by mean gain: {', '.join(ranked)}. {ordered}, and {separated} (two-proportion "
            f"test at 95%). Steps in the minute: {'; '.join(steps)}.{where}")


CLAIMS = {"gpu-limits-meaning": limits_meaning, "gpu-profile-meaning": profile_meaning,
          "gpu-master-meaning": master_meaning, "gpu-goals-meaning": goals_meaning,
          "gpu-learning-meaning": learning_meaning}

PAGE = StudyPage(
    slug="gpu",
    order=160,
    title="On a GPU",
    short="the scripted GPU check on an H200: each arm's cost, its distance from the card's limits, a minute of "
          "learning",
    folder="gpu_check/",
    asked="What does each ES arm and GRPO cost per iteration on a GPU, how far is that from the card's limits, and "
          "what does each learn in the same minute, on the built-in model?",
    setup="""`bench/gpu_check/`: SmolLM2-135M in bfloat16 on the hf backend, 2-digit addition; every row is a real
`evotune train` or `evotune grpo` through the Python API, with the settings `bench/gpu_check/check.py` gives it.
An ES row's seconds per iteration is the median of its iterations after the first; its fraction of pure inference is
its tokens per second over plain generation with the same backend settings, rows per generate and new tokens, timed
in the same run. The profile (`bench/gpu_check/profile.py`) times each part of one iteration with the device
synchronized at its edges, then the next iteration under torch.profiler: one iteration of its own run, so its
seconds differ from the table's. The learning rows measure held-out accuracy before and after a fixed time of
training (the time and n under their table), the same task, model and settings as the rows above; a seed's
held-out prompts are drawn with its seed.""",
    notes=(
        "A row that says \"not run\" did not fit the lent machine's minutes yet; the next lent GPU measures it (rows "
        "already measured on a card of the same name are carried, not measured again).",
        "\"Share of memory bandwidth\" is the time reading every weight once per decoding step would take at the "
        "card's bandwidth (once per candidate where full-rank candidates share a generate) over the iteration's time.",
        "Where the fp32 mean lives: with the mean on the host, every candidate written into the weights crosses from "
        "host to GPU with the whole mean, 4 bytes per weight, and each update crosses it both ways. `master_device: "
        "device` keeps the fp32 mean beside the weights on the GPU, at 4 bytes of GPU memory per weight; `auto`, the "
        "default, does so when 2 GiB stay free on the GPU besides it. For full-es the update is computed on the GPU "
        "either way and adds to the fp32 mean alike (with `anchor_decay` the pull toward the base may round "
        "differently); lowrank-es multiplies its update's factors where the mean lives, so its runs may differ in the "
        "last bits.",
    ),
    files=("gpu_check/gpu_check_*.json",),
    results="""The GPU check, each row a real run: <!-- claim:gpu-check-table --><!-- /claim -->
The arms used <!-- claim:gpu-limits --><!-- /claim -->.

Against the goals set for the check on one H100/H200: <!-- claim:gpu-goals --><!-- /claim -->.

The mean on the GPU against the mean on the host, side by side in one
device call: <!-- claim:gpu-device-master --><!-- /claim -->.

Where one iteration's time goes: <!-- claim:gpu-profile --><!-- /claim -->.

Learning at a fixed wall time on the same card: <!-- claim:gpu-learning-table --><!-- /claim -->""",
    meaning=("gpu-limits-meaning", "gpu-profile-meaning", "gpu-master-meaning", "gpu-goals-meaning",
             "gpu-learning-meaning"),
    rerun="""`bash bench/gpu_check/gpu_check.sh prepare`, then the device calls it prints (`install`, then `run` on
the GPU machine) write `gpu_check.json`, kept as `bench/results/gpu_check/gpu_check_*.json`;
`python -m bench.labbook.render` renders this page from them. `bash bench/gpu_check/gpu_check.sh plan` says, without a
GPU, which rows a card would measure.""",
)
