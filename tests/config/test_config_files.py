"""A config file that is not a config (a directory, a device, binary, UTF-16, an alias bomb, duplicate keys,
nothing at all) is refused at once with a one-paragraph error naming the file and the fix, never a traceback."""

from __future__ import annotations

import time

import pytest

from evotune.cli.main import main
from evotune.config import load_config
from evotune.errors import ConfigError

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


@pytest.mark.parametrize("name, content, expected", [
    ("binary.yaml", bytes(range(256)) * 4, "not UTF-8 text"),
    ("utf16.yaml", "sigma: 0.002\n".encode("utf-16"), "looks like UTF-16"),
    ("nul.yaml", b"sigma: 0.002\n\x00\x00", "binary data"),
    ("duplicate.yaml", b"sigma: 0.002\npopulation_size: 4\nsigma: 0.5\n", "`sigma` is written twice (line 3)"),
    ("empty.yaml", b"# nothing but a comment\n", "holds no config keys"),
    ("list.yaml", b"- sigma\n- 0.002\n", "must hold a mapping"),
    ("bomb.yaml", BOMB.encode(), "expands to more than"),
])
def test_bad_config_files_are_refused_by_name(tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_bytes(content)
    started = time.perf_counter()
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert expected in str(error.value) and str(path) in str(error.value)
    assert len(str(error.value)) < 400 and time.perf_counter() - started < 5  # no expansion, no 4 MB message


def test_directories_devices_and_huge_files_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config("/dev/zero")
    big = tmp_path / "big.yaml"
    big.write_text("sigma: 0.002\n" + "# padding\n" * 120_000)
    with pytest.raises(ConfigError, match="over 1 MiB"):
        load_config(big)


def test_cli_prints_one_paragraph_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "utf16.yaml"
    path.write_bytes("sigma: 0.002\n".encode("utf-16"))
    assert main(["train", str(path), "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "UTF-16" in err and "Traceback" not in err and not (tmp_path / "run").exists()


def test_a_good_config_with_anchors_still_loads(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("sigma: &s 0.002\nlearning_rate: *s\npopulation_size: 4\n")
    config = load_config(path)
    assert config.sigma == config.learning_rate == 0.002


@pytest.mark.parametrize("argument, expected", [
    ({"max_steps": 10}, "TRL's `max_steps` is `iterations` here"),
    ({"num_generations": 8}, "TRL's `num_generations` is `population_size` here"),
    ({"sigmaa": 0.1}, "did you mean `sigma`?"),
])
def test_python_api_names_an_unknown_argument_like_the_cli(argument, expected):
    from evotune import ESConfig
    from evotune.config import TrainConfig

    for config in (TrainConfig, ESConfig):
        with pytest.raises(ConfigError, match=expected.replace("(", r"\(")) as error:
            config(**argument)
        assert isinstance(error.value, TypeError)  # what Python raises for a bad keyword, so `except TypeError` holds


def test_sft_keeps_its_own_max_steps():
    from evotune.sft import SFTConfig

    assert SFTConfig(dataset="d.jsonl", max_steps=3).max_steps == 3


def test_combinations_that_cannot_mean_what_they_say_are_refused():
    from evotune.config import TrainConfig

    with pytest.raises(ConfigError, match="would cut answers that training generates whole"):
        TrainConfig(max_new_tokens=48, eval_max_new_tokens=24)
    assert TrainConfig(max_new_tokens=24, eval_max_new_tokens=48).eval_max_new_tokens == 48
    with pytest.raises(ConfigError, match="`shared_prefix: true` is the hf backend's"):
        TrainConfig(shared_prefix=True, backend="vllm")


def test_prefetch_candidates_may_change_on_resume():
    from evotune.runs.directory import RESUMABLE_KEYS

    assert "prefetch_candidates" in RESUMABLE_KEYS
