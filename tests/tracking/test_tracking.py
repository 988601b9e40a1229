"""evotune.tracking.tracker: metrics.jsonl is strict JSON (NaN and infinities written as null), a resume cuts it back to
the checkpoint and drops a torn last line, a damaged file is an error naming it; the curves plot, the time budget,
and logger errors on close."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import run_config, strict_loads, write_metrics

from evotune.cli.main import main
from evotune.errors import DataError
from evotune.tracking.loggers import RunLogger
from evotune.tracking.tracker import (
    MetricsLogger,
    dumps_strict,
    out_of_time,
    peak_memory_mib,
    plot_curves,
    read_metrics,
    strict_json,
)


def never_scores(prompts, completions, **columns):
    return [None] * len(completions)


def test_reward_none_everywhere_is_a_clear_error_and_metrics_stay_strict_json(tiny_model_dir, tmp_path, capsys,
                                                                              monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    config = run_config(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    code = main(["train", config, "--output-dir", str(run), "--set", "reward_fns=[test_tracking:never_scores]",
                 "--set", "eval_every=1"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "None" in err
    # item 7: no checkpoint was written, so the message must not promise a resume
    assert "resumable from its last checkpoint" not in err and "--resume" not in err
    # the run failed before its first iteration: what it wrote (metrics.jsonl with the null eval/reward
    # included) is removed with the directory it created, so the same command starts it again; the null
    # itself is checked on the logger below
    assert not run.exists()


def test_metrics_logger_writes_null_for_nan_and_infinity(tmp_path):
    from evotune.tracking.tracker import MetricsLogger, read_metrics

    logger = MetricsLogger(tmp_path, [])
    logger.log({"iteration": 1, "reward_mean": float("nan"), "reward_max": np.float32("inf"),
                "eval/accuracy": np.float64(0.5), "nested": [float("-inf"), 1.0]})
    line = (tmp_path / "metrics.jsonl").read_text()
    assert strict_loads(line) == {"iteration": 1, "reward_mean": None, "reward_max": None, "eval/accuracy": 0.5,
                                  "nested": [None, 1.0]}
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["reward_mean"] is None


def test_resume_drops_a_torn_last_line_and_rewrites_legacy_nan(tmp_path, capsys):
    from evotune.tracking.tracker import MetricsLogger

    path = tmp_path / "metrics.jsonl"
    write_metrics(path, [{"iteration": 0, "eval/reward": float("nan")}, {"iteration": 1}, {"iteration": 2}],
                  tail='{"iteration": 3, "rew')
    MetricsLogger(tmp_path, [], resume_iteration=1)
    assert "metrics.jsonl is damaged from line 4 on" in capsys.readouterr().err
    assert [strict_loads(line) for line in path.read_text().splitlines()] == [
        {"iteration": 0, "eval/reward": None}, {"iteration": 1}]


# damaged metrics.jsonl -> the records --resume keeps (the good lines before the damage), with a note
DAMAGED_METRICS = {
    "garbage in the middle": ('{"iteration": 0}\n{garbage\n{"iteration": 1}\n', [0], 2),
    "a list instead of an object": ('{"iteration": 0}\n[1, 2]\n', [0], 2),
    "not UTF-8": ('{"iteration": 0}\n{"iteration": 1, "note": "\xff"}\n', [0], 2),
    "garbage after the last good line": ('{"iteration": 0}\n{"iteration": 1}\n\x00\x00\xff\xfe', [0, 1], 3),
}


@pytest.mark.parametrize("variant", list(DAMAGED_METRICS))
def test_a_damaged_metrics_file_is_cut_to_its_good_lines_on_resume_with_a_note(variant, tmp_path, capsys):
    """Advice never loops: the records before the damage are kept and the run goes on, saying so (it used to stop
    with "not UTF-8" on every --resume, with no way out but editing the file)."""
    from evotune.tracking.tracker import MetricsLogger

    text, kept, line = DAMAGED_METRICS[variant]
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(text.encode("latin-1"))
    MetricsLogger(tmp_path, [], resume_iteration=5)
    assert f"{path} is damaged from line {line} on" in capsys.readouterr().err
    assert [strict_loads(row)["iteration"] for row in path.read_text().splitlines()] == kept


def test_a_record_without_its_step_is_named_with_the_line_to_delete(tmp_path):
    from evotune.tracking.tracker import MetricsLogger

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0}\n{"reward_mean": 1.0}\n')
    with pytest.raises(DataError, match=re.escape(str(path)) + ".*Delete that line to resume"):
        MetricsLogger(tmp_path, [], resume_iteration=5)



def test_strict_json_turns_numpy_values_into_plain_json():
    value = {"a": np.int64(3), "b": np.array([1.5, np.nan]), "c": (np.float32(0.25), float("inf")), "d": "text",
             "e": None, "f": True}
    converted = strict_json(value)
    assert converted == {"a": 3, "b": [1.5, None], "c": [0.25, None], "d": "text", "e": None, "f": True}
    assert type(converted["a"]) is int and type(converted["c"][0]) is float
    assert strict_loads(dumps_strict(value)) == converted
    assert dumps_strict({"x": float("-inf")}, sort_keys=True) == '{"x": null}'


def test_out_of_time_only_with_a_budget():
    assert not out_of_time(1e9, 0)  # 0: no budget
    assert not out_of_time(59.9, 60) and out_of_time(60.0, 60) and out_of_time(61.0, 60)


def test_peak_memory_is_this_process_peak_resident_size_in_mib():
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    current_mib, high_water_mib = (int(status[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM"))  # kB
    peak = peak_memory_mib()
    assert peak == round(peak, 1) and peak >= current_mib - 0.1
    if not torch.cuda.is_available():  # CUDA's peak is added on a GPU machine
        assert abs(peak - high_water_mib) < 64  # the kernel's high-water mark, read moments apart
    assert peak_memory_mib() >= peak  # a peak never goes down


def test_read_metrics_skips_blank_lines_and_names_a_bad_line_that_is_not_the_last(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0}\n\n{"iteration": 1}\n')
    assert read_metrics(path) == [{"iteration": 0}, {"iteration": 1}]
    path.write_text('{"iteration": 0}\n{"iteration": 1, "rew\n')  # ends with a newline: written whole, then broken
    with pytest.raises(DataError, match=re.escape(f"{path}, line 2: not valid JSON")):
        read_metrics(path)


def test_a_new_run_starts_an_empty_file_and_a_resume_keeps_records_up_to_its_step(tmp_path):
    write_metrics(tmp_path / "metrics.jsonl", [{"step": 0, "loss": 2.0}, {"step": 5, "loss": 1.0},
                                               {"step": 10, "loss": 0.5}])
    logger = MetricsLogger(tmp_path, [], resume_iteration=5, step_key="step")  # `evotune sft`'s x-axis
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 0, "loss": 2.0}, {"step": 5, "loss": 1.0}]
    logger.log({"step": 6, "loss": 0.9})
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 5, 6]
    logger.close()
    MetricsLogger(tmp_path, [])  # not a resume: the run starts over
    assert (tmp_path / "metrics.jsonl").read_text() == ""


class Recording(RunLogger):
    """A report_to logger that keeps what it is given, and may fail when closed."""

    def __init__(self, fail: str | None = None):
        self.metrics, self.closed, self.fail = [], False, fail

    def log_metrics(self, step, metrics):
        self.metrics.append((step, metrics))

    def close(self):
        self.closed = True
        if self.fail:
            raise RuntimeError(self.fail)


def test_records_reach_every_logger_without_the_step_and_every_logger_is_closed(tmp_path):
    logger = MetricsLogger(tmp_path, [])
    first, second, third = Recording(fail="first"), Recording(), Recording(fail="third")
    logger.loggers = [first, second, third]
    logger.log({"iteration": 3, "reward_mean": float("nan"), "eval/accuracy": 0.5})
    assert second.metrics == [(3, {"reward_mean": None, "eval/accuracy": 0.5})]
    with pytest.raises(RuntimeError, match="first"):  # the first error, after every logger was closed
        logger.close()
    assert first.closed and second.closed and third.closed and logger.loggers == []


def test_plot_curves_draws_train_and_each_eval_metric_with_gaps_for_null(tmp_path):
    import matplotlib.image

    path = tmp_path / "metrics.jsonl"
    write_metrics(path, [{"iteration": 0, "eval/accuracy": 0.1, "eval/reward": None},
                         {"iteration": 1, "reward_mean": 0.2, "reward_max": 0.5},
                         {"iteration": 2, "reward_mean": None, "reward_max": 0.6, "eval/accuracy": 0.3,
                          "eval/reward": 1.0}])
    png = plot_curves(path, tmp_path / "curves.png", title="run")
    assert png == tmp_path / "curves.png"
    height, width = matplotlib.image.imread(png).shape[:2]
    assert width > 2.5 * height  # three panels side by side: train, eval/accuracy, eval/reward
    write_metrics(path, [{"iteration": 1, "reward_mean": 0.2}])  # a GRPO run logs no reward_max, no eval
    height, width = matplotlib.image.imread(plot_curves(path, tmp_path / "one.png")).shape[:2]
    assert math.isclose(width / height, 5 / 3.6, rel_tol=0.05)  # one panel


def test_max_training_seconds_stops_at_the_step_boundary_nearest_the_budget():
    from evotune.tracking.tracker import out_of_time

    assert not out_of_time(500.0, 0.0, 200.0)  # no budget
    assert out_of_time(600.0, 600.0)  # used up
    # 180 s iterations and a 600 s budget: after 540 s a fourth iteration would end 120 s over, more than the
    # 60 s the run is short: stop at 540; after 450 s one more ends at 630, 30 s over but 150 s short before: go on
    assert out_of_time(540.0, 600.0, 180.0) and not out_of_time(450.0, 600.0, 180.0)
    assert not out_of_time(599.0, 600.0, 1.0)  # short steps (GRPO) run to the budget
    assert not out_of_time(0.0, 600.0, 1000.0)  # the first step is always taken


@pytest.mark.parametrize("records, panels", [
    # ES with evaluations and two retention tasks, each with its KL on a right-hand scale
    ([{"iteration": i, "reward_mean": -17.5 + i, "reward_max": -2.5 + i, "eval/accuracy": 0.2 + i / 100,
      "eval/length": 120.5 - i, "retain/ifeval/accuracy": 0.5 - i / 1000, "retain/ifeval/kl": 3e-4 * i,
      "retain/countdown/reward": 0.1 + i / 1e4, "retain/countdown/kl": 1e-5 * i} for i in range(0, 41, 4)], 5),
    # a GRPO run: one panel, with long tick labels
    ([{"iteration": i, "reward_mean": -0.00175 + 3e-5 * i} for i in range(9)], 1),
    # a retention task without KL last, after a metric with long labels
    ([{"iteration": i, "reward_mean": 1e6 * i, "eval/reward": 123456.789 * i, "retain/ifeval/accuracy": 0.5}
      for i in range(3)], 3),
], ids=["es-retention", "grpo", "no-kl"])
def test_curves_keep_every_label_on_the_figure_and_panels_apart(records, panels):
    """The margins are set from the tick labels' lengths, not by tight_layout: nothing drawn may leave the figure,
    and no panel's labels (its KL scale's included) may reach into the next panel."""
    import matplotlib.pyplot as plt

    from evotune.tracking.tracker import curves_figure

    figure = curves_figure(records, title="ES: HuggingFaceTB/SmolLM2-135M-Instruct on arithmetic")
    try:
        renderer = figure.canvas.get_renderer()
        figure.draw(renderer)
        width, height = figure.bbox.width, figure.bbox.height
        places: dict[tuple, list] = {}  # a panel's place: its axis and the KL scale's twin axis, if any
        for axis in figure.axes:
            places.setdefault(axis.get_position().bounds, []).append(axis.get_tightbbox(renderer))
        assert len(places) == panels
        extents = []
        for _, boxes in sorted(places.items()):
            extents.append((min(box.x0 for box in boxes), max(box.x1 for box in boxes)))
            for box in boxes:
                assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, (box, width, height)
        for (_, right), (left, _) in zip(extents, extents[1:]):
            assert right < left, extents
    finally:
        plt.close(figure)
