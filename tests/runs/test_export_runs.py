"""`evotune export` of every kind of run directory its help names: full-parameter and low-rank runs (final/ is
the model), a run's checkpoint/ (the mean rebuilt from config and checkpoint), and an adapter run's checkpoint
(a PEFT adapter, or merged with --merge). Each export equals what the run itself holds, bit for bit."""

from __future__ import annotations

import pytest
import torch
from helpers import essa_config, tiny_config
from safetensors.torch import load_file

from evotune.cli.main import main
from evotune.errors import ConfigError
from evotune.runs.export import export_model
from evotune.trainer import Trainer


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """A full-parameter, a low-rank and an ESSA run of 2 iterations, each checkpointed at its end."""
    root = tmp_path_factory.mktemp("runs")
    configs = {"full": tiny_config(tiny_model_dir, iterations=2, report_to=[]),
               "lowrank": tiny_config(tiny_model_dir, space="lowrank", iterations=2, report_to=[]),
               "essa": essa_config(tiny_model_dir, iterations=2)}
    for name, config in configs.items():
        Trainer(config, root / name).train()
    return root


def weights(directory) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


@pytest.mark.parametrize("space", ["full", "lowrank"])
def test_a_full_or_low_rank_run_directory_exports_its_final_model(space, runs, tmp_path):
    assert main(["export", str(runs / space), "--output-dir", str(tmp_path / "out")]) == 0
    exported, final = weights(tmp_path / "out"), weights(runs / space / "final")
    assert exported.keys() == final.keys() and all(torch.equal(exported[k], final[k]) for k in final)
    assert (tmp_path / "out" / "tokenizer_config.json").exists()


@pytest.mark.parametrize("space", ["full", "lowrank"])
def test_a_checkpoint_exports_the_mean_it_holds(space, runs, tmp_path):
    # the runs ended with a checkpoint at their last iteration, so the checkpoint's mean is final/'s model
    assert main(["export", str(runs / space / "checkpoint"), "--output-dir", str(tmp_path / "out")]) == 0
    exported, final = weights(tmp_path / "out"), weights(runs / space / "final")
    assert all(torch.equal(exported[k], final[k]) for k in final)


def test_a_checkpoints_checksums_are_read_once_per_export(runs, tmp_path, monkeypatch):
    """export finds the newest whole checkpoint (reading its checksums), then loads that one without reading them
    again: the weights are hashed once, not twice."""
    import evotune.files.checkpoint as checkpoint_files

    verified, real = [], checkpoint_files.verify_checkpoint

    def counted(directory):
        verified.append(directory)
        return real(directory)

    monkeypatch.setattr(checkpoint_files, "verify_checkpoint", counted)
    result = export_model(str(runs / "full" / "checkpoint"), str(tmp_path / "out"))
    assert verified == [runs / "full" / "checkpoint"] and result["iteration"] == 2


def test_an_adapter_checkpoint_exports_the_adapter_or_the_merged_model(runs, tmp_path):
    result = export_model(str(runs / "essa" / "checkpoint"), str(tmp_path / "adapter"))
    assert result["adapter"] == str(tmp_path / "adapter")
    exported = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    final = load_file(str(runs / "essa" / "final" / "adapter_model.safetensors"))
    assert exported.keys() == final.keys() and all(torch.equal(exported[k], final[k]) for k in final)
    export_model(str(runs / "essa" / "checkpoint"), str(tmp_path / "merged"), merge=True)
    export_model(str(runs / "essa"), str(tmp_path / "merged_final"), merge=True)
    merged, merged_final = weights(tmp_path / "merged"), weights(tmp_path / "merged_final")
    assert all(torch.equal(merged[k], merged_final[k]) for k in merged_final)


def test_a_checkpoint_without_its_runs_config_is_a_clear_error(runs, tmp_path):
    import shutil

    shutil.copytree(runs / "full" / "checkpoint", tmp_path / "orphan" / "checkpoint")
    with pytest.raises(ConfigError, match="config.yaml is missing"):
        export_model(str(tmp_path / "orphan" / "checkpoint"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
