"""The command line is consistent: every option has help, directories are `--output-dir`, every command shows an
example, and the old `--output` spelling of a directory still works (with a deprecation line)."""

from __future__ import annotations

import argparse
import re

import pytest

import evotune
from evotune.cli.main import build_parser, main

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


COMMANDS = sorted(subcommands())
# options that name a file (a JSON, JSONL or PNG), not a directory
FILE_OPTIONS = {"--output", "--samples", "--plot"}


def test_every_command_is_walked():
    assert COMMANDS == ["compare", "doctor", "estimate", "eval", "export", "grpo", "keys", "sft", "sweep", "train"]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_has_help_and_directories_are_output_dir(name):
    command = subcommands()[name]
    assert command.epilog and command.epilog.startswith("examples:\n  evotune "), name
    for action in command._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.help == argparse.SUPPRESS:  # a deprecated alias: it must store into --output-dir
            assert action.option_strings == ["--output"] and action.dest == "output_dir", (name, action)
            continue
        assert action.help and len(action.help) > 10, (name, action.option_strings or action.dest)
        if action.dest == "output_dir":
            assert action.option_strings == ["--output-dir"], (name, action.option_strings)
        if "--output" in action.option_strings:
            assert "file" in action.help, (name, "--output must name a file; a directory is --output-dir")


def test_help_shows_defaults_and_examples(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: train)" in text and "(default: 1)" in text and "examples: evotune sweep" in text
    assert "--output-dir" in text and not re.search(r"--output(?!-dir)", text)  # the deprecated alias is hidden


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"evotune {evotune.__version__}"


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_directory_output_is_required_and_old_spelling_is_deprecated(command, tmp_path, capsys):
    arguments = [command, str(tmp_path / "missing-run")] if command == "compare" else [command, "--grid", "sigma=1"]
    assert main(arguments) == 2
    assert "needs --output-dir DIR" in capsys.readouterr().err
    args = build_parser().parse_args([*arguments, "--output", str(tmp_path / "out")])
    assert args.output_dir == str(tmp_path / "out")
    assert "--output is deprecated here; write --output-dir" in capsys.readouterr().err


def test_doctor_refuses_bad_output_and_work_dir_before_any_check(tmp_path, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("the user's")
    busy = tmp_path / "busy"
    (busy / "model").mkdir(parents=True)
    for arguments, expected in ((["--output", str(a_file / "doctor.json")], f"{a_file} is a file, not a directory"),
                                (["--work-dir", str(a_file)], "is a file"),
                                (["--work-dir", str(busy)], "is not empty")):
        assert main(["doctor", *arguments]) == 2  # at once: no check ran (each takes seconds to minutes)
        err = " ".join(capsys.readouterr().err.split())
        assert expected in err and "Traceback" not in err and "evotune doctor:" not in err, err
    assert a_file.read_text() == "the user's" and list(busy.iterdir()) == [busy / "model"]


def test_run_commands_say_how_long_they_run_with_their_own_defaults(capsys, tmp_path):
    """train and grpo count `iterations` (different things, different defaults), sft `epochs` / `max_steps`: each
    command's help says which, with the default its config really has, and sft refuses `iterations` by name."""
    from evotune.baselines.grpo import GRPORunConfig
    from evotune.config import TrainConfig
    from evotune.sft import SFTConfig

    help_texts = {name: " ".join(subcommands()[name].description.split()) for name in ("train", "grpo", "sft")}
    assert f"`iterations` ES iterations (default {TrainConfig().iterations})" in help_texts["train"]
    assert f"`iterations` GRPO optimizer steps (TRL's `max_steps`; default {GRPORunConfig().iterations}" \
        in help_texts["grpo"]
    assert TrainConfig().iterations != GRPORunConfig().iterations and "not by this count" in help_texts["grpo"]
    assert f"`epochs` passes over the training examples (default {SFTConfig(task='arithmetic').epochs})" \
        in help_texts["sft"] and "`max_steps`" in help_texts["sft"]
    assert "iterations" not in SFTConfig.__dataclass_fields__ and "max_steps" not in TrainConfig.__dataclass_fields__
    assert main(["sft", "--output-dir", str(tmp_path / "run"), "--set", "task=arithmetic", "--set",
                 "iterations=5"]) == 2
    assert "unknown SFT key `iterations`" in capsys.readouterr().err
    assert "## How long a run is: `iterations` and `max_steps`" in (ROOT / "docs" / "cli.md").read_text()


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["grpo", "--help"]])
def test_help_answers_without_importing_torch(argv):
    """`evotune --help` and a command's help are read before anything runs: the process that prints them imports
    neither torch nor transformers (seconds on a CPU), only the parser's own modules."""
    import subprocess
    import sys

    script = ("import sys\nfrom evotune.cli.main import console_main\ntry:\n    console_main(sys.argv[1:])\n"
              "except SystemExit:\n    pass\nprint(sorted({'torch', 'transformers'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: evotune" in done.stdout and done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]
