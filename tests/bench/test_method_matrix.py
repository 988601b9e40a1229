"""bench/method_matrix: every arm a valid config, the tuning budget equal for every method, the held-out set
disjoint from every split any run trains or is tuned on, and the planner running only what is missing."""

from __future__ import annotations

import json

import pytest

from bench.method_matrix import arms, measure, page, restore, rows, run


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
    # full-es's tuning done: validation 0.30, 0.45, 0.45, 0.20 -> setting 1 (the first of the tie)
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
    adapter method, an arithmetic main run of ESSA charged its SFT, grpo-full, the base measurement and
    a memory probe. Each leaves its result file with what the pages read from it."""
    import os
    import shutil
    import subprocess
    import sys

    from bench.method_matrix import arms as arms_module
    from bench.method_matrix.job import PROBE_SOURCE

    results, runs = tmp_path / "results", tmp_path / "runs"
    environment = {**os.environ, "METHOD_MATRIX_MODEL": tiny_model_dir, "METHOD_MATRIX_SECONDS": "2",
                   "METHOD_MATRIX_HELDOUT": "16", "OMP_NUM_THREADS": "1",
                   PROBE_SOURCE: str(run.ROOT / "src")}  # the probe from this checkout

    def run_job(job: dict) -> subprocess.CompletedProcess:  # in its own process, as the runner starts it
        return subprocess.run([sys.executable, "-m", "bench.method_matrix.job", json.dumps(job), "--results",
                               str(results), "--runs", str(runs)], env=environment, capture_output=True, text=True,
                              timeout=900)
    for method in arms_module.METHODS:  # the tuning as done: every method picks setting 0 (the first of a tie)
        for setting in range(arms_module.TUNING_SETTINGS):
            path = results / "tune" / "arithmetic" / method / f"s{setting}_seed{arms_module.TUNING_SEED}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"training": {"validation_after": 0.0}}))
    plan = {job["path"]: job for job in run.plan(results)}
    wanted = ["warm_start/countdown/sft_seed0.json", "main/countdown/full_es/seed0.json",
              "main/countdown/es_lora/seed0.json", "warm_start/arithmetic/sft_seed0.json",
              "main/arithmetic/essa/seed0.json", "main/arithmetic/grpo_full/seed0.json", "base/arithmetic.json",
              "memory/grpo_lora_accumulation4.json", "sft_alone/arithmetic/seed0.json",
              "warm_start/countdown/sft_seed1.json", "main/countdown/es_lora/seed1.json"]
    # seed 1 as another machine type runs it: the steps of the arm's seed 0 (run.py --step-matched)
    plan["main/countdown/es_lora/seed1.json"]["step_matched"] = {"steps": 2, "median_of": [2],
                                                                "files": ["main/countdown/es_lora/seed0.json"]}
    for path in wanted:
        job = {key: value for key, value in plan[path].items() if key != "needs"}
        done = run_job(job)
        assert done.returncode == 0, (path, done.stdout[-2000:], done.stderr[-4000:])
        result = json.loads((results / path).read_text())
        assert result["machine"]["threads"] == 1
    matched = json.loads((results / "main/countdown/es_lora/seed1.json").read_text())
    assert matched["training"]["steps"] == 2 and matched["training"]["step_matched"]["steps"] == 2
    assert matched["training"]["keys"]["iterations"] == 2 and matched["training"]["keys"]["max_training_seconds"] == 0
    assert matched["speed_probe"]["threads"] == 1 and matched["speed_probe"]["dtype"] == arms_module.DTYPE
    assert matched["speed_probe"]["probe_s"] > 0 and len(matched["speed_probe"]["evotune_commit"]) == 40
    alone = json.loads((results / "sft_alone/arithmetic/seed0.json").read_text())
    assert alone["heldout"]["n"] == 16 and "retain/ifeval/kl" in alone["heldout"]["retention"]  # scored as an arm
    countdown = json.loads((results / "main/countdown/es_lora/seed0.json").read_text())
    assert countdown["training"]["keys"]["adapter"].endswith("sft_seed0/adapter")  # from the warm start
    budgets = {str(budget) for budget in measure.BUDGETS}
    assert countdown["heldout"]["n"] == 16 and set(countdown["heldout"]["accuracy_by_budget"]) == budgets
    assert countdown["heldout"]["scored_budget"] == max(measure.BUDGETS)
    ended = [countdown["heldout"]["ended_by_budget"][str(budget)] for budget in measure.BUDGETS]
    assert ended == sorted(ended) and all(0.0 <= share <= 1.0 for share in ended)
    # the warm start's own held-out score sits where a main run's does: the start of each countdown run's gain
    start = json.loads((results / "warm_start/countdown/sft_seed0.json").read_text())
    assert start["heldout"]["n"] == 16 and start["heldout"]["scored_budget"] == max(measure.BUDGETS)
    assert start["training"]["steps"] > 0 and "heldout" not in start["training"]
    assert all(rows.gain(results, found, "countdown") is not None
               for arm in rows.arms(results, "countdown") for found in arm.runs)
    assert "SFT warm start (the start)" in page.task_table("countdown", results)
    assert any(key.endswith("/kl") for key in countdown["heldout"]["retention"])
    essa = json.loads((results / "main/arithmetic/essa/seed0.json").read_text())
    sft = json.loads((results / "warm_start/arithmetic/sft_seed0.json").read_text())
    assert essa["training"]["sft_seconds_charged"] == sft["training"]["training_seconds"] > 0
    memory = json.loads((results / "memory/grpo_lora_accumulation4.json").read_text())["memory"]
    assert memory["keys"]["gradient_accumulation_steps"] == 4 and memory["peak_rss_mib"] > 0
    # a score read before the budgets grew (as the first main runs were) is measured again from the run's model
    grpo = results / "main/arithmetic/grpo_full/seed0.json"
    first = json.loads(grpo.read_text())
    grpo.write_text(json.dumps({**first, "heldout": {**first["heldout"], "scored_budget": 48}}))
    [job] = [job for job in run.plan(results) if job["kind"] == "rescore"]
    job = {key: value for key, value in job.items() if key != "needs"}
    done = run_job(job)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    again = json.loads((results / "rescore/main/arithmetic/grpo_full/seed0.json").read_text())["heldout"]
    assert again["scored_budget"] == max(measure.BUDGETS) and again["n"] == 16 and "retention" not in again
    assert again["correct"] == first["heldout"]["correct"]  # the same model, questions and greedy decoding

    # a main run scored before the transfer split (as the first arms were) is trained again with its own keys into
    # its own run folder, its SFT charged as before, and measured like a main run, past the template included
    first_essa = results / "main/arithmetic/essa/seed0.json"
    first_essa.write_text(json.dumps({**essa, "heldout": {key: value for key, value in essa["heldout"].items()
                                                          if key != "transfer"}}))
    plan_again = {job["path"]: job for job in run.plan(results)}
    rerun = {key: value for key, value in plan_again["transfer/main/arithmetic/essa/seed0.json"].items()
             if key != "needs"}
    done = run_job(rerun)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    again = json.loads((results / "transfer/main/arithmetic/essa/seed0.json").read_text())
    assert again["training"]["keys"] == essa["training"]["keys"] and again["speed_probe"]["probe_s"] > 0
    assert again["training"]["sft_seconds_charged"] == essa["training"]["sft_seconds_charged"]
    assert again["heldout"]["n"] == 16 and (runs / "arithmetic" / "rerun" / "essa_s0_seed0").is_dir()
    assert again["heldout"]["transfer"]["n"] == essa["heldout"]["transfer"]["n"] > 0

    # a later session has no weights under --runs: the SFT is made again, checked against its result file
    # (steps, adapter digest, the first held-out answers), and a result it does not reproduce stops it
    recorded = json.loads((results / "warm_start/countdown/sft_seed0.json").read_text())
    shutil.rmtree(runs / "countdown" / "sft_seed0")
    [job] = [job for job in restore.with_restores([plan["main/countdown/full_es/seed0.json"]], results, runs, set())]
    job = {key: value for key, value in job.items() if key != "needs"}
    done = run_job(job)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    restored = json.loads((results / "restored/warm_start/countdown/sft_seed0.json").read_text())["restored"]
    assert set(restored["checks"]) == {"steps", "adapter_sha256", "first_answers_correct"}
    assert restored["checks"]["adapter_sha256"][0] == recorded["training"]["adapter_sha256"]
    assert restored["checks"]["first_answers_correct"][1] == recorded["heldout"]["correct"]
    assert restore.weights_present(runs / "countdown" / "sft_seed0")
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps({**recorded, "training": {**recorded["training"], "adapter_sha256": "0" * 64}}))
    done = run_job({**job, "sft_result": str(tampered)})
    assert done.returncode != 0 and "differs from the recorded one" in done.stderr, done.stderr[-3000:]
    assert not restore.weights_present(runs / "countdown" / "sft_seed0")  # no run starts from weights that differ


def test_another_machine_type_may_plan_but_not_run(tmp_path, monkeypatch, capsys):
    """The study's jobs run on the machine type its first run recorded, but for the memory probes alone, whose two
    steps do not hang on the CPU's speed; --plan reads only, so it lists the missing jobs on any machine and says
    whether this one may run them."""
    recorded = {"cpu": "Study CPU", "amx_bf16": True, "cores": 2}
    (tmp_path / "machine.json").write_text(json.dumps(recorded))
    here = run.machine_type()
    assert run.machine_mismatch(tmp_path, recorded) is None
    assert "is not the study's machine type" in run.machine_mismatch(tmp_path, here)
    monkeypatch.setattr("sys.argv", ["run", "--results", str(tmp_path), "--plan"])
    run.main()
    printed = capsys.readouterr().out
    assert "missing main/arithmetic/full_es/seed0.json" in printed and "is not the study's machine type" in printed
    with pytest.raises(SystemExit, match="is not the study's machine type.*--step-matched"):
        run.check_machine(tmp_path, commit_it=False)
    with pytest.raises(SystemExit, match="--only memory/"):  # a timed job among the selected ones
        run.check_machine(tmp_path, commit_it=False, only=["memory/", "main/countdown/"])
    assert run.check_machine(tmp_path, commit_it=False, only=["memory/"])  # the memory probes alone run anywhere
    assert run.check_machine(tmp_path, commit_it=False, step_matched=True)  # and the main runs at equal work
    assert json.loads((tmp_path / "machine.json").read_text()) == recorded  # and leave the study's type as it was
    (tmp_path / "machine.json").write_text(json.dumps(here))
    with pytest.raises(SystemExit, match="run without --step-matched"):  # equal time on the study's own type
        run.check_machine(tmp_path, commit_it=False, step_matched=True)


def test_on_another_machine_type_a_main_run_takes_its_arms_median_steps(tmp_path):
    """--step-matched: a main run on another machine type takes the median of the steps its arm's seeds took on the
    study's type (a step-matched seed is never a source); tuning runs, and arms with no finished seed, wait."""
    study = {"cpu": "Study CPU", "amx_bf16": True, "cores": 2}
    (tmp_path / "machine.json").write_text(json.dumps(study))

    def finished(seed: int, steps: int, cpu: str = "Study CPU", **training) -> None:
        path = tmp_path / "main" / "countdown" / "essa" / f"seed{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"training": {"steps": steps, **training},
                                    "machine": {"cpu": cpu, "amx_bf16": cpu == "Study CPU"}}))

    finished(0, 3)
    finished(1, 4)
    finished(3, 40, cpu="Other CPU")  # not the study's type: not a source
    finished(4, 50, step_matched={"steps": 50})
    matched = run.matched_steps(tmp_path, "countdown", "essa")
    assert matched == {"steps": 4, "median_of": [3, 4], "files": ["main/countdown/essa/seed0.json",
                                                                  "main/countdown/essa/seed1.json"]}
    assert run.matched_steps(tmp_path, "countdown", "grpo_full") is None
    jobs = {job["path"]: job for job in run.plan(tmp_path, step_matched=True)}
    seed2 = jobs["main/countdown/essa/seed2.json"]
    assert seed2["step_matched"] == matched and run.runs_here(seed2, other_type=True)
    assert not run.runs_here(jobs["main/countdown/grpo_full/seed2.json"], other_type=True)
    assert not run.runs_here(jobs["tune/arithmetic/essa/s0_seed10.json"], other_type=True)
    assert run.runs_here(jobs["memory/essa_default.json"], other_type=True)
    # ESSA's SFT alone, scored like an arm, needs the seed's SFT and runs on any machine type (no clock in it)
    assert jobs["sft_alone/arithmetic/seed3.json"]["needs"] == ["warm_start/arithmetic/sft_seed3.json"]
    assert run.runs_here(jobs["sft_alone/arithmetic/seed3.json"], other_type=True)
    assert not any(path.startswith("sft_alone/countdown/") for path in jobs)  # every countdown arm starts from it
    assert "step_matched" not in run.plan(tmp_path)[-1]  # the study's own type plans equal time


