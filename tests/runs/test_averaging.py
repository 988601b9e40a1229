"""`evotune export --average-last K` (averaging.py): the mean of a run's last K iterates, rebuilt from its update
log, equals the average of the means the run itself held after each of those iterations; K = 1 is the run's own
final model bit for bit; a replay that does not end on the checkpoint is refused."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import essa_config, tiny_config
from safetensors.torch import load_file

from evotune.callbacks import ESCallback
from evotune.cli.main import main
from evotune.errors import CheckpointError, ConfigError
from evotune.runs.export import export_model
from evotune.trainer import Trainer

ITERATIONS = 5


class RecordMeans(ESCallback):
    """The space's mean after every iteration's update, as the run held it."""

    def __init__(self):
        self.means: list[dict[str, torch.Tensor]] = []

    def on_iteration_end(self, trainer, record):
        state = trainer.space.state_tensors()
        self.means.append({name: tensor.detach().cpu().clone() for name, tensor in state.items()})


CONFIGS = {  # Adam with an anchor: an update depends on the optimizer's state and on the base, not only its seeds
    "full": lambda model: tiny_config(model, iterations=ITERATIONS, report_to=[], optimizer="adam",
                                      anchor_decay=0.5, eval_every=0),
    "lowrank": lambda model: tiny_config(model, space="lowrank", iterations=ITERATIONS, report_to=[], eval_every=0),
    # OpenES over SVD-LoRA singular values: an adapter vector beside frozen SVD bases
    "svd_lora": lambda model: essa_config(model, strategy="openes", sigma=0.05, learning_rate=0.05, antithetic=True,
                                          iterations=ITERATIONS, eval_every=0),
    "cma": lambda model: essa_config(model, iterations=ITERATIONS, eval_every=0),  # ESSA: CMA-ES's mean updates
}


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("averaged_runs")
    means = {}
    for name, make in CONFIGS.items():
        recorder = RecordMeans()
        Trainer(make(tiny_model_dir), root / name, callbacks=[recorder]).train()
        means[name] = recorder.means
    return root, means


@pytest.mark.parametrize("space", ["full", "lowrank"])
@pytest.mark.parametrize("count", [1, 3])
def test_the_average_equals_the_runs_own_last_means(space, count, runs, tmp_path):
    root, means = runs
    result = export_model(str(root / space), str(tmp_path / "out"), average_last=count)
    assert result["replay_matches_checkpoint"] and result["first_averaged_iteration"] == ITERATIONS - count + 1
    exported = load_file(str(tmp_path / "out" / "model.safetensors"))
    last = means[space][-count:]
    assert len(means[space]) == ITERATIONS
    for name in last[0]:
        expected = torch.stack([mean[name] for mean in last]).double().mean(0)
        assert torch.allclose(exported[name].double(), expected, rtol=0, atol=1e-6), name
    if count == 1:  # the final model, bit for bit
        final = load_file(str(root / space / "final" / "model.safetensors"))
        assert all(torch.equal(exported[name], final[name]) for name in final)
    else:  # and not the final model: the iterates moved
        assert any(not torch.equal(means[space][-1][name], last[0][name]) for name in last[0])


def test_an_adapter_runs_average_is_an_adapter_of_the_averaged_vector(runs, tmp_path):
    """OpenES over SVD-LoRA: the averaged searched vector; the frozen SVD bases stay as they are."""
    from evotune.builders import build_space, load_backend, on_hf_backend
    from evotune.config import load_config

    root, means = runs
    export_model(str(root / "svd_lora"), str(tmp_path / "adapter"), average_last=2)
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    # the same adapter from a space holding the averaged vector by hand
    config = on_hf_backend(load_config(root / "svd_lora" / "config.yaml"))
    backend = load_backend(config, "cpu")
    space = build_space(config, backend)
    vector = torch.stack([mean["vector"] for mean in means["svd_lora"][-2:]]).double().mean(0).float()
    assert not torch.equal(vector, means["svd_lora"][-1]["vector"])
    space.load_state_tensors({**means["svd_lora"][-1], "vector": vector})
    space.save_adapter(str(tmp_path / "by_hand"))
    exported = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    by_hand = load_file(str(tmp_path / "by_hand" / "adapter_model.safetensors"))
    assert exported.keys() == by_hand.keys()
    assert all(torch.allclose(exported[k], by_hand[k], rtol=0, atol=1e-6) for k in by_hand)


def test_the_cli_writes_the_average_and_reports_it(runs, tmp_path, capsys):
    root, _ = runs
    assert main(["export", str(root / "lowrank"), "--output-dir", str(tmp_path / "out"), "--average-last", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["average_last"] == 2 and printed["iterations"] == ITERATIONS
    assert (tmp_path / "out" / "model.safetensors").exists() and (tmp_path / "out" / "tokenizer_config.json").exists()


@pytest.mark.parametrize("count", [0, ITERATIONS + 1, -2])
def test_a_count_outside_the_runs_iterations_names_the_range(count, runs, tmp_path):
    root, _ = runs
    with pytest.raises(ConfigError, match=f"from 1 to {ITERATIONS}"):
        export_model(str(root / "full"), str(tmp_path / "out"), average_last=count)
    assert not (tmp_path / "out").exists()


def test_only_a_run_directory_can_be_averaged(runs, tmp_path):
    root, _ = runs
    for target in (root / "full" / "final", root / "full" / "checkpoint"):
        with pytest.raises(ConfigError, match="needs an `evotune train` run directory"):
            export_model(str(target), str(tmp_path / "out"), average_last=2)


def test_a_replay_that_misses_the_checkpoint_is_refused(runs, tmp_path):
    """An update log that no longer leads to the checkpoint's mean (here: one coefficient edited) is not averaged."""
    import shutil

    root, _ = runs
    shutil.copytree(root / "lowrank", tmp_path / "edited")
    log_path = tmp_path / "edited" / "checkpoint" / "updates.json"
    updates = json.loads(log_path.read_text())
    updates[0]["coefficients"][0] += 0.5
    log_path.write_text(json.dumps(updates))
    manifest = tmp_path / "edited" / "checkpoint" / "manifest.json"
    manifest.unlink()  # the checksums would catch the edit first; this checks the replay's own guard
    with pytest.raises(CheckpointError, match="did not end on its checkpoint's mean"):
        export_model(str(tmp_path / "edited"), str(tmp_path / "out"), average_last=2)


def test_a_cma_run_is_refused_with_why(runs, tmp_path):
    """CMA-ES logs only its newest (absolute) mean, so its earlier iterates are gone."""
    root, _ = runs
    with pytest.raises(ConfigError, match="CMA-ES run"):
        export_model(str(root / "cma"), str(tmp_path / "out"), average_last=2)
