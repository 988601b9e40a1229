"""What a user reads before a run: `--print-config` shows the resolved config and runs nothing, the help shows the
defaults that run and the options that are required, and a run directory that exists is refused in words that a
command-line user and a Python caller can both act on."""

from __future__ import annotations

import pytest
import yaml
from helpers import tiny_config

from evotune.cli.main import main
from evotune.cli.parser import build_parser
from evotune.errors import ConfigError


def subcommand(name: str):
    return build_parser()._subparsers._group_actions[0].choices[name]


@pytest.mark.parametrize("command, key, value", [("train", "iterations", 15), ("grpo", "iterations", 10),
                                                 ("sft", "epochs", 1)])
def test_print_config_prints_the_resolved_config_and_writes_nothing(command, key, value, tmp_path, capsys):
    run = tmp_path / "run"
    settings = ["--set", "task=arithmetic"] if command == "sft" else []
    assert main([command, "--output-dir", str(run), "--print-config", "--set", "seed=7", *settings]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["seed"] == 7 and printed[key] == value  # train and grpo without a config: their quickstarts' 15, 10
    assert printed["dtype"] != "auto"  # resolved as config.yaml would record it
    assert not run.exists()


def test_help_shows_the_defaults_that_run_and_the_options_that_are_required():
    train = subcommand("train").format_help()
    assert "VALUE is read as YAML" in " ".join(train.split()) and "--print-config" in train
    assert "15 in the quickstart" in " ".join(subcommand("train").description.split())
    evaluate = " ".join(subcommand("eval").format_help().split())
    assert "seeds the held-out split and sampling (default: 0)" in evaluate
    assert "(0: greedy only) (default: 0)" in evaluate
    for name in ("compare", "sweep"):
        usage = subcommand(name).format_usage()
        assert "--output-dir OUTPUT_DIR" in usage and "[--output-dir" not in usage, usage
    assert "--merge folds a LoRA adapter" in subcommand("export").description


def test_an_existing_run_is_refused_with_the_python_arguments_too(tiny_model_dir, tmp_path):
    from evotune.trainer import Trainer

    run = tmp_path / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=1, report_to=[]), run).train()
    with pytest.raises(ConfigError, match=r"--resume to continue it \(resume=True from Python\).*--overwrite to "
                                          r"replace it \(overwrite=True\).*--output-dir \(output_dir\)"):
        Trainer(tiny_config(tiny_model_dir, iterations=1, report_to=[]), run)


def test_the_quickstart_gives_only_the_keys_the_chosen_parts_read(tmp_path, capsys):
    """`evotune train` without a config starts from the quickstart (low-rank OpenES at learning_rate 0.016):
    choosing CMA-ES with --set drops the quickstart's OpenES keys instead of refusing them, while the same key set
    by the user is refused."""
    assert main(["train", "--output-dir", str(tmp_path / "run"), "--set", "space=svd_lora", "--set", "strategy=cma",
                 "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["strategy"] == "cma" and printed["learning_rate"] == 0.0005  # the default: CMA-ES reads none
    assert main(["train", "--output-dir", str(tmp_path / "run"), "--set", "space=svd_lora", "--set", "strategy=cma",
                 "--set", "learning_rate=0.01", "--print-config"]) == 2
    assert "`learning_rate` is 0.01, but only `strategy: openes` reads it" in " ".join(capsys.readouterr().err.split())