def test_on_another_machine_type_a_rerun_takes_its_arms_reruns_median_steps(tmp_path):
    """A main run trained again for the transfer split (run.py's reruns) matches the steps its arm's reruns took on
    the study's type, not the first runs' (the reruns trained on a later commit, at other steps); with no rerun of
    the arm finished there it waits."""
    (tmp_path / "machine.json").write_text(json.dumps({"cpu": "Study CPU", "amx_bf16": True, "cores": 2}))

    def finished(path: str, steps: int, heldout: dict) -> None:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(json.dumps({"job": {"setting": 1}, "heldout": heldout, "training": {
            "steps": steps}, "machine": {"cpu": "Study CPU", "amx_bf16": True}}))

    scored = {"accuracy": 0.3, "scored_budget": measure.SCORED_BUDGET}
    for seed, steps in enumerate((5, 6, 5, 6)):
        finished(f"main/arithmetic/full_es/seed{seed}.json", steps, scored)
        finished(f"main/arithmetic/lowrank/seed{seed}.json", steps, scored)
    for seed, steps in enumerate((8, 9, 7)):
        finished(f"transfer/main/arithmetic/full_es/seed{seed}.json", steps, {**scored, "transfer": {}})
    jobs = {job["path"]: job for job in run.plan(tmp_path, step_matched=True)}
    rerun = jobs["transfer/main/arithmetic/full_es/seed3.json"]
    assert rerun["phase"] == "rerun" and rerun["step_matched"]["steps"] == 8
    assert rerun["step_matched"]["median_of"] == [8, 9, 7] and run.runs_here(rerun, other_type=True)
    assert jobs["main/arithmetic/full_es/seed4.json"]["step_matched"]["median_of"] == [5, 6, 5, 6]
    waiting = jobs["transfer/main/arithmetic/lowrank/seed0.json"]  # no lowrank rerun has finished on the study's type
    assert waiting["step_matched"] is None and not run.runs_here(waiting, other_type=True)


