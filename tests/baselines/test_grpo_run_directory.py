"""`evotune grpo` on the run-directory contract of `evotune train` (issue 28, items 2 and 6).

A resume reads the run's own config.yaml; only the resumable keys may change, anything else is refused by
name before a byte is written; a kill -9 at any point (inside a TRL checkpoint save, at a random moment,
while final/ is written) then a resume ends on the uninterrupted run's weights, bit for bit; a finished
sweep point re-run with other settings is refused instead of "skipped (done)"; paths in config.yaml are
absolute, so a run resumes and evaluates from any working directory.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY_EVAL_BUDGET, requires_trl
from safetensors.torch import load_file

from evotune.cli.main import main

pytestmark = requires_trl

# 2 prompts x 2 completions a step, a checkpoint and an evaluation every step: kills land between them too.
# temperature 1.0: the config's default, where these runs started before `evotune grpo` without a config ran its
# quickstart (0.7); the refusals below name it
TINY = ["task=conciseness", "batch_size=2", "num_generations=2", "max_new_tokens=4", "num_eval=2", "eval_every=1",
        "checkpoint_every=1", "learning_rate=0.05", "report_to=[]", f"eval_max_new_tokens={TINY_EVAL_BUDGET}",
        "temperature=1.0"]


def grpo_args(run: Path, model: str, iterations: int, *extra: str) -> list[str]:
    # an extra setting replaces TINY's of the same key (a key given twice to --set is refused)
    sets = {pair.split("=", 1)[0]: pair for pair in [f"model={model}", f"iterations={iterations}", *TINY, *extra]}
    return ["grpo", "--output-dir", str(run), *[part for key in sets.values() for part in ("--set", key)]]


def fingerprint(run: Path) -> dict[str, str]:
    """{relative path: sha256} of every file in the run directory: what "nothing was changed" compares."""
    return {str(path.relative_to(run)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(run.rglob("*")) if path.is_file()}


def adapter(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "final" / "adapter_model.safetensors"))


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(expected: Path, got: Path) -> None:
    """The same final adapter bit for bit, and the same steps with the same rewards, each logged once."""
    want, have = adapter(expected), adapter(got)
    assert want.keys() == have.keys() and all(torch.equal(want[name], have[name]) for name in want)
    assert [r["iteration"] for r in records(got)] == [r["iteration"] for r in records(expected)]
    assert [r.get("reward_mean") for r in records(got)] == [r.get("reward_mean") for r in records(expected)]


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """An uninterrupted 3-step run (what every interrupted one must end on) and a finished 2-step run of the
    same config (what the bad resumes are tried against)."""
    directory = tmp_path_factory.mktemp("grpo-runs")
    assert main(grpo_args(directory / "three", tiny_model_dir, 3)) == 0
    assert main(grpo_args(directory / "two", tiny_model_dir, 2)) == 0
    return {"three": directory / "three", "two": directory / "two"}


# ---------------------------------------------------------------------------------------------
# Resume: only the resumable keys may change, and a refused request writes nothing


def _train_run_config(run: Path) -> None:
    (run / "config.yaml").write_text("model: smollm2-135m-instruct\nspace: full\nsigma: 0.002\n")


# (the resume's extra arguments, what the error must name, a change to the copied run before it)
BAD_RESUMES = {
    "sampling settings of the issue": (["--set", "temperature=0.3", "--set", "num_generations=4"],
                                       ["`num_generations` 2 -> 4", "`temperature` 1.0 -> 0.3"], None),
    "seed of a finished run": (["--set", "seed=5"], ["`seed` 0 -> 5"], None),
    "learning rate": (["--set", "learning_rate=0.001"], ["`learning_rate` 0.05 -> 0.001"], None),
    "another model": (["--set", "model=smollm2-135m-instruct"], ["`model`", "smollm2-135m-instruct"], None),
    "lora rank": (["--set", "lora_rank=4"], ["`lora_rank` 8 -> 4"], None),
    "dtype": (["--set", "dtype=bfloat16"], ["`dtype` 'float32' -> 'bfloat16'"], None),
    "loss type": (["--set", "loss_type=dr_grpo"], ["`loss_type`"], None),
    "iterations below the steps done": (["--set", "iterations=1"], ["`iterations` 1 is below the 2 steps",
                                                                     "config.yaml is unchanged"], None),
    "resume and overwrite": (["--overwrite"], ["pass only one"], None),
    "resume with a learning-rate sweep": (["--sweep-learning-rates", "1e-5"], ["lr_<value> --resume"], None),
    "a missing adapter": (["--set", "adapter=/no/such/adapter"], ["`adapter` /no/such/adapter does not exist"], None),
    "damaged config.yaml": ([], ["config.yaml is not valid YAML"],
                            lambda run: (run / "config.yaml").write_text("model: [unclosed\n")),
    "config.yaml of a train run": ([], ["not an `evotune grpo` run", "evotune train --output-dir"], _train_run_config),
    "no complete checkpoint": ([], ["no complete checkpoint", "--overwrite"],
                               lambda run: shutil.rmtree(run / "trl")),
    "only a checkpoint cut short by a kill": ([], ["no complete checkpoint"],
                                              lambda run: [(p / "trainer_state.json").unlink()
                                                           for p in (run / "trl").glob("checkpoint-*")]),
}


@pytest.mark.parametrize("name", BAD_RESUMES)
def test_a_bad_resume_is_refused_by_name_and_changes_nothing(name, runs, tmp_path, capsys):
    extra, expected, damage = BAD_RESUMES[name]
    run = tmp_path / "run"
    shutil.copytree(runs["two"], run)
    if damage:
        damage(run)
    before = fingerprint(run)
    assert main(["grpo", "--output-dir", str(run), "--resume", *extra]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert error.startswith("evotune: error:") and "Traceback" not in error
    for text in expected:
        assert text in error, (name, error)
    assert fingerprint(run) == before  # config.yaml, metrics.jsonl, trl/, final/: not one byte changed


def test_a_finished_run_is_not_started_again_over_its_files(runs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(runs["two"], run)
    before = fingerprint(run)
    assert main(grpo_args(run, "unused", 2)) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert "already holds a run" in error and "--resume" in error and "--overwrite" in error
    assert fingerprint(run) == before


def test_resume_reads_the_runs_own_config_and_a_longer_run_ends_where_an_uninterrupted_one_does(runs, tmp_path):
    """`--resume` with no CONFIG: the run's model and settings, not the defaults (the issue's crash); raising
    `iterations` (a resumable key) continues to the 3-step run's exact weights, and config.yaml records 3."""
    run = tmp_path / "run"
    shutil.copytree(runs["two"], run)
    assert main(["grpo", "--output-dir", str(run), "--resume", "--set", "iterations=3"]) == 0
    assert_same_run(runs["three"], run)
    import yaml

    recorded, started = (yaml.safe_load((path / "config.yaml").read_text()) for path in (run, runs["two"]))
    assert recorded == {**started, "iterations": 3}  # only the resumable key changed


