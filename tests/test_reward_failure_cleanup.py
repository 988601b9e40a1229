"""A new run whose reward function fails before its first iteration completes leaves no half-started run behind
(runs/directory.py's removed_if_no_iteration_done): its config.yaml, empty metrics.jsonl (and ESTrainer's data/)
are removed, and the same command then simply runs again; a failure after an
iteration keeps the run's record."""

from __future__ import annotations

import yaml
from helpers import flaky_reward_module, tiny_config

from evotune import ESConfig, ESTrainer
from evotune.callbacks import ESCallback
from evotune.cli.main import main
from evotune.errors import RewardFunctionError
from evotune.trainer import Trainer


def files_under(directory) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*")) if directory.exists() else []


def test_the_cli_removes_a_run_whose_reward_fails_at_once_and_the_same_command_runs_again(
        tiny_model_dir, tmp_path, monkeypatch, capsys):
    flag = flaky_reward_module(tmp_path, monkeypatch)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(dict(model=tiny_model_dir, task="conciseness", reward_fns=["flaky_rewards.score"],
                                          population_size=4, antithetic=True, iterations=1, batch_size=2,
                                          max_new_tokens=4, num_eval=2, dtype="float32", report_to=[])))
    command = ["train", str(config), "--output-dir", str(tmp_path / "run")]
    assert main(command) == 2
    printed = capsys.readouterr().err
    assert "flaky_rewards.score raised ValueError: the grader is down" in printed and "Traceback" not in printed
    assert "the run's files were removed, so the same command starts it again" in printed
    assert not (tmp_path / "run").exists()  # the run made the directory, so it goes too
    flag.unlink()
    assert main(command) == 0  # no --overwrite needed
    assert (tmp_path / "run" / "final" / "config.json").exists()


def test_a_failed_start_leaves_nothing_and_an_iteration_done_keeps_the_record(tiny_model_dir, tmp_path, monkeypatch):
    flag = flaky_reward_module(tmp_path, monkeypatch)
    run = tmp_path / "run"
    run.mkdir()
    config = tiny_config(tiny_model_dir, reward_fns=["flaky_rewards.score"], report_to=[], iterations=3,
                         checkpoint_every=10, eval_every=0)
    try:
        Trainer(config, run).train()
    except RewardFunctionError:
        pass
    assert files_under(run) == []

    class GraderFailsAfterIterationOne(ESCallback):
        def on_iteration_end(self, trainer, record):
            flag.touch()

    flag.unlink()
    trainer = Trainer(config, run, callbacks=[GraderFailsAfterIterationOne()])
    try:
        trainer.train()
    except RewardFunctionError:
        pass
    assert trainer.strategy.iteration == 1  # a run that did an iteration keeps its record (metrics, config)
    assert {"config.yaml", "metrics.jsonl"} <= set(files_under(run))


def test_estrainer_removes_its_data_and_run_files_when_the_reward_fails_at_once(tiny_model_dir, tmp_path, monkeypatch):
    flag = flaky_reward_module(tmp_path, monkeypatch)
    import flaky_rewards

    args = ESConfig(output_dir=str(tmp_path / "es"), population_size=4, antithetic=True, iterations=1, batch_size=2,
                    max_new_tokens=4, num_eval=2, dtype="float32", report_to=[])
    prompts = ["Say hi.", "Name a color.", "Count to two.", "Pick a fruit."]
    script = dict(model=tiny_model_dir, reward_funcs=flaky_rewards.score, train_dataset=prompts, args=args)
    try:
        ESTrainer(**script).train()
    except RewardFunctionError:
        pass
    assert files_under(tmp_path / "es") == []
    flag.unlink()
    ESTrainer(**script).train()  # the same script simply runs again
    assert (tmp_path / "es" / "final" / "config.json").exists()