def test_a_run_whose_sft_weights_are_gone_waits_for_them_to_be_made_again(tmp_path):
    """A later session's --runs folder holds no weights of the SFTs earlier sessions made: each job starting from
    one waits for one restore job (not one per job), a running or failed restore is not started again, and a job
    whose SFT weights are there, or that starts from no SFT, starts as it is."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    sft = "warm_start/countdown/sft_seed2.json"
    tuned = "tune/arithmetic/essa/s0_seed10.json"
    ready = [{"path": "main/countdown/essa/seed2.json", "needs": [tuned, sft]},
             {"path": "main/countdown/grpo_lora/seed2.json", "needs": [sft]},
             {"path": "memory/full_es_default.json", "needs": [tuned]}]
    jobs = restore.with_restores(ready, results, runs, skip=set())
    assert [job["path"] for job in jobs] == ["restored/warm_start/countdown/sft_seed2.json",
                                             "memory/full_es_default.json"]
    assert jobs[0] == {"kind": "restore", "task": "countdown", "seed": 2, "needs": [sft],
                       "sft_result": str(results / sft), "path": "restored/" + sft}
    assert [job["path"] for job in restore.with_restores(ready, results, runs, skip={"restored/" + sft})] == [
        "memory/full_es_default.json"]
    weights = restore.weights_folder(runs, sft)
    assert weights == runs / "countdown" / "sft_seed2" and restore.weights_folder(runs, tuned) is None
    (weights / "adapter").mkdir(parents=True)
    (weights / "adapter" / "adapter_model.safetensors").write_bytes(b"")
    assert restore.with_restores(ready, results, runs, skip=set())[0]["path"] == "restored/" + sft  # merged/ missing
    (weights / "merged").mkdir()
    (weights / "merged" / "config.json").write_text("{}")
    assert restore.with_restores(ready, results, runs, skip=set()) == ready
    # a restore killed after making the weights, before its checks ended, left them unchecked: made again
    restore.unchecked_marker(weights).write_text("")
    assert restore.with_restores(ready, results, runs, skip=set())[0]["path"] == "restored/" + sft


def test_two_grpo_jobs_never_run_at_once():
    ready = [{"path": "tune/arithmetic/grpo_full/s0_seed10.json"}, {"path": "tune/arithmetic/full_es/s1_seed10.json"}]
    assert run.next_job(ready, ["tune/arithmetic/grpo_lora/s0_seed10.json"])["path"].endswith("full_es/s1_seed10.json")
    assert run.next_job(ready, ["tune/arithmetic/lowrank/s0_seed10.json"])["path"].endswith("grpo_full/s0_seed10.json")
    assert run.next_job(ready[:1], ["memory/grpo_lora_default.json"]) is None


def test_the_report_quotes_every_result_file_and_lists_what_has_not_run():
    """REPORT.md is generated from the committed result files alone: each tuning run's numbers appear as its file
    has them, and each job without a file is listed as not run (never estimated)."""
    import json

    from bench.method_matrix.report import STUDY, report, status

    text = report(STUDY)
    done, total, missing = status(STUDY)
    assert f"{done} of {total} jobs have a result file" in text
    for path in sorted(STUDY.glob("tune/arithmetic/*/*.json")):
        run = json.loads(path.read_text())["training"]
        assert (f"| {run['steps']} | {run['training_seconds']:.0f} | {run['training_seconds'] / run['steps']:.1f} | "
                f"{100 * run['validation_before']:.1f}% -> {100 * run['validation_after']:.1f}% |") in text, path
    not_run = [path for path in missing if path.startswith("tune/")]
    assert text.count("| not run |") >= len(not_run)


def test_the_committed_report_is_the_one_its_result_files_give():
    """A reader of bench/results/method_matrix/REPORT.md never reads an older answer than the result files beside it
    give: a result file added or a table's wording changed without regenerating it fails here."""
    from bench.method_matrix.report import STUDY, report

    assert (STUDY / "REPORT.md").read_text() == report(STUDY), \
        "REPORT.md is stale: regenerate it with `python -m bench.method_matrix.report`"


