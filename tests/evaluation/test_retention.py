"""Retention of other abilities (`retention_tasks`): logged at every evaluation of an ES run in every space, equal
to a direct evaluation of the same weights, KL 0 at the base and > 0 once training moved the weights; config
errors; the model card and curves show it."""

from __future__ import annotations

import json
import math

import pytest
from helpers import first_in_ci, tiny_config

from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.evaluation.generation import eval_budget, evaluate_model
from evotune.evaluation.kl import k3_kl
from evotune.evaluation.retention import build_retention_tasks, token_pairs
from evotune.tasks import get_task

RETENTION = dict(retention_tasks=["ifeval", "countdown"], retention_num_eval=12)
# One iteration moves the adapters' weights far enough for ifeval's reward to differ from 0 (so the equality with a
# direct evaluation below compares real numbers); full-es's small sigma needs two.
SPACES = {"full": {"iterations": 2}, "lowrank": {"space": "lowrank", "sigma": 0.2, "learning_rate": 0.2},
          "lora": {"space": "lora", "sigma": 0.5, "learning_rate": 0.5},
          "svd_lora": {"space": "svd_lora", "strategy": "openes", "sigma": 0.5, "learning_rate": 0.5}}
SPACES = {name: {"iterations": 1, **values} for name, values in SPACES.items()}


