"""A checkpoint written by an earlier evotune (a3d5286, before the optimizers, the checkpoint format and the run
directory moved to their own packages) resumes with this code and ends bit for bit on the weights that earlier code
ends on from the same checkpoint: full-parameter ES with Adam, weight decay and anchored weight decay, its optimizer
moments in the checkpoint (tests/data/checkpoint_a3d5286, written with that commit's tests/helpers). Greedy
generation rounds differently on other CPUs' kernels, so that code's final weights are recorded per CPU kind
(expected.json; reference.py records one)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import yaml
from helpers import save_tiny_llama
from safetensors.torch import load_file

from evotune.config import TrainConfig
from evotune.trainer import Trainer

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoint_a3d5286"


def digest(tensors) -> dict[str, str]:
    return {name: hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
            for name, tensor in sorted(tensors.items())}


def test_a_checkpoint_of_the_earlier_code_resumes_to_its_uninterrupted_weights(tmp_path):
    expected = json.loads((DATA / "expected.json").read_text())
    # the tiny model of that commit's tests (SmolLM2's whole tokenizer) is rebuilt from its seed: the same weights the
    # earlier code trained
    tiny_model_dir = save_tiny_llama(tmp_path / "tiny-llama", vocab=None)
    assert digest(load_file(str(Path(tiny_model_dir) / "model.safetensors"))) == expected["model_sha256"]
    run = tmp_path / "run"
    shutil.copytree(DATA / "run", run)
    values = yaml.safe_load((run / "config.yaml").read_text())
    values["model"] = tiny_model_dir  # recorded as the absolute path of the machine that wrote it
    (run / "config.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    config = TrainConfig(**{**values, "iterations": expected["iterations"]})
    resumed = Trainer(config, run, resume=True)
    assert resumed.strategy.iteration == expected["checkpoint_iteration"]
    resumed.train()
    # the earlier code's own result on this machine's kind of CPU: greedy generation rounds differently on other
    # kernels, so each CPU kind has its reference (reference.py records a new one)
    references = expected["final_state_sha256_by_cpu"]
    final = digest(resumed.space.state_tensors())
    assert final in references.values(), (
        f"the resumed run ended on weights that a3d5286's code ended on with none of {sorted(references)}; on a CPU "
        f"kind not listed there, record its reference with {DATA / 'reference.py'} (its docstring says how)")