def test_the_report_names_the_speed_spread_between_runs_of_equal_work(tmp_path):
    """Two tuning runs that differ only in learning rate have the same shapes per step; the report gives how much
    longer one job's steps took than the other's, from their files."""
    import json

    from bench.method_matrix.report import report

    for setting, (steps, seconds, date) in enumerate([(5, 600.0, "2026-11-27 08:00"), (4, 600.0, "2026-11-27 09:00")]):
        path = tmp_path / "tune" / "arithmetic" / "grpo_full" / f"s{setting}_seed{arms.TUNING_SEED}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"training": {"steps": steps, "training_seconds": seconds, "validation_before": 0.2,
                                                 "validation_after": 0.3}, "machine": {"date": date}}))
    text = report(tmp_path)
    assert "took up to 25% longer per step in one job than in another (grpo-full: 120.0 s at" in text


def test_the_report_says_which_runs_a_token_budget_cuts(tmp_path):
    from bench.method_matrix.report import budget_check

    def write(path: str, scored: int, by_budget: dict[str, float], ended: dict[str, float] | None = None) -> None:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        record = {"scored_budget": scored, "accuracy_by_budget": by_budget, **({"ended_by_budget": ended} if ended
                                                                               else {})}
        (tmp_path / path).write_text(json.dumps({"heldout": record}))

    budgets = ["32", "48", "64", "96", "128"]
    write("base/arithmetic.json", 48, {"32": 0.2, "48": 0.2, "64": 0.2})  # read before the budgets grew
    write("main/arithmetic/full_es/seed0.json", 128, dict(zip(budgets, [0.1, 0.125, 0.25, 0.25, 0.25])),
          dict(zip(budgets, [0.1, 0.5, 0.9, 0.95, 0.97])))
    lines = budget_check(tmp_path, "arithmetic")
    assert "| full-es, seed 0 | 10.0% | 12.5% | 25.0% | 25.0% | 25.0% | 97.0% |" in lines
    assert "| base model | 20.0% | 20.0% | 20.0% |  |  | not measured |" in lines  # 96 and 128 not measured
    assert "not yet measured again (left out of the tables above): base model." in lines[-1]
    assert "Under 99% of the answers ended within 128 tokens: full-es, seed 0 (97.0%)." in lines[-1]
    assert "smaller budget than at the scored one" not in lines[-1]
    write("main/arithmetic/full_es/seed0.json", 128, dict(zip(budgets, [0.3, 0.25, 0.25, 0.25, 0.25])),
          dict(zip(budgets, [0.5, 0.9, 0.99, 1.0, 1.0])))  # text after the answer changed the last number
    assert "Higher at a smaller budget than at the scored one: full-es, seed 0" in budget_check(tmp_path,
                                                                                                "arithmetic")[-1]
    write("base/arithmetic.json", 128, dict(zip(budgets, [0.2] * 5)), dict(zip(budgets, [1.0] * 5)))
    write("main/arithmetic/full_es/seed0.json", 128, dict(zip(budgets, [0.1, 0.25, 0.25, 0.25, 0.25])),
          dict(zip(budgets, [0.5, 0.9, 0.99, 1.0, 1.0])))
    assert budget_check(tmp_path, "arithmetic")[-1] == ("Every run's answers ended within 128 tokens (99% or more) "
                                                        "and no run scores higher at a smaller budget.")
    # on countdown each seed's SFT start is a row too: its answers are the runs' starting point
    write("warm_start/countdown/sft_seed1.json", 128, dict(zip(budgets, [0.4] * 5)), dict(zip(budgets, [0.9] * 5)))
    lines = budget_check(tmp_path, "countdown")
    assert "| SFT warm start, seed 1 | 40.0% | 40.0% | 40.0% | 40.0% | 40.0% | 90.0% |" in lines
    assert "SFT warm start, seed 1 (90.0%)" in lines[-1]


