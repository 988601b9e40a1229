"""Score every finished curve run at each CPU-second mark, after training (scoring never eats training time): the
model as it stood at the mark on the method study's held-out questions (the template) and on the transfer split.

The model at a mark is the last one whose training had used no more CPU seconds than the mark: for the ES arms the
mean after the iterations that ended by then, replayed exactly from the run's update log (seeds and coefficients:
ES at Scale's noise is regenerated from its seed, so no snapshot of the weights is kept); for GRPO the adapter of the
last step that ended by then (TRL's checkpoint of that step).

    python -m bench.curves.score                      # every run file without its scores
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.method_matrix.arms import METHODS
from bench.method_matrix.measure import SCORED_BUDGET, heldout_rows, scores_by_budget, transfer_scores, transfer_split

from .arms import RESULTS

HELDOUT_QUESTIONS = 256  # of the study's 512: twelve marks a run make scoring cost as much as training otherwise
# every answer is generated to 64 new tokens first, and only those not ended by then to the scored budget: generated
# in chunks of 64 at the whole budget, each chunk ran to 128 (template) or 256 (transfer) tokens for its one or two
# answers that never end (the first 3 of lowrank seed 0's 13 marks took 36 minutes so, on a 2-core EPYC shared with
# other work part of that time; its training took 71)
FIRST_PASS = 64


def step_at(steps: list[dict[str, Any]], mark: float) -> int:
    """The last iteration (step) that had ended within `mark` CPU seconds (0: none had)."""
    return max([step["iteration"] for step in steps if step["cpu_s"] <= mark], default=0)


def score(backend: Any, task: Any, rows: list[dict], transfer: dict[str, list[dict]]) -> dict[str, Any]:
    scores, ended = scores_by_budget(backend, task, rows, [SCORED_BUDGET], FIRST_PASS)
    accuracy = round(float(scores[SCORED_BUDGET].mean()), 4)
    return {"template": {"n": len(rows), "budget": SCORED_BUDGET, "accuracy": accuracy,
                         "ended": round(ended[SCORED_BUDGET], 4)},
            "transfer": transfer_scores(backend, task, transfer, FIRST_PASS)}


def es_models(kept: Path, steps_at_marks: list[int]):
    """The hf backend holding the run's mean after each of `steps_at_marks` iterations, in turn, replayed from the
    config and update log the run kept (`kept`: replay/ARM_seedN under the results, or a run directory)."""
    from evotune.builders import build_space, load_backend, on_hf_backend
    from evotune.config.train import TrainConfig
    from evotune.files.checkpoint import _load_update_log  # the checkpoint's own reader: a malformed log is named
    from evotune.runs.directory import read_run_config

    updates = kept / "updates.json" if (kept / "updates.json").is_file() else kept / "checkpoint" / "updates.json"
    config = on_hf_backend(TrainConfig.from_dict(read_run_config(kept, "bench.curves.score")))
    backend = load_backend(config, "cpu")
    space = build_space(config, backend)
    log = _load_update_log(updates)
    done = 0
    for steps in steps_at_marks:
        space.replay(log[done:steps])
        done = steps
        yield backend


def grpo_model(run: Path, step: int):
    from evotune.runs.loading import load_for_eval

    if step == 0:
        from evotune.runs.directory import read_run_config

        return load_for_eval(read_run_config(run)["model"], "float32", "cpu")
    return load_for_eval(str(run / "trl" / f"checkpoint-{step}"), "float32", "cpu")


def score_run(path: Path) -> Path:
    from evotune.tasks import get_task

    record = json.loads(path.read_text())
    run, steps = Path(record["run"]), record["steps"]
    task = get_task("arithmetic", seed=0, num_eval=8)  # its accuracy metric
    rows, transfer = heldout_rows("arithmetic")[:HELDOUT_QUESTIONS], transfer_split("arithmetic")
    at_marks = [step_at(steps, mark) for mark in [0.0, *record["marks"]]]
    scored = []
    if METHODS[record["arm"]]["command"] == "train":  # the run's kept replay; a run from before it, its directory
        models = es_models(path.parent.parent / record["replay"] if "replay" in record else run, at_marks)
    else:
        models = (grpo_model(run, step) for step in at_marks)
    started = time.perf_counter()
    for mark, step, backend in zip([0.0, *record["marks"]], at_marks, models):
        scored.append({"mark_cpu_s": mark, "iteration": step,
                       "cpu_s": next((s["cpu_s"] for s in steps if s["iteration"] == step), 0.0),
                       "wall_s": next((s["wall_s"] for s in steps if s["iteration"] == step), 0.0),
                       **score(backend, task, rows, transfer)})
    out = path.parent.parent / "scores" / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"arm": record["arm"], "label": record["label"], "seed": record["seed"],
                               "marks": scored, "first_pass": FIRST_PASS,
                               "scoring_s": round(time.perf_counter() - started, 1)}, indent=1) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    for path in sorted((args.results / "runs").glob("*.json")):
        if not (args.results / "scores" / path.name).is_file():
            print(f"curves: scored {score_run(path)}", flush=True)


if __name__ == "__main__":
    main()
