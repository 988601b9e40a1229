"""The method matrix's rows: each arm's finished runs read from bench/results/method_matrix/, with the statistics
the report and the pages print (mean, std over seeds, per-seed intervals, the paired gain over the start).

A run's held-out score is the one measure.py read at its scored budget; where a run was measured again at larger
budgets (rescore/, the same held-out questions), that measurement replaces the first one's accuracy and its
retention stays (retention and KL are read at training's budget either way). Nothing here estimates a missing run.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from bench.method_matrix.arms import METHODS, TASKS, main_path
from bench.method_matrix.measure import SCORED_BUDGET
from bench.method_matrix.run import ANY_MACHINE_PREFIX, SFT_ALONE, UNTIMED

# a run that took its arm's steps on another machine type (run.py --step-matched; tables.step_matched_note)
STEP_MATCHED_MARK = "†"

STUDY = RESULTS / "method_matrix"
RETENTION_TASKS = ("conciseness", "ifeval")


def load(results: Path, path: str) -> dict[str, Any] | None:
    file = results / path
    return json.loads(file.read_text()) if file.is_file() else None


def heldout(results: Path, path: str) -> dict[str, Any] | None:
    """The held-out record of a finished job (its rescore's accuracy where one ran), or None."""
    data = load(results, path)
    if data is None or "heldout" not in data:
        return None
    record = dict(data["heldout"])
    again = load(results, f"rescore/{path}")
    if again is not None:
        record.update({key: value for key, value in again["heldout"].items() if key != "retention"})
    return record


def wilson(correct: int, n: int) -> tuple[float, float]:
    """95% Wilson interval of a proportion, in percent."""
    if n == 0:
        return (0.0, 100.0)
    p, z = correct / n, 1.959964
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (100 * (centre - half), 100 * (centre + half))


def paired_gain(after: str, before: str) -> tuple[float, float, float]:
    """Gain in points of `after` over `before` on the same questions (strings of 0/1 per question), and its 95%
    interval (normal approximation of the per-question differences)."""
    differences = [int(a) - int(b) for a, b in zip(after, before, strict=True)]
    n = len(differences)
    mean = sum(differences) / n
    spread = statistics.pstdev(differences) / math.sqrt(n)
    return 100 * mean, 100 * (mean - 1.96 * spread), 100 * (mean + 1.96 * spread)


@dataclass
class Run:
    """One finished main run: its seed, result file, and merged held-out record."""

    seed: int
    data: dict[str, Any]
    heldout: dict[str, Any]
    sft_peak_rss_mib: float | None = None  # the SFT a run is charged for (ESSA on a task without a warm start)

    @property
    def peak_rss_mib(self) -> float:
        """Peak resident memory of the run's training process, or of its charged SFT's where that was higher."""
        return max(self.data["training"]["peak_rss_mib"], self.sft_peak_rss_mib or 0.0)

    @property
    def accuracy(self) -> float:
        """Held-out accuracy in percent at the scored budget."""
        return 100 * self.heldout["accuracy"]

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.heldout["correct"].count("1"), self.heldout["n"])

    def kl(self, task: str) -> float:
        return self.heldout["retention"][f"retain/{task}/kl"]

    @property
    def step_matched(self) -> dict[str, Any] | None:
        """The study's steps this run took on another machine type (run.py --step-matched), else None."""
        return self.data["training"].get("step_matched")

    @property
    def cpu(self) -> str:
        return self.data["machine"]["cpu"]

    @property
    def mean_kl(self) -> float:
        """Per-token KL to the starting model, averaged over the retention tasks' prompts."""
        return statistics.mean(self.kl(task) for task in RETENTION_TASKS)


@dataclass
class Arm:
    """One method on one task: its finished runs, in seed order."""

    method: str
    task: str
    runs: list[Run] = field(default_factory=list)

    @property
    def label(self) -> str:
        return METHODS[self.method]["label"]

    @property
    def planned(self) -> int:
        return len(TASKS[self.task]["seeds"])

    @property
    def accuracies(self) -> list[float]:
        return [run.accuracy for run in self.runs]

    @property
    def mean(self) -> float:
        return statistics.mean(self.accuracies)

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.accuracies) if len(self.runs) > 1 else None

    @property
    def mean_kl(self) -> float:
        return statistics.mean(run.mean_kl for run in self.runs)

    @property
    def peak_rss_mib(self) -> float:
        return statistics.mean(run.peak_rss_mib for run in self.runs)

    def mean_of(self, key: str) -> float:
        """The mean over seeds of a training record's number (steps, peak_rss_mib, training_seconds)."""
        return statistics.mean(run.data["training"][key] for run in self.runs)


def arm(results: Path, task: str, method: str) -> Arm:
    """A method's finished runs on a task; a run read at another budget than measure.py's, not yet measured
    again, is left out (scores at two budgets never share a mean)."""
    found = Arm(method, task)
    for seed in TASKS[task]["seeds"]:
        path = main_path(task, method, seed)
        record = heldout(results, path)
        if record is not None and record["scored_budget"] == SCORED_BUDGET:
            data = load(results, path)
            sft = load(results, f"warm_start/{task}/sft_seed{seed}.json") if data["training"].get(
                "sft_seconds_charged") else None
            found.runs.append(Run(seed, data, record, sft["training"]["peak_rss_mib"] if sft else None))
    return found


def arms(results: Path, task: str) -> list[Arm]:
    """Every method's arm on a task, in METHODS' order (arms without a finished run included, empty)."""
    return [arm(results, task, method) for method in METHODS]


