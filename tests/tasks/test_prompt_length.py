"""Prompts the model cannot take: a prompt longer than the model's context (plus max_new_tokens) is refused when
the task meets the backend, before any generation, naming the longest prompt; the run directory is left as it was,
so the same command runs once the data is fixed."""

from __future__ import annotations

import json
import re

import pytest
from helpers import requires_vllm, save_vllm_tiny_model, start_engine, stop_engine, tiny_config

from evotune.cli.main import main
from evotune.errors import DataError
from evotune.evaluation.generation import check_prompt_lengths
from evotune.trainer import Trainer

LONG_PROMPT = "word " * 3000  # ~3,000 tokens; the tiny model holds 512 positions


def write_data(path, long_rows: int = 1) -> str:
    rows = [{"prompt": f"Say {n}.", "solution": str(n)} for n in range(12)]
    rows += [{"prompt": LONG_PROMPT, "solution": "0"}] * long_rows
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def custom_config(model_dir: str, data: str, **overrides):
    return tiny_config(model_dir, task="custom", dataset=data, reward_fns=["evotune.tasks:conciseness_reward"],
                       num_eval=4, report_to=[], **overrides)


def test_a_prompt_longer_than_the_context_is_refused_before_training(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(DataError, match=r"longest prompt \((training|held-out) row \d+, 300\d tokens.*context "
                                        r"holds 512"):
        Trainer(custom_config(tiny_model_dir, write_data(tmp_path / "data.jsonl")), run)
    assert not (run / "config.yaml").exists()  # the failed start left nothing that blocks the next attempt


def test_the_same_command_runs_once_the_data_is_fixed(tiny_model_dir, tmp_path):
    run, data = tmp_path / "run", tmp_path / "data.jsonl"
    with pytest.raises(DataError):
        Trainer(custom_config(tiny_model_dir, write_data(data), iterations=1), run)
    write_data(data, long_rows=0)
    Trainer(custom_config(tiny_model_dir, str(data), iterations=1), run).train()  # no --overwrite needed
    assert (run / "final" / "config.json").exists()


def test_max_new_tokens_counts_toward_the_context(tiny_backend):
    rows = [{"prompt": "word " * 200}]
    length = len(tiny_backend.tokenizer(rows[0]["prompt"], add_special_tokens=False)["input_ids"])
    check_prompt_lengths(tiny_backend, {"training": rows}, 512 - length)  # exactly fits
    with pytest.raises(DataError, match=f"max_new_tokens {513 - length} needs 513 positions"):
        check_prompt_lengths(tiny_backend, {"training": rows}, 513 - length)


def test_a_resumed_run_keeps_its_files_when_its_start_fails(tiny_model_dir, tmp_path):
    run, data = tmp_path / "run", tmp_path / "data.jsonl"
    Trainer(custom_config(tiny_model_dir, write_data(data, long_rows=0), iterations=2), run).train()
    before = {path.name for path in run.iterdir()}
    write_data(data)  # the data changed under the run
    with pytest.raises(DataError, match="longest prompt"):
        Trainer(custom_config(tiny_model_dir, str(data), iterations=3), run, resume=True)
    assert {path.name for path in run.iterdir()} == before


def test_cli_train_and_eval_name_the_long_prompt_without_a_traceback(tiny_model_dir, tmp_path, capsys):
    """The CLI's main(), which the `evotune` command runs: an error it did not turn into its message would raise
    here (and print a traceback there)."""
    data = write_data(tmp_path / "data.jsonl")
    train = main(["train", "--output-dir", str(tmp_path / "run"), "--set", f"model={tiny_model_dir}",
                  "--set", "task=custom", "--set", f"dataset={data}",
                  "--set", "reward_fns=[evotune.tasks:conciseness_reward]", "--set", "dtype=float32",
                  "--set", "iterations=1", "--set", "num_eval=4"])
    train_error = capsys.readouterr().err
    evaluate = main(["eval", "--model", tiny_model_dir, "--task", "custom", "--dataset", data, "--eval-dataset", data,
                     "--dtype", "float32", "--task-arg", "reward_fns=[evotune.tasks:conciseness_reward]",
                     "--output", str(tmp_path / "eval.json")])
    for code, stderr in ((train, train_error), (evaluate, capsys.readouterr().err)):
        assert code == 2
        assert re.search(r"longest prompt .* 300\d tokens", stderr), stderr[-2000:]
    assert not (tmp_path / "eval.json").exists()


@requires_vllm
def test_the_vllm_engine_refuses_the_long_prompt_before_generating(tiny_model_dir, tmp_path):
    engine = start_engine(save_vllm_tiny_model(str(tmp_path / "model"), tiny_model_dir), max_model_len=512)
    try:
        assert engine.context_length() == 512
        with pytest.raises(DataError, match=r"longest prompt \(training row 1, 300\d tokens.*holds 512"):
            check_prompt_lengths(engine, {"training": [{"prompt": "hi"}, {"prompt": LONG_PROMPT}]}, 8)
    finally:
        stop_engine(engine)