def test_a_score_read_at_an_older_budget_is_measured_again_before_any_page_uses_it(tmp_path):
    """A finished run read at 48 tokens gets a rescore job (first in the plan, needing the run's file); until it has
    run, the run is left out of its arm; once it has, the arm reads the rescore's accuracy and the run's own
    retention. A run read at the current budget gets no rescore."""
    from bench.method_matrix.rows import arm

    path = "main/arithmetic/lowrank/seed0.json"
    old = {"n": 4, "scored_budget": 48, "accuracy": 0.25, "accuracy_by_budget": {"48": 0.25}, "correct": "0100",
           "retention": {"retain/conciseness/kl": 0.1, "retain/ifeval/kl": 0.3}}
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(json.dumps({"training": {"steps": 7}, "heldout": old}))
    jobs = run.plan(tmp_path)
    assert jobs[0] == {"kind": "rescore", "task": "arithmetic", "needs": [path], "path": f"rescore/{path}",
                       "of": {"kind": "train", "phase": "main", "task": "arithmetic", "method": "lowrank",
                              "setting": None, "seed": 0}}
    assert arm(tmp_path, "arithmetic", "lowrank").runs == []
    again = {"n": 4, "scored_budget": measure.SCORED_BUDGET, "accuracy": 0.75, "correct": "0111",
             "accuracy_by_budget": {str(measure.SCORED_BUDGET): 0.75}}
    (tmp_path / "rescore" / path).parent.mkdir(parents=True)
    (tmp_path / "rescore" / path).write_text(json.dumps({"heldout": again}))
    [found] = arm(tmp_path, "arithmetic", "lowrank").runs
    assert found.accuracy == 75.0 and found.heldout["correct"] == "0111" and found.mean_kl == 0.2
    (tmp_path / path).write_text(json.dumps({"training": {"steps": 7}, "heldout": {**again, "retention": {}}}))
    assert not any(job["kind"] == "rescore" for job in run.plan(tmp_path))


