"""bench/gpu_check/gpu_check.sh, the script a lent GPU machine runs, dry-run on CPU with the tiny model so it cannot
rot: prepared, installed into a target folder and run from there, as on the GPU machine.

CI's dry run takes the arms that generate differently (one at a time, stacked copies, low-rank) and leaves out
the profile rows (profile_row has its own test here), the learning rows, GRPO, transformers' own loop and
`full_compiled` (torch.compile of the tiny model's decoding step
costs ~10 s of a cold interpreter): each is the same es_row or learn_row with other config keys (checked below on
every push), compiled generation and GRPO have their own tests, and the slow test runs every arm."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu_check import check as gpu_check
from bench.gpu_check.report import Report

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check" / "gpu_check.sh"
SETTINGS = ("--population-size 4 --population-batch-size 2 --batch-size 2 --max-new-tokens 4 --iterations 2 "
            "--num-eval 4 --throughput-num-eval 4 --learn-seconds 1 --dtype float32")


@pytest.fixture(scope="module")
def installed_site(tmp_path_factory):
    """evotune's wheel, prepared and installed as on the GPU machine (a small stand-in for the model file)."""
    folder = tmp_path_factory.mktemp("gpu-site")
    wheels = folder / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(ROOT)], check=True, capture_output=True)
    model = folder / "Model.gguf"
    model.write_bytes(b"gguf stand-in")
    carry = folder / ".gpu_carry"
    environment = {**os.environ, "CARRY_ARGS": f"--wheel-source {wheels} --model {model} --carry {carry}"}
    subprocess.run(["bash", str(SCRIPT), "prepare"], env=environment, check=True, capture_output=True)
    site = folder / "site"
    environment = {**os.environ, "SITE": str(site), "CARRY_ARGS": f"--carry-folder {max(carry.glob('call*'))}"}
    done = subprocess.run(["bash", str(SCRIPT), "install"], env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"{site}/evotune/__init__.py" in done.stdout  # the import check after installing
    return site


def dry_run(site: Path, tiny_model_dir: str, tmp_path: Path, arms: list[str], learn: bool = True,
            profile: bool = True) -> dict:
    output = tmp_path / "gpu_check.json"
    extra = ("" if learn else " --no-learn") + ("" if profile else " --no-profile")
    environment = {**os.environ, "DEVICE": "cpu", "MODEL": tiny_model_dir, "OUTPUT": str(output), "SITE": str(site),
                   "WORK": str(tmp_path / "runs"), "GPU_CHECK_ARGS": f"{SETTINGS} --arms {' '.join(arms)}{extra}",
                   "TIMEOUT": "300"}
    done = subprocess.run(["bash", str(SCRIPT), "run"], env=environment, cwd=ROOT,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["facts"]["device"] == "cpu"
    assert report["facts"]["evotune"].startswith(str(site)), report["facts"]  # the installed wheel, not src/
    assert report["resume"]["differing"] == 0 and report["resume"]["tensors"] > 0, report["resume"]
    for arm in (arm for arm in arms if arm not in ("grpo", "resume")):
        row = report[arm]
        assert "error" not in row, (arm, row)
        assert row["iterations"] == 2 and row["seconds_per_iteration"] > 0
        assert row["pure_generation_seconds"] > 0 and row["fraction_of_pure_inference"] > 0
        assert row["token_slots_per_second"] == pytest.approx(4 * 2 * 4 / row["seconds_per_iteration"], rel=0.01)
    assert report["full_batched"]["settings"] == {"population_batch_size": 2, "master_device": "host"}
    assert report["full_batched"]["candidates_per_generate"] == 2
    assert report["full_one_at_a_time"]["candidates_per_generate"] == 1
    assert len(report["full_one_at_a_time"]["reward_mean_per_iteration"]) == 2
    # the same seeds: the batched arm generated what the one-at-a-time arm did (float32)
    rewards = report["full_one_at_a_time"]["reward_mean_per_iteration"]
    assert report["full_batched"]["reward_mean_per_iteration"] == rewards
    assert report["full_batched"]["rows_per_generate"] == 4
    assert report["lowrank"]["rows_per_generate"] == 8  # the whole population in one generate
    if "full_own_loop" in arms:  # the same greedy tokens with and without the host syncs: the same learning
        assert report["full_own_loop"]["accuracy_after"] == report["full_one_at_a_time"]["accuracy_after"]
    if "grpo" in arms:
        assert "error" not in report["grpo"] and report["grpo"]["steps"] == 2, report["grpo"]
    for arm in (arm for arm in gpu_check.PROFILE_ARMS if arm in arms and profile):  # where the time went
        row = report[f"profile_{arm}"]
        assert "error" not in row, (arm, row)
        assert {"ask", "reward", "tell", "apply_update"} <= row["phase_seconds"].keys(), row["phase_seconds"]
        assert row["phase_calls"]["reward"] == 4  # one call per candidate
        assert row["top_operators"] and row["iteration_seconds"] > 0
    for name in ("learn_lowrank_seed0", "learn_full_batched_seed0", "learn_grpo_seed0") if learn else ():
        row = report[name]
        assert "error" not in row, (name, row)
        assert row["steps"] >= 1 and 0 <= row["accuracy_before"] <= 1 and 0 <= row["accuracy_after"] <= 1
    return report


@pytest.mark.engine  # the whole GPU check end to end on CPU: the engine tier
def test_gpu_check_dry_run_on_cpu(installed_site, tiny_model_dir, tmp_path):
    """CI's dry run: the installed wheel, the resume check and the arms that differ in how they generate (the slow
    test below adds transformers' own loop, compiled generation, GRPO and the learning rows)."""
    arms = ["resume", "full_one_at_a_time", "full_batched", "lowrank"]
    report = dry_run(installed_site, tiny_model_dir, tmp_path, arms, learn=False, profile=False)
    assert "full_compiled" not in report and "grpo" not in report  # --arms picks
    assert not any(name.startswith(("learn_", "profile_")) for name in report)  # --no-learn, --no-profile


def test_every_arm_is_a_config_train_accepts(tiny_model_dir):
    """Each arm's overrides on the script's base settings make a valid TrainConfig (a renamed key fails here)."""
    from evotune.config import TrainConfig

    args = argparse.Namespace(model=tiny_model_dir, population_size=4, iterations=2, batch_size=2, max_new_tokens=4,
                              num_eval=4, device="cpu", dtype="float32")
    for name, overrides in gpu_check.ARMS.items():
        config = TrainConfig(**gpu_check.base_config(args, **overrides))
        for key, value in overrides.items():
            assert getattr(config, key) == value, (name, key)
    assert gpu_check.ARMS["full_compiled"] == {"compile_generation": True, "master_device": "host"}


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu_with_every_arm(installed_site, tiny_model_dir, tmp_path):
    report = dry_run(installed_site, tiny_model_dir, tmp_path, ["resume", *gpu_check.ARMS, "grpo"])
    assert report["full_compiled"]["settings"] == {"compile_generation": True, "master_device": "host"}
    assert "error" not in report["full_compiled"], report["full_compiled"]


def test_rows_measured_on_the_same_card_are_carried_and_not_measured_again(tmp_path):
    """--previous: a lent GPU's minutes go to the rows no earlier call on a card of that name measured."""
    h200 = {"facts": {"name": "NVIDIA H200"}, "resume": {"tensors": 272, "differing": 0},
            "lowrank": {"seconds_per_iteration": 2.8}, "grpo": {"skipped": "15 s left"},
            "full_compiled": {"error": "RuntimeError: boom"}}
    h100 = {"facts": {"name": "NVIDIA H100 80GB HBM3"}, "full_own_loop": {"seconds_per_iteration": 30.0}}
    (tmp_path / "gpu_check_h200.json").write_text(json.dumps(h200))
    (tmp_path / "gpu_check_h100.json").write_text(json.dumps(h100))
    previous = [tmp_path / "gpu_check_h200.json", tmp_path / "gpu_check_h100.json"]
    report = Report(tmp_path / "out.json", 1000.0, {"name": "NVIDIA H200"}, previous)
    assert set(report.carried) == {"resume", "lowrank"}  # not the skipped or failed rows, not another card's
    measured = []
    for name in ("resume", "lowrank", "grpo", "full_own_loop"):
        report.step(name, lambda name=name: measured.append(name) or {"seconds_per_iteration": 1.0})
    assert measured == ["grpo", "full_own_loop"]
    written = json.loads((tmp_path / "out.json").read_text())
    assert written["lowrank"] == {"seconds_per_iteration": 2.8, "carried_from": "gpu_check_h200.json"}
    assert written["grpo"] == {"seconds_per_iteration": 1.0}


def test_a_step_whose_estimate_does_not_fit_is_skipped(tmp_path):
    report = Report(tmp_path / "out.json", 30.0, {"name": "cpu"})
    report.step("full_one_at_a_time", lambda: pytest.fail("started without the time"),
                needs_seconds=gpu_check.ESTIMATE_SECONDS["full_one_at_a_time"])
    assert "the step needs about 160" in report.results["full_one_at_a_time"]["skipped"]


def test_a_profile_row_accounts_for_its_iteration_and_the_page_renders_it(tiny_model_dir, tmp_path, monkeypatch):
    """profile.py on the tiny model: the timed phases fit inside the iteration, the trainer's methods are its own
    again afterwards, and the page's profile table shows shares that add up to the iteration."""
    from bench.claims import hardware
    from bench.gpu_check.profile import profile_row

    args = argparse.Namespace(model=tiny_model_dir, population_size=4, iterations=2, batch_size=2, max_new_tokens=4,
                              num_eval=4, device="cpu", dtype="float32")
    row = profile_row(gpu_check.base_config(args), tmp_path / "run", "full_one_at_a_time", {})
    phases = row["phase_seconds"]
    assert {"ask", "apply", "generate", "reward", "restore", "tell", "apply_update"} <= phases.keys(), phases
    assert row["phase_calls"]["generate"] == 4 and row["phase_calls"]["apply"] == 4  # one per candidate
    assert sum(phases.values()) <= row["iteration_seconds"] + 1e-3 and row["other_seconds"] >= -1e-3
    assert row["sorted_by"] == "self_cpu_time_total" and len(row["top_operators"]) == 12
    assert row["kernel_launches"] == 0  # a CPU launches none

    monkeypatch.setattr(hardware, "_gpu_check_rows", lambda: {"profile_full_one_at_a_time": ("cpu.json", row)})
    table = hardware.gpu_profile()
    line = next(line for line in table.splitlines() if line.startswith("| full-es"))
    shares = [float(cell.split("(")[1].rstrip("%) ")) for cell in line.split(" | ")[2:8]]
    assert sum(shares) == pytest.approx(100, abs=4), line  # six rounded shares of one iteration
    monkeypatch.setattr(hardware, "_gpu_check_rows", lambda: {})
    assert hardware.gpu_profile().startswith("not measured yet")


def test_bandwidth_distance_counts_a_weight_copy_per_batched_full_rank_candidate():
    """Batched full-rank candidates each read their own copy of the weights per decoding step; low-rank members
    share the base's."""
    facts = {"limits": {"bf16_tflops": 989.0, "bandwidth_tb_s": 4.8}}
    row = {"parameters": 100, "tokens_per_iteration": 960, "decoding_steps_per_iteration": 48,
           "seconds_per_iteration": 1.0, "candidates_per_generate": 30, "settings": {"population_batch_size": "auto"}}
    batched = gpu_check.limits_distance(row, facts, bytes_per_parameter=2)
    lowrank = gpu_check.limits_distance({**row, "settings": {"space": "lowrank"}}, facts, bytes_per_parameter=2)
    assert batched["weight_bytes_per_step"] == 30 * 200 and lowrank["weight_bytes_per_step"] == 200
    assert batched["share_of_bandwidth"] == pytest.approx(30 * lowrank["share_of_bandwidth"], rel=1e-3)
    assert gpu_check.limits_distance(row, {"limits": None}, bytes_per_parameter=2) == {}


def test_learning_rows_take_every_methods_first_seed_before_further_seeds():
    """A lent GPU's minutes may end midway: the first seed of every method comes before any second seed, and the
    batched arm learns with the batch size the throughput row used."""
    arms = {"full_batched": {"population_batch_size": 2}, "lowrank": gpu_check.ARMS["lowrank"]}
    order = [(name, seed) for name, _, seed in gpu_check.learning_order(arms, has_trl=True)]
    assert order == [("lowrank", 0), ("full_batched", 0), ("grpo", 0), ("lowrank", 1), ("grpo", 1), ("lowrank", 2),
                     ("grpo", 2)]
    batched = next(overrides for name, overrides, _ in gpu_check.learning_order(arms, False) if name == "full_batched")
    assert batched == {"population_batch_size": 2}
    assert "grpo" not in {name for name, _, _ in gpu_check.learning_order(arms, has_trl=False)}


def test_rows_named_for_remeasuring_are_measured_again_though_carried(tmp_path):
    """--remeasure (default REMEASURE): rows whose code changed since a card measured them are measured again."""
    h200 = {"facts": {"name": "NVIDIA H200"}, "lowrank": {"seconds_per_iteration": 2.8},
            "full_compiled": {"seconds_per_iteration": 10.6}}
    (tmp_path / "gpu_check_h200.json").write_text(json.dumps(h200))
    report = Report(tmp_path / "out.json", 1000.0, {"name": "NVIDIA H200"},
                              [tmp_path / "gpu_check_h200.json"], remeasure=["lowrank"])
    measured = []
    for name in ("lowrank", "full_compiled"):
        report.step(name, lambda name=name: measured.append(name) or {"seconds_per_iteration": 1.0})
    assert measured == ["lowrank"] and report.results["full_compiled"]["carried_from"] == "gpu_check_h200.json"
    assert set(gpu_check.REMEASURE) <= set(gpu_check.ARMS)


def test_the_plan_says_what_a_lent_gpu_would_measure_carry_and_skip(tmp_path, capsys, monkeypatch):
    """--plan, with no device: rows an earlier report on this card measured are carried, the rest measured in order
    while their estimates fit the budget, the others skipped; nothing is run."""
    h200 = {"facts": {"name": "NVIDIA H200"}, "resume": {"tensors": 1, "differing": 0},
            "full_one_at_a_time": {"seconds_per_iteration": 34.1}, "lowrank": {"seconds_per_iteration": 2.8}}
    (tmp_path / "gpu_check_h200.json").write_text(json.dumps(h200))
    monkeypatch.setattr(sys, "argv", ["check", "--plan", "--budget-seconds", "200", "--remeasure", "lowrank",
                                      "--arms", "resume", "full_one_at_a_time", "full_batched", "lowrank",
                                      "--previous", str(tmp_path / "gpu_check_h200.json")])
    gpu_check.main()
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "carried from gpu_check_h200.json" in lines["resume"]
    assert "carried from" in lines["full_one_at_a_time"]
    assert "measure, ~70 s (~70 s of 200)" in lines["full_batched"]
    assert "measure, ~45 s (~115 s of 200)" in lines["lowrank"]  # named for remeasuring
    assert "measure, ~40 s" in lines["profile_lowrank"] and "does not fit" in lines["profile_full_batched"]
