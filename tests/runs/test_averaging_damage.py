"""`evotune export --average-last K` on a damaged or changing run (averaging.py): a damaged newest checkpoint is
refused by name with the fix, never averaged from checkpoint.old (whose log ends earlier, so its last K iterates
are other iterations); a checkpoint a running train replaces while export reads it is retried, and what is read
is one whole checkpoint or a message saying the run is being written (never advice to start it again); an INT8/INT4
adapter run is averaged and merged over a float base."""

from __future__ import annotations

import json
import shutil
import threading
import warnings

import pytest
from helpers import essa_config, requires_bitsandbytes, tiny_config

from evotune.cli.main import main
from evotune.errors import CheckpointError
from evotune.files.checkpoint import load_checkpoint, save_checkpoint
from evotune.runs import averaging
from evotune.runs.export import export_model
from evotune.trainer import Trainer

ITERATIONS = 4


@pytest.fixture(scope="module")
def finished_run(tiny_model_dir, tmp_path_factory):
    """A 4-iteration low-rank run checkpointed every iteration: checkpoint/ at 4, checkpoint.old at 3."""
    run = tmp_path_factory.mktemp("averaging_damage") / "run"
    Trainer(tiny_config(tiny_model_dir, space="lowrank", iterations=ITERATIONS, checkpoint_every=1, eval_every=0,
                        report_to=[]), run).train()
    return run


@pytest.fixture
def run(finished_run, tmp_path):
    shutil.copytree(finished_run, tmp_path / "run")
    return tmp_path / "run"


@pytest.fixture
def no_waiting(monkeypatch):
    monkeypatch.setattr(averaging, "RETRY_SECONDS", 0.0)


def damage(log, how: str) -> None:
    if how == "truncated":
        log.write_bytes(log.read_bytes()[:40])
    elif how == "invalid":
        log.write_text("{not json")
    elif how == "edited":  # same length, other numbers: only the checksum sees it
        log.write_text(log.read_text().replace("0.", "1.", 1))
    else:
        log.unlink()


@pytest.mark.parametrize("how", ["truncated", "invalid", "edited", "deleted"])
def test_a_damaged_update_log_is_refused_by_name_with_the_fix_not_averaged_from_the_older_checkpoint(run, tmp_path,
                                                                                                    how):
    damage(run / "checkpoint" / "updates.json", how)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no raw fallback warning either
        with pytest.raises(CheckpointError) as error:
            export_model(str(run), str(tmp_path / "out"), average_last=2)
    message = str(error.value)
    assert f"{run / 'checkpoint'} cannot be used (updates.json" in message
    assert f"checkpoint.old (iteration {ITERATIONS - 1})" in message and f"--output-dir {run} --resume" in message
    assert "--overwrite" not in message and not (tmp_path / "out").exists()


def test_the_cli_refuses_a_damaged_log_with_exit_2_and_the_named_file(run, tmp_path, capsys):
    damage(run / "checkpoint" / "updates.json", "truncated")
    assert main(["export", str(run), "--average-last", "2", "--output-dir", str(tmp_path / "out")]) == 2
    printed = capsys.readouterr().err
    assert "updates.json has 40 bytes" in printed and "Traceback" not in printed and "Warning" not in printed


def test_with_no_intact_checkpoint_left_it_says_to_export_final(run, tmp_path):
    damage(run / "checkpoint" / "updates.json", "deleted")
    damage(run / "checkpoint.old" / "updates.json", "truncated")
    with pytest.raises(CheckpointError, match=f"No intact checkpoint is left.*export {run} without --average-last"):
        export_model(str(run), str(tmp_path / "out"), average_last=2)


def test_a_deleted_newest_checkpoint_is_named_after_waiting_out_a_save(run, tmp_path, no_waiting):
    shutil.rmtree(run / "checkpoint")
    with pytest.raises(CheckpointError, match=r"checkpoint cannot be used \(it is missing\).*--resume"):
        export_model(str(run), str(tmp_path / "out"), average_last=2)


def mid_save(run) -> None:
    """Where a train's save stands between its two renames: checkpoint/ gone to checkpoint.old, the new one in
    checkpoint.tmp."""
    shutil.rmtree(run / "checkpoint.old")
    shutil.copytree(run / "checkpoint", run / "checkpoint.tmp")
    (run / "checkpoint").rename(run / "checkpoint.old")


def test_a_save_that_stays_under_way_is_reported_as_a_run_being_written(run, tmp_path, no_waiting):
    mid_save(run)
    with pytest.raises(CheckpointError, match="most likely writing this run right now, and the run itself is fine"
                       ) as error:
        export_model(str(run), str(tmp_path / "out"), average_last=2)
    assert "--overwrite" not in str(error.value) and not (tmp_path / "out").exists()


def test_a_save_that_completes_while_export_waits_is_read_whole(run, tmp_path, monkeypatch):
    mid_save(run)
    monkeypatch.setattr(averaging.time, "sleep", lambda seconds: (run / "checkpoint.tmp").rename(run / "checkpoint"))
    result = export_model(str(run), str(tmp_path / "out"), average_last=2)
    assert (result["iterations"], result["first_averaged_iteration"]) == (ITERATIONS, ITERATIONS - 1)