def test_a_cpu_clock_study_budgets_every_training_job_in_its_own_cpu_seconds(tmp_path):
    from bench.method_matrix.job import train_keys

    wall = {job["path"]: job for job in run.plan(tmp_path)}
    cpu = {job["path"]: job for job in run.plan(tmp_path, training_clock="cpu")}
    trained = [path for path, job in cpu.items() if job["kind"] == "train"]
    assert trained and all(cpu[path]["training_clock"] == "cpu" for path in trained)
    assert not any("training_clock" in job for job in cpu.values() if job["kind"] != "train")
    job = cpu["tune/arithmetic/mezo/s0_seed10.json"]
    keys = train_keys(job, start={}, charged=0.0)
    assert keys["training_clock"] == "cpu" and keys["max_training_seconds"] == arms.TRAINING_SECONDS
    assert "training_clock" not in train_keys(wall["tune/arithmetic/mezo/s0_seed10.json"], start={}, charged=0.0)


def test_the_transfer_table_and_mezos_pairing_read_the_runs_that_have_a_transfer_score(tmp_path):
    import json

    from bench.method_matrix import transfer

    def write(path: str, correct: str, transfer_correct: str | None, **training) -> None:
        record = {"n": len(correct), "scored_budget": measure.SCORED_BUDGET, "correct": correct,
                  "accuracy": correct.count("1") / len(correct)}
        if transfer_correct is not None:
            record["transfer"] = {"n": len(transfer_correct), "correct": transfer_correct,
                                  "accuracy": transfer_correct.count("1") / len(transfer_correct)}
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(json.dumps({"heldout": record, "training": training}))

    write("base/arithmetic.json", "0" * 40, None)
    write(transfer.BASE_TRANSFER, "0" * 40, "0" * 20)
    for seed in (0, 1):  # mezo right on 30 of 40 template questions and 10 of 20 transfer ones; full-es on 10
        # (the transfer gain over the base: 20 of 40 paired questions differ by 1; 0.5 +- 1.96 x 0.5 / sqrt(40))
        write(f"main/arithmetic/mezo/seed{seed}.json", "1" * 30 + "0" * 10, "1" * 10 + "0" * 10, steps=40,
              keys={"population_size": 2, "training_clock": "cpu"})
        write(f"main/arithmetic/full_es/seed{seed}.json", "1" * 10 + "0" * 30, None, steps=20,
              keys={"population_size": 32})
    table = transfer.transfer_table(tmp_path)
    assert "| base model | 0.0% | 0.0% (n = 20) |" in table
    assert "| mezo | 75.0% (2 seeds) | 50.0% (2 seeds), +50.0 [+34.5, +65.5] over the base |" in table
    assert ("| full-es | 25.0% (2 seeds) | not measured yet: its runs predate the transfer split and wait to be "
            "trained again |") in table
    # full-es seed 0 trained again (run.py's rerun): its own template score beside its transfer score
    write("transfer/main/arithmetic/full_es/seed0.json", "1" * 20 + "0" * 20, "1" * 5 + "0" * 15)
    table = transfer.transfer_table(tmp_path)
    assert ("| full-es | 25.0% (2 seeds) | 25.0% (1 of 5 seeds trained again, which scored 50.0% in the template), "
            "+25.0 [") in table
    from bench.method_matrix import tables

    for seed in (0, 1):  # the README's table reads each run's KL to the start too
        for method in ("mezo", "full_es"):
            path = tmp_path / f"main/arithmetic/{method}/seed{seed}.json"
            data = json.loads(path.read_text())
            data["heldout"]["retention"] = {f"retain/{task}/kl": 0.01 for task in measure.RETENTION_TASKS}
            path.write_text(json.dumps(data))
    readme = tables.readme_table(tmp_path)
    assert "| full-es | 25.0%" in readme and "| 25.0%, 1 seed trained again |" in readme
    # seed 1 trained again on another machine type at the arm's reruns' median steps (run.py --step-matched)
    write("transfer/main/arithmetic/full_es/seed1.json", "1" * 20 + "0" * 20, "1" * 5 + "0" * 15,
          steps=8, step_matched={"steps": 8, "median_of": [8],
                                 "files": ["transfer/main/arithmetic/full_es/seed0.json"]})
    matched = tmp_path / "transfer/main/arithmetic/full_es/seed1.json"
    matched.write_text(json.dumps({**json.loads(matched.read_text()), "machine": {"cpu": "Other CPU"}}))
    assert ("25.0% (2 of 5 seeds trained again, which scored 50.0% in the template; 1 of them step-matched† on "
            "Other CPU, at 8 steps, the median of the arm's reruns on the study's machine type)") in \
        transfer.transfer_table(tmp_path)
    readme = tables.readme_table(tmp_path)
    assert "| 25.0%, 2 seeds trained again (1 at equal steps on Other CPU†) |" in readme
    assert "| mezo | 75.0%" in readme and "| 50.0%, 2 seeds |" in readme
    answer = transfer.mezo_answer(tmp_path)
    assert "mezo (2 candidates per step, 40 steps per run) scored 75.0% over 2 seeds" in answer
    assert "full-es (32 candidates per step, 20 steps) 25.0% over 2" in answer and ": mezo ahead" in answer
    assert "counted in cpu seconds" in answer