def test_a_resume_over_a_metrics_file_damaged_after_its_last_good_line_keeps_those_lines_and_continues(runs, tmp_path,
                                                                                                     capsys):
    """Garbage appended to metrics.jsonl (not UTF-8) made every resume fail on it, with no way out: the resume keeps
    the records before the damage, says so, and ends on the uninterrupted run's weights."""
    run = tmp_path / "run"
    shutil.copytree(runs["two"], run)
    with (run / "metrics.jsonl").open("ab") as handle:
        handle.write(b"\xff\xfe not a record\n")
    assert main(["grpo", "--output-dir", str(run), "--resume", "--set", "iterations=3"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "is damaged from line" in err and "--resume keeps the" in err, err
    assert_same_run(runs["three"], run)


# ---------------------------------------------------------------------------------------------
# kill -9 + resume: the uninterrupted run's weights, bit for bit

KILLER = """
import os, signal, sys
from pathlib import Path
point = sys.argv[1]
if point == "checkpoint":  # inside TRL's save of checkpoint-2: weights, optimizer, RNG written; trainer_state.json not
    from transformers import TrainerState
    real_state = TrainerState.save_to_json
    def dying_state(self, path):
        if self.global_step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        real_state(self, path)
    TrainerState.save_to_json = dying_state
if point == "final":  # final/ half written: the adapter saved, the tokenizer not
    from peft import PeftModel
    real_save = PeftModel.save_pretrained
    def dying_save(self, directory, *args, **kwargs):
        real_save(self, directory, *args, **kwargs)
        if Path(directory).name in ("final", ".final.partial"):  # final/ is written beside, then moved in
            os.kill(os.getpid(), signal.SIGKILL)
    PeftModel.save_pretrained = dying_save
from evotune.cli.main import console_main
sys.exit(console_main(sys.argv[2:]))
"""


def killed(point: str, arguments: list[str]) -> int:
    return subprocess.run([sys.executable, "-c", KILLER, point, *arguments], capture_output=True, text=True,
                          timeout=300).returncode


def kill_at_random_after_first_checkpoint(arguments: list[str], first: Path, rng: random.Random) -> int:
    """`evotune grpo` in a real process, SIGKILLed at a random moment once `first` (a complete checkpoint) exists."""
    process = subprocess.Popen([sys.executable, "-m", "evotune.cli.main", *arguments], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while process.poll() is None and not (first / "trainer_state.json").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    # a few random milliseconds into the last step: a fast CPU ends the step within a delay of most of a second
    time.sleep(rng.uniform(0.0, 0.1))
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()
    return process.returncode


@pytest.mark.engine  # a process killed and resumed: the engine tier
@pytest.mark.slow  # the shared lifecycle's kill points run in CI in files/test_checkpoint.py and test_sft.py
def test_kill_9_anywhere_then_resume_gives_the_uninterrupted_weights(runs, tiny_model_dir, tmp_path):
    """Killed inside a checkpoint save, at a random moment after a checkpoint, and while final/ is written;
    each time resumed with `--resume` alone. TRL restores the optimizer, scheduler and every RNG (torch,
    numpy, python) from its checkpoint and GRPO generates a fresh group each step, so nothing differs."""
    run = tmp_path / "killed"
    resume = ["grpo", "--output-dir", str(run), "--resume"]
    codes = [killed("checkpoint", grpo_args(run, tiny_model_dir, 3))]
    assert codes[0] == -signal.SIGKILL
    config = (run / "config.yaml").read_bytes()
    assert not (run / "trl" / "checkpoint-2" / "trainer_state.json").exists()  # the save was cut short
    codes.append(kill_at_random_after_first_checkpoint(resume, run / "trl" / "checkpoint-2", random.Random(28)))
    codes.append(killed("final", resume))
    assert codes[2] == -signal.SIGKILL and codes[1] in (-signal.SIGKILL, 0), codes
    assert (run / "config.yaml").read_bytes() == config  # no kill and no resume changed the run's record
    assert main(resume) == 0  # in process: one interpreter start less
    assert_same_run(runs["three"], run)
    assert (run / "config.yaml").read_bytes() == config
    assert sorted(p.name for p in (run / "trl").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2",
                                                                          "checkpoint-3"]


def test_a_resume_after_the_time_budget_trains_nothing_and_says_so(tiny_model_dir, tmp_path):
    """A run stopped by `max_training_seconds` is checkpointed at that step: resumed without a larger budget it
    takes no further step (TRL would take one) and warns; with the budget lifted it continues from that step."""
    run = tmp_path / "run"
    assert main(grpo_args(run, tiny_model_dir, 50, "max_training_seconds=1e-6", "checkpoint_every=10")) == 0
    assert [r["iteration"] for r in records(run)] == [0, 1] and (run / "trl" / "checkpoint-1").is_dir()
    with pytest.warns(UserWarning, match="max_training_seconds"):
        assert main(["grpo", "--output-dir", str(run), "--resume"]) == 0
    assert [r["iteration"] for r in records(run)] == [0, 1]
    assert main(["grpo", "--output-dir", str(run), "--resume", "--set", "max_training_seconds=0",
                 "--set", "iterations=2"]) == 0
    assert [r["iteration"] for r in records(run)] == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# sweep --command grpo: a finished point asked for with other settings


def test_a_finished_grpo_sweep_point_rerun_with_other_settings_is_refused(tiny_model_dir, tmp_path, capsys):
    sweep = ["sweep", "--command", "grpo", "--output-dir", str(tmp_path / "sweep"), "--grid", "learning_rate=0.05",
             *[part for key in [f"model={tiny_model_dir}", "iterations=2", *TINY] if not key.startswith("learning")
               for part in ("--set", key)]]
    assert main(sweep) == 0
    capsys.readouterr()
    before = fingerprint(tmp_path / "sweep")
    assert "temperature=1.0" in sweep
    assert main([part.replace("temperature=1.0", "temperature=0.5") for part in sweep]) == 2
    captured = capsys.readouterr()
    assert "skipped (done)" not in captured.out
    assert "`temperature` 1.0 -> 0.5" in " ".join(captured.err.split())
    assert fingerprint(tmp_path / "sweep") == before  # the point's run and sweep.json: untouched
    assert main(sweep) == 0  # the same settings again: done, skipped
    assert "skipped (done)" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# Paths in config.yaml (item 6, GRPO side)


def _save_adapter(model_dir: str, directory: Path) -> None:
    from transformers import AutoModelForCausalLM

    from evotune.spaces.lora import init_lora_adapter

    init_lora_adapter(AutoModelForCausalLM.from_pretrained(model_dir), 4, ["q_proj", "v_proj"], 8.0, "gaussian",
                      0).save_pretrained(str(directory))


def test_a_relative_adapter_is_recorded_absolute_and_resumes_and_evaluates_from_elsewhere(tiny_model_dir, tmp_path,
                                                                                          monkeypatch):
    import yaml

    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    elsewhere.mkdir()
    _save_adapter(tiny_model_dir, start / "sft" / "adapter")
    shutil.copytree(tiny_model_dir, start / "tiny")
    monkeypatch.chdir(start)
    assert main(grpo_args(Path("run"), "tiny", 1, "adapter=sft/adapter")) == 0
    recorded = yaml.safe_load((start / "run" / "config.yaml").read_text())
    assert recorded["adapter"] == str((start / "sft" / "adapter").resolve())
    assert recorded["model"] == str((start / "tiny").resolve())
    monkeypatch.chdir(elsewhere)
    assert main(["grpo", "--output-dir", str(start / "run"), "--resume", "--set", "iterations=2"]) == 0
    assert [r["iteration"] for r in records(start / "run")] == [0, 1, 2]
    assert main(["eval", "--model", str(start / "run"), "--task", "conciseness", "--num-eval", "2",
                 "--max-new-tokens", "4", "--output", str(elsewhere / "eval.json")]) == 0


def test_a_missing_adapter_is_named_and_nothing_is_written(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(grpo_args(Path("run"), tiny_model_dir, 1, "adapter=sft/adapter")) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert "`adapter` sft/adapter does not exist" in error and str(tmp_path) in error
    assert not (tmp_path / "run").exists()


def test_a_run_recorded_with_a_relative_adapter_names_it_when_resumed_elsewhere(runs, tmp_path, monkeypatch, capsys):
    """A run written before paths were stored absolute: the error names the path and where to resume from."""
    run = tmp_path / "run"
    shutil.copytree(runs["two"], run)
    import yaml

    values = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**values, "adapter": "sft/adapter"}, sort_keys=False))
    before = fingerprint(run)
    monkeypatch.chdir(tmp_path)
    assert main(["grpo", "--output-dir", str(run), "--resume"]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert "`adapter` sft/adapter does not exist" in error and "resume there" in error
    assert fingerprint(run) == before


def test_a_grpo_run_whose_reward_fails_at_once_leaves_nothing_and_the_same_command_runs_again(
        tiny_model_dir, tmp_path, monkeypatch, capsys):
    """As `evotune train`: a refused start leaves the directory as it was (no config.yaml, no trl/), so the corrected
    command runs without --overwrite."""
    from helpers import flaky_reward_module

    flag = flaky_reward_module(tmp_path, monkeypatch)
    command = grpo_args(tmp_path / "run", tiny_model_dir, 1, "reward_fns=[flaky_rewards.score]")
    assert main(command) == 2
    printed = capsys.readouterr().err
    assert "flaky_rewards.score raised ValueError: the grader is down" in printed and "Traceback" not in printed
    assert not (tmp_path / "run").exists()
    flag.unlink()
    assert main(command) == 0


class _Planted:  # any object that is not a tensor: torch's weights-only loader refuses its pickle
    pass


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_a_resume_over_a_pickled_optimizer_scheduler_or_rng_state_stops_in_one_line(runs, tmp_path, capsys, name):
    """It ended in `_pickle.UnpicklingError: Weights only load failed` from inside transformers' loaders."""
    run = tmp_path / "run"
    shutil.copytree(runs["two"], run)
    [checkpoint] = sorted((run / "trl").glob("checkpoint-*"))[-1:]
    if not (checkpoint / name).exists():
        pytest.skip(f"this TRL checkpoint writes no {name}")
    torch.save({"state": _Planted()}, checkpoint / name)
    assert main(["grpo", "--output-dir", str(run), "--resume", "--set", "iterations=3"]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert "pickle files are not loaded (loading one can run the code it carries)" in error
    assert "Traceback" not in error
