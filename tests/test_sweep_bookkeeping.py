"""`evotune sweep` bookkeeping under bad input and kill -9 (issue 28, items 3 and 11).

Each test gives the sweep what a demanding user would (colliding or over-long point names, repeated seeds
or points, a broken --grid, a point that fails, an unknown --metric, a kill while final/ is written) and
checks the error names the input and the fix, and that no run is lost, overwritten or counted twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import TINY_EVAL_BUDGET, requires_ray

from evotune.cli.main import main
from evotune.errors import ConfigError
from evotune.runs.directory import final_is_complete
from evotune.runs.sweep_grid import grid_points, parse_grid
from evotune.sweep import SweepFailed, sweep

# The tiny model, 2 iterations of 2 members, evaluated every iteration; no config, so the quickstart's base.
SETTINGS = ["task=conciseness", "population_size=2", "iterations=2", "batch_size=2", "max_new_tokens=3",
            "num_eval=2", "eval_every=1", "dtype=float32", "report_to=[]", f"eval_max_new_tokens={TINY_EVAL_BUDGET}"]


def arguments(model_dir: str, output: Path, *extra: str) -> list[str]:
    settings = [item for setting in [f"model={model_dir}", *SETTINGS] for item in ("--set", setting)]
    return ["sweep", "--output-dir", str(output), *settings, *extra]


def base(model_dir: str) -> dict:
    """The values `arguments` gives a sweep, for calling sweep() directly."""
    from evotune.config import QUICKSTART
    from evotune.config.files import parse_overrides

    return {**QUICKSTART, **parse_overrides([f"model={model_dir}", *SETTINGS])}


def run_directories(output: Path) -> list[Path]:
    return sorted(path.parent for path in output.glob("*/seed*/config.yaml"))


def iterations(run: Path) -> list[int]:
    return [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def evaluations(run: Path) -> list[dict]:
    """Every logged metric that does not measure time or memory."""
    skip = ("time", "rss", "per_s", "cpu_s")
    return [{key: value for key, value in json.loads(line).items() if not any(word in key for word in skip)}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


# --- directory names -------------------------------------------------------------------------------


def test_points_whose_old_names_collide_get_their_own_directories(tiny_model_dir, tmp_path, capsys):
    # `/` and `_` both became `_`: these two points (and a 300-byte name, once an OSError) shared a directory
    long_value = "x" * 300
    grid = f"exclude_parameters=[lm_head/x],[lm_head_x],[{long_value}]"
    assert main(arguments(tiny_model_dir, tmp_path / "sweep", "--grid", grid)) == 0
    runs = run_directories(tmp_path / "sweep")
    assert len(runs) == 3 and all(len(run.parent.name.encode()) <= 111 for run in runs)
    written = sorted(yaml.safe_load((run / "config.yaml").read_text())["exclude_parameters"][0] for run in runs)
    assert written == ["lm_head/x", "lm_head_x", long_value]  # each run holds its own point's config
    assert all(iterations(run) == [0, 1, 2] for run in runs)  # each iteration logged once, by one run
    assert all(final_is_complete(run / "final") for run in runs)
    result = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert len(result["rows"]) == 3 and all(row["final_mean"] is not None for row in result["rows"])


def test_names_are_plain_where_that_is_unique_and_hashed_otherwise():
    points = grid_points(parse_grid(["sigma=0.001,1e-5", "antithetic=true", "model=smollm2-135m-instruct"]))
    assert [point.directory_name for point in points] == [
        "sigma=0.001,antithetic=True,model=smollm2-135m-instruct",  # as before: old sweeps are found as they are
        "sigma=1e-05,antithetic=True,model=smollm2-135m-instruct"]
    # values whose text is the same but which are not the same value: `True` and "True", 1.0 and "1.0"
    twins = grid_points(parse_grid(["""x=true,'True',1.0,'1.0',[a],"['a']",'a/b',a_b,A,a"""]))
    names = [point.directory_name for point in twins]
    assert len({name.lower() for name in names}) == len(twins) == 10  # distinct even on a case-insensitive disk


def test_an_old_style_directory_is_still_recognised(tiny_model_dir, tmp_path, capsys):
    output = tmp_path / "sweep"
    command = arguments(tiny_model_dir, output, "--grid", "exclude_parameters=[lm_head/x]")
    assert main(command) == 0
    (run,) = run_directories(output)
    legacy = output / "exclude_parameters=['lm_head_x']"
    run.parent.rename(legacy)  # as evotune named it before hashed names
    capsys.readouterr()
    assert main(command) == 0
    assert "skipped (done)" in capsys.readouterr().out and run_directories(output) == [legacy / "seed0"]
    assert json.loads((output / "sweep.json").read_text())["rows"][0]["final_mean"] is not None
    # a grid where two points share that old name: neither may take it, both start in new directories
    assert main(arguments(tiny_model_dir, output, "--grid", "exclude_parameters=[lm_head/x],[lm_head_x]")) == 0
    assert len(run_directories(output)) == 3 and iterations(legacy / "seed0") == [0, 1, 2]


# --- bad input refused before any run -------------------------------------------------------------


@pytest.mark.parametrize("spec, message", [
    ("parameters=[mlp", "never closed"), ("parameters=mlp]", "closes no open bracket"),
    ("parameters=[mlp}", "closes no open bracket"), ("""stop="a,b""", "quote \" is never closed"),
    ("sigma=0.01,,0.02", "value 2 is empty"), ("sigma=0.01,", "value 2 is empty"),
    ("task_args={a: b: c}", "not valid YAML"), ("sigma=@1", "not valid YAML")])
