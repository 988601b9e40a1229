"""bench/method_matrix: every arm a valid config, the tuning budget equal for every method, the held-out set
disjoint from every split any run trains or is tuned on, and the planner running only what is missing."""

from __future__ import annotations

import json

import pytest

from bench.method_matrix import arms, measure, run


def test_every_arm_is_a_valid_config_of_its_command():
    from evotune.baselines.grpo import GRPORunConfig
    from evotune.config import TrainConfig
    from evotune.config.sft import SFTConfig

    for task in arms.TASKS:
        SFTConfig(**arms.sft_keys(task, 0))
        for name, method in arms.METHODS.items():
            assert len(method["grid"]) == arms.TUNING_SETTINGS  # the same tuning budget for every method
            for setting in method["grid"]:
                keys = arms.run_keys(name, task, setting, seed=0)
                assert keys["max_training_seconds"] == arms.TRAINING_SECONDS and keys["dtype"] == arms.DTYPE
                assert keys["max_new_tokens"] == arms.MAX_NEW_TOKENS
                config = (GRPORunConfig if method["command"] == "grpo" else TrainConfig)(**keys)
                for key, value in setting.items():
                    assert getattr(config, key) == value


def test_es_on_a_lora_uses_grpos_adapter_shape():
    es, grpo = arms.METHODS["es_lora"]["keys"], arms.METHODS["grpo_lora"]["keys"]
    for key in ("lora_rank", "lora_alpha", "lora_target_modules"):
        assert es[key] == grpo[key]


@pytest.mark.parametrize("task", list(arms.TASKS))
def test_the_heldout_set_is_disjoint_from_every_training_and_validation_split(task):
    from evotune.tasks import get_task

    rows = measure.heldout_rows(task)
    assert len(rows) == measure.HELDOUT_SIZE >= 512
    prompts = {json.dumps(row["prompt"]) for row in rows}
    assert len(prompts) == len(rows)
    task_args = arms.TASKS[task]["keys"].get("task_args", {})
    for seed in (arms.TUNING_SEED, *arms.TASKS[task]["seeds"]):
        for num_eval in (arms.VALIDATION_SIZE, arms.MAIN_NUM_EVAL):
            split = get_task(task, seed=seed, num_eval=num_eval, **task_args)
            assert not prompts & {json.dumps(row["prompt"]) for row in split.train_rows + split.eval_rows}


def test_the_plan_tunes_first_and_runs_the_main_runs_with_the_best_validation_setting(tmp_path):
    jobs = run.plan(tmp_path)
    tune = [job for job in jobs if job.get("phase") == "tune"]
    assert len(tune) == len(arms.METHODS) * arms.TUNING_SETTINGS
    main = [job for job in jobs if job.get("phase") == "main"]
    assert len(main) == len(arms.METHODS) * sum(len(task["seeds"]) for task in arms.TASKS.values())
    assert all(job["setting"] is None for job in main)  # nothing chosen before the tuning ran
    assert jobs.index(tune[-1]) < jobs.index(main[0])
    # full ES's tuning done: validation 0.30, 0.45, 0.45, 0.20 -> setting 1 (the first of the tie)
    for setting, score in enumerate([0.30, 0.45, 0.45, 0.20]):
        path = tmp_path / "tune" / "arithmetic" / "full_es" / f"s{setting}_seed{arms.TUNING_SEED}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"training": {"validation_after": score}}))
    chosen = {job["setting"] for job in run.plan(tmp_path) if job.get("phase") == "main" and job["method"] == "full_es"}
    assert chosen == {1}
    assert run.selection(tmp_path, "es_lora") is None
    # ESSA on arithmetic waits for its seed's SFT, whose time it is charged; countdown's runs for the warm start
    essa = next(job for job in main if job["method"] == "essa" and job["task"] == "arithmetic" and job["seed"] == 2)
    assert "warm_start/arithmetic/sft_seed2.json" in essa["needs"] and essa["sft_result"].endswith("sft_seed2.json")
    countdown = next(job for job in main if job["method"] == "full_es" and job["task"] == "countdown")
    assert f"warm_start/countdown/sft_seed{countdown['seed']}.json" in countdown["needs"]


