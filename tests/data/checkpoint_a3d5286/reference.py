"""The reference of tests/files/test_old_checkpoint.py on a CPU kind it has not run on: a3d5286's own code resumes
run/checkpoint on this machine, at one torch thread as under `pytest -n 2`, and prints the final weights' digests
for expected.json's final_state_sha256_by_cpu. Run it with a3d5286's code and tests first on the path:

    git worktree add /tmp/a3d5286 a3d5286
    cd /tmp/a3d5286 && OMP_NUM_THREADS=1 PYTHONPATH=src \\
        python3 /path/to/evotune/tests/data/checkpoint_a3d5286/reference.py
"""

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import yaml

torch.set_num_threads(1)
sys.path.insert(0, str(Path.cwd() / "tests"))
from helpers import save_tiny_llama  # noqa: E402  (a3d5286's tests/helpers.py)
from safetensors.torch import load_file  # noqa: E402

from evotune.config import TrainConfig  # noqa: E402
from evotune.trainer import Trainer  # noqa: E402

DATA = Path(__file__).resolve().parent


def digest(tensors) -> dict[str, str]:
    return {name: hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
            for name, tensor in sorted(tensors.items())}


def main() -> None:
    expected = json.loads((DATA / "expected.json").read_text())
    out = Path(tempfile.mkdtemp())
    tiny_model_dir = save_tiny_llama(out / "tiny-llama")
    assert digest(load_file(str(Path(tiny_model_dir) / "model.safetensors"))) == expected["model_sha256"]
    run = out / "run"
    shutil.copytree(DATA / "run", run)
    values = yaml.safe_load((run / "config.yaml").read_text())
    values["model"] = tiny_model_dir
    (run / "config.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    resumed = Trainer(TrainConfig(**{**values, "iterations": expected["iterations"]}), run, resume=True)
    resumed.train()
    print(json.dumps(digest(resumed.space.state_tensors()), indent=1))


if __name__ == "__main__":
    main()