def test_a_broken_grid_is_named_with_its_fix(spec, message):
    with pytest.raises(ConfigError, match=message) as error:
        parse_grid([spec])
    assert repr(spec) in str(error.value)


def test_quoted_commas_and_nested_brackets_stay_one_value():
    assert parse_grid(["""stop="a,b",'c,d',e""", "task_args={reward: [a, b]},{reward: 'x,y'}"]) == [
        ("stop", ["a,b", "c,d", "e"]), ("task_args", [{"reward": ["a", "b"]}, {"reward": "x,y"}])]


@pytest.mark.parametrize("extra, message", [
    (["--grid", "sigma=0.05", "--seeds", "0", "1", "0"], "repeats 0; give each seed once"),
    (["--grid", "sigma=1,1.0"], "sigma=1 and sigma=1.0 give the same config"),
    (["--grid", "sigma=0.05,-1"], ("1 of 2 sweep runs have a bad config, so none was started: sweep point "
                                   "sigma=-1, seed 0")),
    (["--grid", "parameters=[mlp"], "never closed")])
def test_repeated_or_bad_points_are_refused_before_anything_runs(tiny_model_dir, tmp_path, capsys, extra, message):
    assert main(arguments(tiny_model_dir, tmp_path / "sweep", *extra)) == 2
    error = capsys.readouterr().err
    assert message in " ".join(error.split())  # the CLI wraps the message at 100 columns
    assert not (tmp_path / "sweep").exists()  # nothing ran, nothing was written