def test_a_main_run_scored_before_the_transfer_split_is_planned_again_with_its_own_setting(tmp_path):
    """Its weights are gone, so the transfer score needs the run trained again: the same method, seed and recorded
    setting, after the first file (and ESSA's SFT, restored if its weights are gone), into transfer/main/; a run
    whose file has a transfer score, and a countdown run (no transfer split), are not planned again."""
    def finish(path: str, setting: int, heldout: dict) -> None:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(json.dumps({"job": {"setting": setting}, "heldout": heldout}))

    scored = measure.SCORED_BUDGET
    finish("main/arithmetic/full_es/seed3.json", 2, {"accuracy": 0.3, "scored_budget": scored})
    finish("main/arithmetic/mezo/seed3.json", 1, {"accuracy": 0.3, "scored_budget": scored,
                                                  "transfer": {"accuracy": 0.1}})
    finish("main/arithmetic/essa/seed1.json", 0, {"accuracy": 0.5, "scored_budget": scored})
    finish("main/countdown/full_es/seed0.json", 2, {"accuracy": 0.1, "scored_budget": scored})
    again = {job["path"]: job for job in run.plan(tmp_path, training_clock="cpu") if job.get("phase") == "rerun"}
    assert sorted(again) == ["transfer/main/arithmetic/essa/seed1.json", "transfer/main/arithmetic/full_es/seed3.json"]
    full = again["transfer/main/arithmetic/full_es/seed3.json"]
    assert (full["method"], full["seed"], full["setting"], full["training_clock"]) == ("full_es", 3, 2, "cpu")
    assert full["needs"] == ["main/arithmetic/full_es/seed3.json"]
    essa = again["transfer/main/arithmetic/essa/seed1.json"]
    assert essa["needs"] == ["main/arithmetic/essa/seed1.json", "warm_start/arithmetic/sft_seed1.json"]
    assert essa["sft_result"].endswith("warm_start/arithmetic/sft_seed1.json")  # charged its SFT as the first run
    assert arms.run_keys("full_es", "arithmetic", {}, 3, "rerun")["num_eval"] == arms.MAIN_NUM_EVAL