def test_a_checkpoint_replaced_while_read_is_never_read_half_old_half_new(run, no_waiting):
    """A thread replaces checkpoint/ as a running train does, alternating two iterations' checkpoints: every read
    is one of them whole (its log as long as its iteration), or the message of a run being written."""
    newest, older = load_checkpoint(run / "checkpoint"), load_checkpoint(run / "checkpoint.old")
    stop = threading.Event()

    def train_saving():
        while not stop.is_set():
            for saved in (older, newest):
                save_checkpoint(run / "checkpoint", saved["state"], saved["space_tensors"],
                                saved["optimizer_tensors"], saved["update_log"])

    writer = threading.Thread(target=train_saving)
    writer.start()
    outcomes = []
    try:
        for _ in range(20):
            try:
                saved = averaging.read_newest_checkpoint(run)
                outcomes.append(len(saved["update_log"]) == saved["state"]["iteration"])
            except CheckpointError as exc:
                assert "is most likely writing this run" in str(exc) and "--overwrite" not in str(exc)
                outcomes.append(True)
    finally:
        stop.set()
        writer.join()
    assert all(outcomes)


def test_a_save_renaming_between_two_looks_is_not_taken_for_a_missing_checkpoint(tmp_path, monkeypatch):
    """The state a save passes through: checkpoint/ renamed to checkpoint.old, checkpoint.tmp not yet renamed to
    checkpoint/. The save's second rename lands right after checkpoint/ is looked at, as it did when the test
    above failed once under load with "it is missing" ("checkpoint" looked at first, then "checkpoint.tmp")."""
    from pathlib import Path

    run = tmp_path / "run"
    (run / "checkpoint.tmp").mkdir(parents=True)
    (run / "checkpoint.old").mkdir()
    real_exists = Path.exists

    def exists_then_rename(path):
        seen = real_exists(path)
        if path.name == "checkpoint" and real_exists(run / "checkpoint.tmp"):
            (run / "checkpoint.tmp").rename(run / "checkpoint")  # the save's rename, between two looks
        return seen

    monkeypatch.setattr(Path, "exists", exists_then_rename)
    assert not averaging._checkpoint_gone(run)


def test_a_save_finishing_right_after_a_read_found_no_checkpoint_is_read_on_the_next_attempt(run, no_waiting,
                                                                                              monkeypatch):
    """A read finds checkpoint/ missing (a save between its renames) and the save's last rename lands after the
    reader's second look at checkpoint/ but before it asks whether a save is under way: the checkpoint is read on
    the next attempt, not called missing (which the test above once saw under load)."""
    newest_iteration = load_checkpoint(run / "checkpoint")["state"]["iteration"]
    (run / "checkpoint").rename(run / "checkpoint.tmp")  # mid-save: the newest is still checkpoint.tmp
    real_identity, looks = averaging._identity, []

    def look_then_finish_the_save(directory):
        identity = real_identity(directory)
        looks.append(identity)
        if len(looks) == 2:
            (run / "checkpoint.tmp").rename(run / "checkpoint")  # the save's last rename
        return identity

    monkeypatch.setattr(averaging, "_identity", look_then_finish_the_save)
    saved = averaging.read_newest_checkpoint(run)
    assert looks[:2] == [None, None] and saved["state"]["iteration"] == newest_iteration


def test_a_run_short_of_its_planned_iterations_says_which_iterations_were_averaged():
    assert "note" not in averaging.summarize(2, 6, 6)
    note = averaging.summarize(2, 4, 6)["note"]
    assert "holds 4 of its 6 iterations" in note and "iterations 3 to 4" in note


@pytest.mark.parametrize("quantization", ["int8", "int4"])
def test_a_quantized_runs_replay_loads_a_float_base(tiny_model_dir, quantization):
    """Fast sibling of the merge test below: bitsandbytes' layers cannot be cast or merged into a float model."""
    from evotune.config import TrainConfig

    extra = {"int4_type": "fp4", "int4_double_quantization": True} if quantization == "int4" else {}
    config = essa_config(tiny_model_dir, strategy="openes", quantization=quantization, **extra)
    replayed = averaging.replay_config(TrainConfig.from_dict(config.to_dict()))
    assert replayed.quantization == "none" and replayed.space == "svd_lora" and replayed.backend == "hf"


@pytest.mark.slow
@requires_bitsandbytes
@pytest.mark.parametrize("quantization", ["int8", "int4"])
def test_a_quantized_adapter_runs_average_merges_into_a_float_model(quantization, tmp_path, tmp_path_factory):
    """Used to end in "You cannot cast a bitsandbytes model in a new dtype"."""
    from helpers import save_tiny_llama
    from safetensors.torch import load_file

    wide = save_tiny_llama(tmp_path_factory.mktemp("wide"), hidden_size=64, intermediate_size=128)  # 4-bit blocks
    Trainer(essa_config(wide, strategy="openes", sigma=0.05, learning_rate=0.05, antithetic=True,
                        quantization=quantization, iterations=3, eval_every=0, checkpoint_every=1), tmp_path / "run"
            ).train()
    result = export_model(str(tmp_path / "run"), str(tmp_path / "merged"), merge=True, average_last=2)
    assert result["adapter"] is None and result["replay_matches_checkpoint"]
    merged = load_file(str(tmp_path / "merged" / "model.safetensors"))
    assert all(tensor.dtype.is_floating_point for tensor in merged.values())
    config = json.loads((tmp_path / "merged" / "config.json").read_text())
    assert "quantization_config" not in config