def test_an_unknown_metric_is_refused_with_the_logged_ones(tiny_model_dir, tmp_path, capsys):
    output = tmp_path / "sweep"
    command = arguments(tiny_model_dir, output, "--grid", "sigma=0.05")
    assert main(command) == 0
    table = (output / "sweep.md").read_text()
    capsys.readouterr()
    assert main([*command, "--metric", "eval/nosuch"]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert "--metric eval/nosuch: no run of this sweep logged it" in error and "eval/reward" in error
    assert (output / "sweep.md").read_text() == table  # no table of dashes over the good one
    assert main([*command, "--metric", "eval/reward"]) == 0


def test_without_a_config_a_point_is_what_train_with_the_same_settings_runs(tiny_model_dir, tmp_path, capsys):
    assert main(arguments(tiny_model_dir, tmp_path / "sweep", "--grid", "sigma=0.05")) == 0
    train = ["train", "--output-dir", str(tmp_path / "train"), "--set", "sigma=0.05", "--set", "seed=0",
             *arguments(tiny_model_dir, tmp_path)[3:]]
    assert main(train) == 0
    (point,) = run_directories(tmp_path / "sweep")
    config = yaml.safe_load((point / "config.yaml").read_text())
    assert config["noise"] == "rademacher"  # the quickstart's, not the dataclass default
    assert config == yaml.safe_load((tmp_path / "train" / "config.yaml").read_text())
    assert evaluations(point) == evaluations(tmp_path / "train")
    weights = "model.safetensors"
    assert (point / "final" / weights).read_bytes() == (tmp_path / "train" / "final" / weights).read_bytes()


# --- a run that fails -------------------------------------------------------------------------------


def broken_model(tmp_path: Path) -> Path:
    """A model directory whose config.json is torn: the run starts, then fails loading it."""
    directory = tmp_path / "broken-model"
    directory.mkdir()
    (directory / "config.json").write_text('{"model_type": "llama", ')
    return directory


def test_a_failing_point_is_named_at_the_end_with_the_table_of_the_rest(tiny_model_dir, tmp_path, capsys):
    broken = broken_model(tmp_path)
    output = tmp_path / "sweep"
    command = arguments(tiny_model_dir, output, "--grid", f"model={broken},{tiny_model_dir}")
    assert main(command) == 2  # the failing point came first: the next one still ran
    captured = capsys.readouterr()
    error = " ".join(captured.err.split())
    assert f"1 of 2 sweep runs failed: model={broken} seed 0" in error and "sweep.md" in error
    assert f"| {tiny_model_dir} |" in captured.out  # the finished point's row, printed before the error
    table = (output / "sweep.md").read_text()
    assert f"| {tiny_model_dir} |" in table and f"- model={broken} seed 0:" in table
    (finished,) = [run for run in run_directories(output) if final_is_complete(run / "final")]
    metrics = (finished / "metrics.jsonl").read_text()
    assert main(command) == 2  # a re-run retries the failed point and keeps the finished one
    assert "skipped (done)" in capsys.readouterr().out and (finished / "metrics.jsonl").read_text() == metrics


@requires_ray
@pytest.mark.usefixtures("ray_instance")
@pytest.mark.slow  # ~20 s of Ray actors; a failing point's naming is in CI through the sequential test above
def test_a_failing_parallel_point_is_named_with_the_table_of_the_rest(tiny_model_dir, tmp_path):
    broken = broken_model(tmp_path)
    with pytest.raises(SweepFailed, match=f"1 of 2 sweep runs failed: model={broken} seed 0") as failure:
        sweep(base(tiny_model_dir), parse_grid([f"model={broken},{tiny_model_dir}"]), [0], tmp_path / "sweep",
              parallel=2)
    (row,) = failure.value.result["rows"]
    assert row["model"] == tiny_model_dir and row["final_mean"] is not None
    assert f"- model={broken} seed 0:" in (tmp_path / "sweep" / "sweep.md").read_text()


@requires_ray
@pytest.mark.usefixtures("ray_instance")
@pytest.mark.slow  # the names themselves are checked in CI by the sequential test above
def test_parallel_points_whose_old_names_collide_write_their_own_runs(tiny_model_dir, tmp_path):
    # once: two Ray tasks in one directory, one died and the other's metrics.jsonl had iteration 2 twice
    sweep(base(tiny_model_dir), parse_grid(["exclude_parameters=[lm_head/x],[lm_head_x]"]), [0], tmp_path / "sweep",
          parallel=2)
    runs = run_directories(tmp_path / "sweep")
    assert len(runs) == 2 and all(iterations(run) == [0, 1, 2] and final_is_complete(run / "final") for run in runs)


# --- kill -9 while final/ is written ----------------------------------------------------------------

# Runs the sweep command given after the kill point, dying (SIGKILL, as `kill -9`) at that point of final/'s
# writing: weights half written, weights whole but no tokenizer, or (`slow-card`) waiting before the model
# card for the test to kill it from outside.
KILLER = r"""
import os, signal, sys, time
from pathlib import Path

point = sys.argv[1]
def die():
    os.kill(os.getpid(), signal.SIGKILL)
if point == "weights":
    import transformers.modeling_utils as modeling
    save = modeling.safe_save_file
    def half_written(tensors, filename, *args, **kwargs):
        save(tensors, filename, *args, **kwargs)
        if Path(filename).parent.name in ("final", ".final.partial"):  # final/ is written beside, then moved in
            os.truncate(filename, os.path.getsize(filename) // 2)
            die()
    modeling.safe_save_file = half_written
elif point == "tokenizer":
    from transformers import PreTrainedTokenizerBase
    save = PreTrainedTokenizerBase.save_pretrained
    def before_tokenizer(self, directory, *args, **kwargs):
        if Path(directory).name in ("final", ".final.partial"):
            die()
        return save(self, directory, *args, **kwargs)
    PreTrainedTokenizerBase.save_pretrained = before_tokenizer
elif point == "slow-card":
    import evotune.trainer
    evotune.trainer.write_model_card = lambda *args, **kwargs: time.sleep(600)
from evotune.cli.main import console_main
sys.exit(console_main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, tmp_path_factory) -> Path:
    """The run of the killed sweep's point, never interrupted."""
    output = tmp_path_factory.mktemp("uninterrupted") / "sweep"
    assert main(arguments(tiny_model_dir, output, "--grid", "sigma=0.05")) == 0
    (run,) = run_directories(output)
    return run


def start_sweep(kill_point: str, command: list[str]) -> subprocess.Popen:
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", KILLER, kill_point, *command], env=environment,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def kill_when(process: subprocess.Popen, ready: Path) -> None:
    """kill -9 the sweep from outside as soon as `ready` exists."""
    deadline = time.monotonic() + 300
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)


