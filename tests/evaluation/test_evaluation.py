"""`evotune eval`: intervals, pass@k, the k3 KL estimator, and side-by-side runs on a tiny model; bad arguments
fail before any model loads, and a run directory without final/ or with a damaged checkpoint is a clear error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import fake_run, strict_loads, truncate

from evotune.cli.main import main
from evotune.evaluation.kl import k3_kl
from evotune.evaluation.statistics import pass_at_k, wilson_interval
from evotune.runs import checkpoint as ckpt
from evotune.runs.loading import eval_quantization, load_for_eval


def test_pass_at_k_matches_the_combinatorial_definition():
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the accuracy


def test_wilson_interval_contains_the_estimate_and_narrows():
    low, high = wilson_interval(30, 100)
    assert low < 0.3 < high and (0.2 < low < 0.22) and (0.39 < high < 0.41)
    assert wilson_interval(0, 50)[0] == 0.0 and wilson_interval(0, 50)[1] > 0  # never a zero-width interval
    assert wilson_interval(300, 1000)[1] - wilson_interval(300, 1000)[0] < high - low


def test_k3_estimates_the_kl_between_two_categoricals():
    """Samples from q, k3 with p: the mean approaches KL(q || p) computed exactly."""
    generator = torch.Generator().manual_seed(0)
    q = torch.tensor([0.5, 0.3, 0.2])
    p = torch.tensor([0.2, 0.5, 0.3])
    samples = torch.multinomial(q, 200_000, replacement=True, generator=generator)
    estimate = k3_kl([q.log()[samples]], [p.log()[samples]])["kl_per_token"]
    exact = float((q * (q / p).log()).sum())
    assert estimate == pytest.approx(exact, rel=0.03)
    same = k3_kl([q.log()[samples]], [q.log()[samples]])
    assert same["kl_per_token"] == 0.0 and same["kl_tokens"] == 200_000


@pytest.fixture
def trained_run(tiny_model_dir, tmp_path):
    """A finished full-parameter run on the tiny model (final/ and checkpoint/ differ from the base)."""
    from evotune.config import TrainConfig
    from evotune.trainer import Trainer

    config = TrainConfig(model=tiny_model_dir, task="conciseness", population_size=4, antithetic=True, sigma=0.1,
                         learning_rate=0.5, iterations=2, batch_size=2, max_new_tokens=4, num_eval=4,
                         eval_every=0, checkpoint_every=2, dtype="float32", report_to=[])
    Trainer(config, tmp_path / "run").train()
    return tmp_path / "run"


def test_checkpoint_and_run_directory_load_the_trained_weights(trained_run, tiny_model_dir):
    final = load_for_eval(str(trained_run), "float32", "cpu")
    checkpoint = load_for_eval(str(trained_run / "checkpoint"), "float32", "cpu")
    base = load_for_eval(tiny_model_dir, "float32", "cpu")
    final_params = dict(final.model.named_parameters())
    assert all(torch.equal(param, final_params[name]) for name, param in checkpoint.model.named_parameters())
    assert any(not torch.equal(param, final_params[name]) for name, param in base.model.named_parameters())


def test_eval_cli_side_by_side_with_samples_pass_at_k_and_kl(trained_run, tiny_model_dir, tmp_path, capsys):
    output, samples, plot = tmp_path / "eval.json", tmp_path / "samples.jsonl", tmp_path / "kl.png"
    code = main(["eval", "--model", str(trained_run), "--task", "arithmetic", "--num-eval", "6", "--no-transfer",
                 "--max-new-tokens", "5", "--dtype", "float32", "--num-samples", "2", "--kl-reference", tiny_model_dir,
                 "--output", str(output), "--samples", str(samples), "--plot", str(plot)])
    assert code == 0
    results = json.loads(output.read_text())
    assert [r["model"] for r in results] == [str(trained_run), tiny_model_dir]  # the reference is a row too
    trained, base = results
    for result in results:
        assert {"accuracy", "reward", "accuracy_ci95", "avg@2", "pass@2", "kl_per_token", "time_s"} <= set(result)
        low, high = result["accuracy_ci95"]
        assert low <= result["accuracy"] <= high
        assert result["avg@2"] <= result["pass@2"]
    assert base["kl_per_token"] == 0.0
    assert trained["kl_per_token"] > 0 and trained["kl_tokens"] > 0
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(lines) == 12 and {"model", "prompt", "completion", "reward"} <= set(lines[0])
    assert plot.stat().st_size > 0
    table = capsys.readouterr().out
    assert "kl_per_token" in table.splitlines()[0] and str(trained_run) in table


def test_eval_generates_at_the_tasks_own_budget_unless_told(tiny_model_dir, monkeypatch):
    """No --max-new-tokens: the task's evaluation budget (the one checked not to cut its answers, which a run's
    own evaluations use too), else the fallback for a task without one; the budget used is in the result."""
    from dataclasses import replace

    from evotune.evaluation import evaluate as evaluation
    from evotune.evaluation.evaluate import FALLBACK_MAX_NEW_TOKENS, EvalOptions, evaluate_models
    from evotune.tasks import get_task

    asked_for = []  # the budget of every generate call, which still runs on the real model

    def recording(backend, rows, max_new_tokens, *args, **kwargs):
        asked_for.append(max_new_tokens)
        return generate_in_chunks(backend, rows, max_new_tokens, *args, **kwargs)

    generate_in_chunks = evaluation.generate_in_chunks
    monkeypatch.setattr(evaluation, "generate_in_chunks", recording)
    task = get_task("arithmetic", num_eval=3)
    for budget_task, asked, expected in ((task, None, task.eval_max_new_tokens),
                                         (replace(task, eval_max_new_tokens=None), None, FALLBACK_MAX_NEW_TOKENS),
                                         (task, 5, 5)):
        asked_for.clear()
        [result] = evaluate_models([tiny_model_dir], budget_task,
                                   EvalOptions(max_new_tokens=asked, dtype="float32", transfer=False),
                                   load_for_eval, eval_quantization)
        assert result["max_new_tokens"] == expected and asked_for == [expected]
    assert task.eval_max_new_tokens not in (None, FALLBACK_MAX_NEW_TOKENS, 5)  # the three cases differ


def test_eval_scores_the_transfer_split_beside_the_held_out_prompts(tiny_model_dir, monkeypatch):
    """arithmetic's transfer split (other wordings, subtraction, 3-digit sums) is scored group by group at its own
    budget (never below the held-out one; --transfer-max-new-tokens sets it), pooled with an interval; --no-transfer
    (transfer=False) leaves it out."""
    from dataclasses import replace

    from evotune.evaluation import evaluate as evaluation
    from evotune.evaluation.evaluate import EvalOptions, evaluate_models
    from evotune.tasks import get_task

    asked_for = []  # (prompts, budget) of every generate call, which still runs on the real model

    def recording(backend, rows, max_new_tokens, *args, **kwargs):
        asked_for.append((len(rows), max_new_tokens))
        return generate_in_chunks(backend, rows, max_new_tokens, *args, **kwargs)

    generate_in_chunks = evaluation.generate_in_chunks
    monkeypatch.setattr(evaluation, "generate_in_chunks", recording)
    task = get_task("arithmetic", num_eval=3)
    task = replace(task, transfer_rows={group: rows[:4] for group, rows in task.transfer_rows.items()},
                   transfer_max_new_tokens=9)
    [result] = evaluate_models([tiny_model_dir], task, EvalOptions(max_new_tokens=5, dtype="float32"),
                               load_for_eval, eval_quantization)
    assert asked_for == [(3, 5), (4, 9), (4, 9), (4, 9)]
    assert result["transfer_n"] == 12 and result["transfer_max_new_tokens"] == 9
    groups = [result[f"transfer/{group}"] for group in ("other wordings", "subtraction", "3-digit operands")]
    assert result["transfer_accuracy"] == pytest.approx(sum(groups) / 3)
    low, high = result["transfer_accuracy_ci95"]
    assert 0 <= low <= result["transfer_accuracy"] <= high <= 1
    asked_for.clear()
    [result] = evaluate_models([tiny_model_dir], task, EvalOptions(max_new_tokens=12, transfer_max_new_tokens=7,
                                                                   dtype="float32"), load_for_eval, eval_quantization)
    assert asked_for == [(3, 12), (4, 7), (4, 7), (4, 7)]  # told: its own budget, even below the held-out one
    asked_for.clear()
    [result] = evaluate_models([tiny_model_dir], replace(task, transfer_max_new_tokens=4),
                               EvalOptions(max_new_tokens=6, dtype="float32"), load_for_eval, eval_quantization)
    assert asked_for == [(3, 6), (4, 6), (4, 6), (4, 6)]  # the task's own, never below the held-out budget
    asked_for.clear()
    [result] = evaluate_models([tiny_model_dir], task, EvalOptions(max_new_tokens=5, dtype="float32", transfer=False),
                               load_for_eval, eval_quantization)
    assert asked_for == [(3, 5)] and not any(key.startswith("transfer") for key in result)


def test_kl_is_positive_and_grows_with_the_perturbation(tiny_model_dir):
    """KL from the base is 0 for the base itself and larger for a larger weight change."""
    from evotune.evaluation.evaluate import EvalOptions, _kl
    from evotune.tasks import get_task

    task = get_task("arithmetic", num_eval=4)
    reference = load_for_eval(tiny_model_dir, "float32", "cpu")
    options = EvalOptions(max_new_tokens=6)
    kls = []
    for scale in (0.0, 0.05, 0.5):
        backend = load_for_eval(tiny_model_dir, "float32", "cpu")
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for param in backend.model.parameters():
                param.add_(torch.randn(param.shape, generator=generator) * scale)
        kls.append(_kl(backend, reference, task.eval_rows, options)["kl_per_token"])
    assert kls[0] == pytest.approx(0.0, abs=1e-6) and 0 < kls[1] < kls[2]
    assert all(math.isfinite(k) for k in kls) and not np.isnan(kls).any()


# --- bad arguments and unfinished runs -----------------------------------------------------------


BAD_EVAL_ARGUMENTS = {
    "--max-new-tokens 0": (["--max-new-tokens", "0"], "max_new_tokens"),
    "--num-samples -1": (["--num-samples", "-1"], "num_samples"),
    "--output that is a directory": (["--output", "{tmp}"], "is a directory"),
    "--output under a file": (["--output", "{tmp}/file.txt/out.json"], "is a file, not a directory"),
}


@pytest.mark.parametrize("variant", list(BAD_EVAL_ARGUMENTS))
def test_bad_eval_arguments_fail_before_any_model_loads(variant, tmp_path, capsys):
    (tmp_path / "file.txt").write_text("x")
    extra, expected = BAD_EVAL_ARGUMENTS[variant]
    extra = [argument.replace("{tmp}", str(tmp_path)) for argument in extra]
    # a model that does not exist: had the evaluation started, the error would be about it
    code = main(["eval", "--model", str(tmp_path / "no-such-model"), "--task", "arithmetic", "--num-eval", "2",
                 *extra])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and expected in err and "no-such-model" not in err and "Traceback" not in err


def test_eval_output_in_a_missing_directory_is_created(tiny_model_dir, tmp_path):
    output = tmp_path / "new" / "dir" / "eval.json"
    assert main(["eval", "--model", tiny_model_dir, "--task", "arithmetic", "--num-eval", "2",
                 "--max-new-tokens", "2", "--dtype", "float32", "--output", str(output)]) == 0
    assert strict_loads(output.read_text())[0]["num_eval"] == 2



@pytest.mark.parametrize("command", ["eval", "export"])
def test_run_directory_without_final_names_final_and_checkpoint(command, tmp_path, capsys):
    run = Path(fake_run(tmp_path / "run", [0.1], with_checkpoint=True))
    arguments = (["eval", "--model", str(run), "--task", "arithmetic", "--num-eval", "2"] if command == "eval"
                 else ["export", str(run), "--output-dir", str(tmp_path / "out")])
    assert main(arguments) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "final/" in err and str(run / "checkpoint") in err and "neither config.json" not in err


def test_eval_of_a_damaged_checkpoint_is_a_clear_error(tmp_path, capsys):
    run = Path(fake_run(tmp_path / "run", [0.1], with_checkpoint=True))
    truncate(run / "checkpoint" / "space.safetensors")
    with pytest.warns(ckpt.CheckpointFallbackWarning):
        assert main(["eval", "--model", str(run / "checkpoint"), "--task", "arithmetic", "--num-eval", "2"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "space.safetensors" in err and "Traceback" not in err