def test_memory_probes_are_short_runs_of_the_chosen_setting_with_each_variant():
    from evotune.baselines.grpo import GRPORunConfig
    from evotune.config import TrainConfig

    for method, variant in arms.MEMORY_PROBES:
        spec = arms.METHODS[method]
        keys = arms.memory_keys(method, spec["grid"][0], variant)
        config = (GRPORunConfig if spec["command"] == "grpo" else TrainConfig)(**keys)
        assert config.iterations == 2 and config.max_training_seconds == 0.0
        if variant == "accumulation4":
            assert config.gradient_accumulation_steps == 4
        if spec["command"] != "grpo":
            assert config.log_drift is (variant != "no_drift")


@pytest.mark.slow
def test_every_job_kind_runs_end_to_end_on_a_tiny_model(tiny_model_dir, tmp_path):
    """The study's jobs, each in its own process as the runner starts them, on the tiny model with seconds of
    training: a warm start (SFT and merge) on countdown, a countdown main run from it for a full-parameter and an
    adapter method, an arithmetic main run of ESSA charged its SFT, GRPO full-parameter, the base measurement and
    a memory probe. Each leaves its result file with what the pages read from it."""
    import os
    import subprocess
    import sys

    from bench.method_matrix import arms as arms_module

    results, runs = tmp_path / "results", tmp_path / "runs"
    environment = {**os.environ, "METHOD_MATRIX_MODEL": tiny_model_dir, "METHOD_MATRIX_SECONDS": "2",
                   "METHOD_MATRIX_HELDOUT": "16", "OMP_NUM_THREADS": "1"}
    for method in arms_module.METHODS:  # the tuning as done: every method picks setting 0 (the first of a tie)
        for setting in range(arms_module.TUNING_SETTINGS):
            path = results / "tune" / "arithmetic" / method / f"s{setting}_seed{arms_module.TUNING_SEED}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"training": {"validation_after": 0.0}}))
    plan = {job["path"]: job for job in run.plan(results)}
    wanted = ["warm_start/countdown/sft_seed0.json", "main/countdown/full_es/seed0.json",
              "main/countdown/es_lora/seed0.json", "warm_start/arithmetic/sft_seed0.json",
              "main/arithmetic/essa/seed0.json", "main/arithmetic/grpo_full/seed0.json", "base/arithmetic.json",
              "memory/grpo_lora_accumulation4.json"]
    for path in wanted:
        job = {key: value for key, value in plan[path].items() if key != "needs"}
        done = subprocess.run([sys.executable, "-m", "bench.method_matrix.job", json.dumps(job), "--results",
                               str(results), "--runs", str(runs)], env=environment, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, (path, done.stdout[-2000:], done.stderr[-4000:])
        result = json.loads((results / path).read_text())
        assert result["machine"]["threads"] == 1
    countdown = json.loads((results / "main/countdown/es_lora/seed0.json").read_text())
    assert countdown["training"]["keys"]["adapter"].endswith("sft_seed0/adapter")  # from the warm start
    # the warm start's own held-out score sits where a main run's does: the start of each countdown run's gain
    start = json.loads((results / "warm_start/countdown/sft_seed0.json").read_text())
    assert start["heldout"]["n"] == 16 and start["heldout"]["scored_budget"] == max(measure.BUDGETS)
    assert start["training"]["steps"] > 0 and "heldout" not in start["training"]
    assert countdown["heldout"]["n"] == 16 and set(countdown["heldout"]["accuracy_by_budget"]) == {"32", "48", "64"}
    assert any(key.endswith("/kl") for key in countdown["heldout"]["retention"])
    essa = json.loads((results / "main/arithmetic/essa/seed0.json").read_text())
    sft = json.loads((results / "warm_start/arithmetic/sft_seed0.json").read_text())
    assert essa["training"]["sft_seconds_charged"] == sft["training"]["training_seconds"] > 0
    memory = json.loads((results / "memory/grpo_lora_accumulation4.json").read_text())["memory"]
    assert memory["keys"]["gradient_accumulation_steps"] == 4 and memory["peak_rss_mib"] > 0


def test_two_grpo_jobs_never_run_at_once():
    ready = [{"path": "tune/arithmetic/grpo_full/s0_seed10.json"}, {"path": "tune/arithmetic/full_es/s1_seed10.json"}]
    assert run.next_job(ready, ["tune/arithmetic/grpo_lora/s0_seed10.json"])["path"].endswith("full_es/s1_seed10.json")
    assert run.next_job(ready, ["tune/arithmetic/lowrank/s0_seed10.json"])["path"].endswith("grpo_full/s0_seed10.json")
    assert run.next_job(ready[:1], ["memory/grpo_lora_default.json"]) is None