# "final-appears" (a kill wherever it lands in final/'s writing) runs with the slow tests; the three targeted kills,
# on every push, stop final/'s writing at each of its stages (weights half written, no tokenizer, no card).
@pytest.mark.parametrize("kill_point", ["weights", *(pytest.param(point, marks=pytest.mark.slow)
                                                     for point in ("tokenizer", "slow-card", "final-appears"))])
@pytest.mark.engine  # a process killed and resumed: the engine tier
def test_a_sweep_killed_while_final_is_written_completes_that_point_on_rerun(tiny_model_dir, tmp_path, capsys,
                                                                         uninterrupted, kill_point):
    """final/ is written beside (.final.partial) and moved into place whole (runs/lifecycle.py): a kill at any
    stage leaves no final/ at all, never a torn one that could pass for finished, and the rerun completes the point
    (a torn final/ left by an earlier evotune is still resumed: sweep.py's note)."""
    output = tmp_path / "sweep"
    command = arguments(tiny_model_dir, output, "--grid", "sigma=0.05")
    final = output / "sigma=0.05" / "seed0" / "final"
    staging = final.with_name(".final.partial")
    process = start_sweep(kill_point, command)
    if kill_point == "slow-card":
        kill_when(process, staging / "tokenizer_config.json")
    elif kill_point == "final-appears":  # wherever in final/'s writing the kill lands
        kill_when(process, staging)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == -signal.SIGKILL, stderr
    assert not final.exists() or final_is_complete(final)  # never torn
    if not final.exists():
        assert main(command) == 0
        assert "seed 0: partial" in capsys.readouterr().out
    weights = "model.safetensors"
    assert (final / weights).read_bytes() == (uninterrupted / "final" / weights).read_bytes()
    assert evaluations(final.parent) == evaluations(uninterrupted) and iterations(final.parent) == [0, 1, 2]
    assert not staging.exists()
    assert main(command) == 0 and "skipped (done)" in capsys.readouterr().out


def test_a_point_with_a_relative_model_path_is_the_same_point_on_rerun(tiny_model_dir, tmp_path, capsys,
                                                                       monkeypatch):
    # config.yaml records the path absolute; the re-run's relative one must still be this point's run
    monkeypatch.chdir(tmp_path)
    command = arguments(os.path.relpath(tiny_model_dir, tmp_path), tmp_path / "sweep", "--grid", "sigma=0.05")
    assert main(command) == 0
    capsys.readouterr()
    assert main(command) == 0 and "skipped (done)" in capsys.readouterr().out