def sft_alone(results: Path, task: str) -> list[Run]:
    """Each seed's SFT warm start measured alone, as an arm is (run.py's sft_alone jobs, at the scored budget), with
    its SFT's training record; the measurement's machine is the run's (`Run.cpu`)."""
    runs = []
    for seed in TASKS[task]["seeds"]:
        measured = load(results, f"{SFT_ALONE}{task}/seed{seed}.json")
        if measured is not None and measured["heldout"]["scored_budget"] == SCORED_BUDGET:
            trained = load(results, f"warm_start/{task}/sft_seed{seed}.json")
            runs.append(Run(seed, {"training": trained["training"], "machine": measured["machine"]},
                            measured["heldout"]))
    return runs


def start(results: Path, task: str, seed: int) -> dict[str, Any] | None:
    """The held-out record of the model a task's runs start from: the base model, or on a warm-start task the
    seed's SFT model (every method starts there)."""
    if TASKS[task]["warm_start"]:
        return heldout(results, f"warm_start/{task}/sft_seed{seed}.json")
    return heldout(results, f"base/{task}.json")


def gain(results: Path, run: Run, task: str) -> tuple[float, float, float] | None:
    """A run's paired gain over its start on the same questions at the same budget, or None if not comparable."""
    before = start(results, task, run.seed)
    if before is None or before["scored_budget"] != run.heldout["scored_budget"]:
        return None
    return paired_gain(run.heldout["correct"], before["correct"])


def memory(results: Path) -> list[dict[str, Any]]:
    """The memory probes that ran: method, label, variant, peak RSS (MiB; ESSA's includes its SFT's, which it needs
    first, as that SFT peaked on the probe's own CPU), the weight copies named, and the probe's CPU."""
    from bench.method_matrix.arms import MEMORY_PROBES

    rows = []
    for method, variant in MEMORY_PROBES:
        data = load(results, f"memory/{method}_{variant}.json")
        if data is not None:
            probe, cpu = data["memory"], data["machine"]["cpu"]
            sft_peak = sft_peak_on(results, cpu) if method == "essa" else None
            rows.append({"method": method, "label": METHODS[method]["label"], "variant": variant,
                         "peak_rss_mib": max(probe["peak_rss_mib"], sft_peak or 0.0), "sft_peak_rss_mib": sft_peak,
                         "probe_peak_rss_mib": probe["peak_rss_mib"],
                         "weights": probe["weights"], "cpu": cpu})
    return rows


def sft_peak_on(results: Path, cpu: str) -> float | None:
    """Peak RSS of the SFT the ESSA probe starts from, as it ran on `cpu`: the study's own SFT, or its restore (the
    same SFT made again) on another machine type. None when neither ran on that CPU."""
    from bench.method_matrix.arms import TUNING_SEED

    for path in (f"warm_start/arithmetic/sft_seed{TUNING_SEED}.json",
                 f"restored/warm_start/arithmetic/sft_seed{TUNING_SEED}.json"):
        data = load(results, path)
        if data is not None and data["machine"]["cpu"] == cpu:
            return data["training"]["peak_rss_mib"] if "training" in data else data["restored"]["training"][
                "peak_rss_mib"]
    return None


# Jobs that may run on another machine type than the study's, and the restores made for them: the study's setup
# line names the timed jobs' machine (step-matched runs are named apart), the memory table its probes'.
OFF_STUDY_MACHINE = (*UNTIMED, "restored/")


def machine(results: Path, probes: bool = False) -> dict[str, Any]:
    """What the jobs recorded of their machine (CPU model, threads, torch, and the commits they ran from): the
    study's timed jobs', or with `probes` the memory probes'."""
    records = []
    for path in sorted(results.rglob("*.json")):
        relative = path.relative_to(results).as_posix()
        wanted = relative.startswith(ANY_MACHINE_PREFIX) if probes else not relative.startswith(OFF_STUDY_MACHINE)
        if wanted and path.name != "machine.json" and (data := json.loads(path.read_text())).get("machine") and \
                (probes or "step_matched" not in data.get("training", {})):
            records.append(data["machine"])
    return {"cpu": sorted({record["cpu"] for record in records}), "threads": sorted({r["threads"] for r in records}),
            "torch": sorted({record["torch"] for record in records}),
            "commits": sorted({record["evotune_commit"][:7] for record in records})}


def gap_beyond_spread(first: list[float], second: list[float]) -> bool:
    """Two seeds or more on each side, and the gap between the means larger than either side's std over seeds."""
    if min(len(first), len(second)) < 2:
        return False
    spread = max(statistics.stdev(first), statistics.stdev(second))
    return abs(statistics.mean(first) - statistics.mean(second)) > spread


def separated(first: Arm, second: Arm) -> bool:
    """Whether two arms' means differ beyond both kinds of noise: each has two seeds or more, the gap exceeds
    both arms' seed spread, and the paired per-question difference pooled over the seeds both ran (the same
    held-out questions per seed) has a 95% interval that leaves out 0. Two seeds can agree by luck, so the
    spread alone would call a gap within one held-out set's sampling noise a ranking."""
    if not gap_beyond_spread(first.accuracies, second.accuracies):
        return False
    paired = paired_over_seeds(first, second)
    return paired is not None and (paired[1] > 0 or paired[2] < 0)


def paired_over_seeds(first: Arm, second: Arm) -> tuple[float, float, float, int] | None:
    """`first`'s gain in points over `second` on the same held-out questions, pooled over the seeds both ran, its
    95% interval (paired_gain) and how many seeds that is; None where they share no seed."""
    theirs = {run.seed: run for run in second.runs}
    shared = [(run, theirs[run.seed]) for run in first.runs if run.seed in theirs]
    if not shared:
        return None
    gain, low, high = paired_gain("".join(ours.heldout["correct"] for ours, _ in shared),
                                  "".join(other.heldout["correct"] for _, other in shared))
    return gain, low, high, len(shared)