def records_of(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("space", first_in_ci(SPACES))
def test_es_run_logs_retention_equal_to_a_direct_evaluation(space, tiny_model_dir, tmp_path):
    from evotune.trainer import Trainer

    config = tiny_config(tiny_model_dir, eval_every=1, report_to=[], **RETENTION, **SPACES[space])
    trainer = Trainer(config, tmp_path / "run")
    trainer.train()
    records = [r for r in records_of(tmp_path / "run") if "eval/reward" in r]
    assert [r["iteration"] for r in records] == list(range(config.iterations + 1))
    for record in records:
        assert {f"retain/{task}/{metric}" for task in ("ifeval", "countdown")
                for metric in ("reward", "kl")} <= set(record)
    assert records[0]["retain/countdown/kl"] == 0 and records[0]["retain/ifeval/kl"] == 0  # the base itself
    assert records[-1]["retain/countdown/kl"] > 0 and records[-1]["retain/ifeval/kl"] > 0

    # the same numbers from evaluate_model on the trained weights, each task built as the user would
    for name in ("ifeval", "countdown"):
        task = get_task(name, seed=config.seed, num_eval=RETENTION["retention_num_eval"])
        metrics, _ = evaluate_model(trainer.backend, task, task.eval_rows, eval_budget(task, config.max_new_tokens))
        for metric, value in metrics.items():
            assert math.isclose(records[-1][f"retain/{name}/{metric}"], value, rel_tol=1e-9), (name, metric)
    # not all zero, so the equality above compares real numbers
    assert any(records[-1][f"retain/ifeval/{metric}"] for metric in ("reward", "instruction_loose"))
    card = (tmp_path / "run" / "final" / "README.md").read_text()
    assert "## Retention of other tasks" in card and "| countdown/kl | 0 |" in card


def test_full_space_kl_equals_k3_of_the_final_model_against_the_base(tiny_model_dir, tmp_path):
    """The logged KL from a model and base loaded independently from disk (final/ and the model directory)."""
    from evotune.backends import HFBackend
    from evotune.trainer import Trainer

    config = tiny_config(tiny_model_dir, iterations=1, eval_every=1, report_to=[], retention_tasks=["countdown"],
                         retention_num_eval=3)
    Trainer(config, tmp_path / "run").train()
    final = HFBackend.load(str(tmp_path / "run" / "final"), "float32", "cpu")
    base = HFBackend.load(tiny_model_dir, "float32", "cpu")
    task = get_task("countdown", seed=config.seed, num_eval=3)
    _, completions = evaluate_model(final, task, task.eval_rows, eval_budget(task, config.max_new_tokens))
    pairs = token_pairs(final.tokenizer, task.eval_rows, completions)
    expected = k3_kl(final.completion_logprobs(pairs), base.completion_logprobs(pairs))["kl_per_token"]
    logged = records_of(tmp_path / "run")[-1]["retain/countdown/kl"]
    assert expected > 0 and math.isclose(logged, expected, rel_tol=1e-4)


def test_curves_have_a_panel_per_retention_task(tiny_model_dir, tmp_path):
    import matplotlib.image

    from evotune.tracking.tracker import plot_curves

    path = tmp_path / "metrics.jsonl"
    rows = [{"iteration": 0, "eval/reward": 0.1, "retain/ifeval/reward": 0.5, "retain/ifeval/kl": 0.0,
             "retain/arithmetic/accuracy": 0.2, "retain/arithmetic/reward": 0.2, "retain/arithmetic/kl": 0.0},
            {"iteration": 1, "reward_mean": 0.2, "eval/reward": 0.3, "retain/ifeval/reward": 0.4,
             "retain/ifeval/kl": 0.01, "retain/arithmetic/accuracy": 0.1, "retain/arithmetic/reward": 0.1,
             "retain/arithmetic/kl": 0.02}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    height, width = matplotlib.image.imread(plot_curves(path, tmp_path / "curves.png")).shape[:2]
    assert math.isclose(width / height, 4 * 5 / 3.6, rel_tol=0.05)  # train, eval/reward, ifeval, arithmetic


@pytest.mark.parametrize("values, message", [
    ({"task": "conciseness", "retention_tasks": ["conciseness"]}, "the trained `task`"),
    ({"retention_tasks": ["ifeval", "ifeval"]}, "twice"),
    ({"retention_tasks": ["gsm8k"]}, "needs a `dataset`"),
    ({"retention_tasks": ["custom"]}, "needs a `dataset`"),
    ({"retention_tasks": ["ifeval"], "retention_num_eval": 0}, "`retention_num_eval` is 0"),
    ({"retention_tasks": ["ifeval"], "backend": "vllm"}, "retention_kl: false"),
    ({"retention_tasks": ["spelling"]}, "retention_tasks[0]"),
])
def test_retention_config_errors_name_the_key_and_the_fix(values, message):
    with pytest.raises(ConfigError) as error:
        TrainConfig(**{"task": "arithmetic", **values})
    assert message in str(error.value)


def test_retention_keys_are_shared_with_grpo_and_checked_there():
    from evotune.baselines.grpo import GRPORunConfig

    assert GRPORunConfig(retention_tasks=["ifeval"]).retention_kl is True
    with pytest.raises(ConfigError, match="the trained `task`"):
        GRPORunConfig(task="ifeval", retention_tasks=["ifeval"])
    assert TrainConfig(retention_tasks=["ifeval"], backend="vllm", retention_kl=False).retention_tasks == ["ifeval"]


def test_retention_tasks_have_their_own_seeded_split_and_a_too_large_count_names_the_key():
    config = TrainConfig(task="arithmetic", retention_tasks=["conciseness", "ifeval"], retention_num_eval=10, seed=3)
    conciseness, ifeval = build_retention_tasks(config)
    assert len(conciseness.eval_rows) == 10 and len(ifeval.eval_rows) == 10
    assert conciseness.eval_rows == get_task("conciseness", seed=3, num_eval=10).eval_rows
    assert conciseness.eval_rows != get_task("conciseness", seed=4, num_eval=10).eval_rows
    with pytest.raises(ConfigError, match="`retention_num_eval` 500 for the retention task conciseness"):
        build_retention_tasks(TrainConfig(retention_tasks=["conciseness"], retention_num_eval=500))


def test_compare_shows_each_methods_final_retention_with_its_seeds(tmp_path, capsys):
    """Two ES seeds and a GRPO run that logged retention, and one ES seed that did not (a null mean and a note)."""
    import yaml

    from evotune.cli.main import main

    def write_run(name: str, method: str, seed: int, retained: list[dict]) -> str:
        directory = tmp_path / name
        directory.mkdir()
        (directory / "config.yaml").write_text(yaml.safe_dump({"method": method, "seed": seed}))
        records = [{"iteration": 0, "eval/reward": 0.1, **retained[0]}]
        records += [{"iteration": step, "reward_mean": 0.0, "samples_seen": 10 * step, "time_s": 1.0,
                     "eval/reward": 0.2, **values} for step, values in enumerate(retained[1:], start=1)]
        (directory / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
        return str(directory)

    start = {"retain/ifeval/reward": 0.5, "retain/ifeval/kl": 0.0}
    runs = [write_run("es0", "es", 0, [start, {"retain/ifeval/reward": 0.4, "retain/ifeval/kl": 0.02}]),
            write_run("es1", "es", 1, [start, {"retain/ifeval/reward": 0.3, "retain/ifeval/kl": 0.04}]),
            write_run("grpo", "grpo", 0, [start, {"retain/ifeval/reward": 0.2, "retain/ifeval/kl": None}]),
            write_run("plain", "plain", 0, [{}, {}])]
    assert main(["compare", *runs, "--output-dir", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "out" / "compare.json").read_text())
    es, grpo = result["retention"]  # the run without retention records has no retention row
    assert es["seeds"] == [0, 1] and es["retain/ifeval/reward_per_seed"] == [0.4, 0.3]
    assert math.isclose(es["retain/ifeval/reward"], 0.35) and math.isclose(es["retain/ifeval/kl"], 0.03)
    assert math.isclose(es["retain/ifeval/kl_std"], 0.01414, rel_tol=1e-3)
    assert grpo["retain/ifeval/reward"] == 0.2 and grpo["retain/ifeval/kl"] is None
    assert any("grpo" in note and "retain/ifeval/kl" in note for note in result["notes"])
    for text in (printed, (tmp_path / "out" / "compare.md").read_text()):
        assert "| es | ifeval/reward | 0.35 | [0.400, 0.300] | 0.07071 |" in text
        assert "| grpo-lora | ifeval/kl | - | - | - |" in text


def test_sft_logs_retention_before_and_after_its_steps(tiny_model_dir, tmp_path):
    """The LoRA warm start is measured as train and grpo are: its adapter switched off is the KL's base."""
    from evotune.sft import SFTConfig, run_sft

    config = SFTConfig(model=tiny_model_dir, task="arithmetic", num_train=4, num_eval=0, batch_size=4, max_steps=4,
                       learning_rate=5e-2, lora_rank=4, dtype="float32", device="cpu", report_to=[],
                       retention_tasks=["ifeval"], retention_num_eval=4)
    run_sft(config, tmp_path / "sft")
    evaluated = [record for record in records_of(tmp_path / "sft") if "retain/ifeval/reward" in record]
    assert [record["step"] for record in evaluated] == [0, 4]
    assert evaluated[0]["retain/ifeval/kl"] == 0 and evaluated[1]["retain/ifeval/kl"] > 0
    assert not any(key.startswith("eval/") for record in evaluated for key in record)  # num_eval 0: no task eval
