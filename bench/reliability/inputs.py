"""Reliability, round 3 (issue 41): the bad inputs of that round, tried again against the real CLI (and the
Python API) with a tiny random model, each classified as held or failed.

An input holds when evotune refuses it (exit code != 0) with a clear error that names the key or file and the
fix, prints no Python traceback, and leaves nothing half-done (the output it would have written is absent) -- or
when it ends in the documented outcome (e.g. `compare --metric drift/l2` shows the drift). Every command runs in a
fresh process, as a user's would. Writes bench/results/reliability/reliability_round3.json: the counts, and per input
its
command, exit code, verdict and (for a failure) why.

    python -m bench.reliability.inputs [--work-dir DIR]     # about 5 minutes on 2 CPU cores
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench.reliability.harness import (
    ENVIRONMENT,
    ROOT,
    Case,
    Result,
    api,
    base_values,
    cli,
    damaged_copy,
    flat,
    run,
    run_round,
    write_yaml,
)


def config_file_cases(runs: dict, work: Path) -> list[Case]:
    files = work / "configs"
    files.mkdir()
    (files / "binary.yaml").write_bytes(bytes(range(256)) * 8)
    (files / "utf16.yaml").write_bytes("model: tiny\n".encode("utf-16"))
    (files / "a_directory.yaml").mkdir()
    (files / "bomb.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8)))
    (files / "empty.yaml").write_text("")
    (files / "duplicate.yaml").write_text(f"model: {runs['model']}\nsigma: 0.1\nsigma: 0.2\n")
    (files / "a_list.yaml").write_text("- model\n- sigma\n")
    cases = []
    for name, path, names in (("binary file", files / "binary.yaml", ["binary.yaml"]),
                              ("UTF-16 file", files / "utf16.yaml", ["utf16.yaml"]),
                              ("directory", files / "a_directory.yaml", ["a_directory.yaml"]),
                              ("/dev/zero", Path("/dev/zero"), ["/dev/zero"]),
                              ("YAML alias bomb", files / "bomb.yaml", ["bomb.yaml"]),
                              ("empty config", files / "empty.yaml", ["empty.yaml", "evotune keys"]),
                              ("duplicate keys", files / "duplicate.yaml", ["duplicate.yaml", "sigma"]),
                              ("a list, not a mapping", files / "a_list.yaml", ["a_list.yaml"]),
                              ("missing file", files / "missing.yaml", ["missing.yaml"])):
        output = work / f"config_{name.replace(' ', '_').replace('/', '')}"
        cases.append(Case("config files", f"train: {name}", cli("train", path, "--output-dir", output), names,
                          absent=[output]))
    cases.append(Case("config files", "sft: binary file", cli("sft", files / "binary.yaml", "--output-dir",
                                                              work / "sft_binary"), ["binary.yaml"],
                      absent=[work / "sft_binary"]))
    cases.append(Case("config files", "grpo: directory", cli("grpo", files / "a_directory.yaml", "--output-dir",
                                                             work / "grpo_directory"), ["a_directory.yaml"],
                      absent=[work / "grpo_directory"]))
    return cases


def doctor_cases(work: Path) -> list[Case]:
    (work / "a_file").write_text("mine")
    users = work / "users_dir"
    (users / "model").mkdir(parents=True)
    (users / "model" / "weights.bin").write_text("mine")
    return [
        Case("doctor", "--output under a file", cli("doctor", "--output", work / "a_file" / "doctor.json"),
             ["--output", "a_file"]),
        Case("doctor", "--output is a directory", cli("doctor", "--output", users), ["--output", "directory"]),
        Case("doctor", "--work-dir is a file", cli("doctor", "--work-dir", work / "a_file"), ["--work-dir", "a_file"]),
        Case("doctor", "--work-dir holds the user's files", cli("doctor", "--work-dir", users),
             ["--work-dir", "not empty"],
             outcome=lambda result: None if (users / "model" / "weights.bin").read_text() == "mine" and result.rc
             else "the user's files were touched or the input accepted"),
    ]


def compare_cases(runs: dict, work: Path) -> list[Case]:
    def shows(path: Path, *words: str) -> Callable[[Result], str | None]:
        """Exit 0, a final value for every row (the metric was read), and `words` in compare.md."""
        def check(result: Result) -> str | None:
            if result.rc != 0:
                return f"exit {result.rc}: {result.err.strip()[-300:]}"
            rows = json.loads((path / "compare.json").read_text())["methods"]
            if any(not row.get("final_mean") for row in rows):  # drift from the base is > 0 after training
                return f"rows without a final value: {rows}"
            missing = [word for word in words if word not in (path / "compare.md").read_text()]
            return f"compare.md lacks {missing}" if missing else None
        return check

    small_kl = work / "small_kl"
    for seed, kl in ((0, 0.0018), (1, 0.0042)):
        run_dir = small_kl / f"seed{seed}"
        run_dir.mkdir(parents=True)
        write_yaml(run_dir / "config.yaml", {"method": "es", "seed": seed})
        records = [{"iteration": 0, "eval/reward": 0.0, "retain/arithmetic/kl": 0.0},
                   {"iteration": 1, "samples_seen": 8, "time_s": 1.0, "eval/reward": 0.5, "retain/arithmetic/kl": kl}]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return [
        Case("compare", "--metric drift/l2", cli("compare", runs["run"], "--metric", "drift/l2", "--output-dir",
                                                 work / "compare_drift"),
             outcome=shows(work / "compare_drift", "drift/l2")),
        Case("compare", "--metric retain/<task>/kl of small values",
             cli("compare", small_kl / "seed0", small_kl / "seed1", "--metric", "retain/arithmetic/kl",
                 "--output-dir", work / "compare_kl"), outcome=shows(work / "compare_kl", "0.0018", "0.0042")),
        Case("compare", "a run stopped at iteration 1 pooled with a finished one",
             cli("compare", runs["run"], runs["stopped"], "--output-dir", work / "compare_pooled"),
             outcome=shows(work / "compare_pooled", "completed different numbers of iterations")),
        Case("compare", "--metric drift/typo", cli("compare", runs["run"], "--metric", "drift/typo", "--output-dir",
                                                   work / "compare_typo"),
             ["drift/typo", "--metric"], absent=[work / "compare_typo"]),
    ]


def export_cases(runs: dict, work: Path) -> list[Case]:
    def replace_log(text: str) -> Callable[[Path], None]:
        return lambda run_dir: (run_dir / "checkpoint" / "updates.json").write_text(text)

    def edit(run_dir: Path) -> None:
        log = run_dir / "checkpoint" / "updates.json"
        log.write_text(log.read_text().replace("0.", "1.", 1))

    def edit_without_manifest(run_dir: Path) -> None:
        edit(run_dir)
        (run_dir / "checkpoint" / "manifest.json").unlink()

    def truncate(run_dir: Path) -> None:
        log = run_dir / "checkpoint" / "updates.json"
        log.write_bytes(log.read_bytes()[:60])

    def mid_save(run_dir: Path) -> None:  # a save between its two renames: checkpoint/ is checkpoint.tmp now
        shutil.rmtree(run_dir / "checkpoint.old")
        shutil.copytree(run_dir / "checkpoint", run_dir / "checkpoint.tmp")
        (run_dir / "checkpoint").rename(run_dir / "checkpoint.old")

    def both(run_dir: Path) -> None:
        (run_dir / "checkpoint" / "updates.json").unlink()
        (run_dir / "checkpoint.old" / "updates.json").write_text("[")

    damages = {"truncated updates.json": (truncate, ["updates.json", "--resume"]),
               "invalid updates.json": (replace_log("{not json"), ["updates.json", "--resume"]),
               "edited updates.json": (edit, ["updates.json", "checksum", "--resume"]),
               "edited updates.json, manifest removed": (edit_without_manifest, ["did not end on its checkpoint"]),
               "deleted updates.json": (lambda run_dir: (run_dir / "checkpoint" / "updates.json").unlink(),
                                        ["updates.json is missing", "--resume"]),
               "deleted checkpoint/": (lambda run_dir: shutil.rmtree(run_dir / "checkpoint"),
                                       ["it is missing", "checkpoint.old", "--resume"]),
               "a save between its two renames": (mid_save, ["writing this run", "--resume"]),
               "no intact checkpoint left": (both, ["No intact checkpoint", "without --average-last"])}
    cases = []
    for index, (name, (damage, names)) in enumerate(damages.items()):
        damaged = damaged_copy(runs, work, str(index), damage)
        output = work / f"export_damaged_{index}"
        cases.append(Case("export --average-last", name, cli("export", damaged, "--average-last", "2", "--output-dir",
                                                              output), names, absent=[output],
                          forbidden=["--overwrite", "CheckpointFallbackWarning"]))
    for count in ("0", "7"):
        output = work / f"export_count_{count}"
        cases.append(Case("export --average-last", f"K = {count} of 6 iterations",
                          cli("export", runs["run"], "--average-last", count, "--output-dir", output),
                          ["from 1 to 6"], absent=[output]))
    output = work / "export_final"
    cases.append(Case("export --average-last", "final/ instead of the run", cli(
        "export", runs["run"] / "final", "--average-last", "2", "--output-dir", output), ["run directory"],
        absent=[output]))
    for quantization in ("int8", "int4"):
        output = work / f"export_{quantization}_merged"
        cases.append(Case("export --average-last", f"--merge of an {quantization.upper()} adapter run",
                          cli("export", runs[quantization], "--average-last", "2", "--merge", "--output-dir", output),
                          outcome=merged_model(output)))
    cases.append(Case("export --average-last", "beside a running train", lambda: export_beside_training(runs, work),
                      outcome=lambda result: result.out or None))
    return cases


def merged_model(output: Path) -> Callable[[Result], str | None]:
    def check(result: Result) -> str | None:
        if result.rc != 0:
            return f"exit {result.rc}: {result.err.strip()[-300:]}"
        summary = json.loads(result.out)
        if summary.get("first_averaged_iteration") != 2 or summary.get("adapter") is not None:
            return f"unexpected summary {summary}"
        return None if (output / "model.safetensors").exists() else "no model.safetensors written"
    return check


def export_beside_training(runs: dict, work: Path) -> Result:
    """`export --average-last 2` three times while a train of the same run checkpoints every iteration: each must
    average its checkpoint's own last two iterations (a whole checkpoint) or say the run is being written, and
    none may advise --overwrite. Result.out holds what went wrong ("" when all held)."""
    config = write_yaml(work / "live.yaml", base_values(str(runs["model"]), iterations=500, eval_every=0))
    live = work / "live"
    training = subprocess.Popen(cli("train", config, "--output-dir", live), env=ENVIRONMENT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started, problems, overlapped = time.perf_counter(), [], 0
    try:
        while not (live / "checkpoint").exists() and time.perf_counter() - started < 300:
            time.sleep(0.5)
        for attempt in range(3):
            result = run(cli("export", live, "--average-last", "2", "--output-dir", work / f"live_export_{attempt}"))
            overlapped += training.poll() is None
            problems += live_export_problems(result, attempt)
    finally:
        training.send_signal(signal.SIGINT)  # stop the train this script started
        training.wait(timeout=120)
    if not overlapped:
        problems.append("the train ended before the exports: nothing was tried beside it")
    return Result(0, "; ".join(problems), "", time.perf_counter() - started)


def live_export_problems(result: Result, attempt: int) -> list[str]:
    text = flat(result.out + result.err)
    if "--overwrite" in text or "Traceback" in text:
        return [f"export {attempt}: {text.strip()[-300:]}"]
    if result.rc == 0:
        summary = json.loads(result.out)
        if summary["first_averaged_iteration"] != summary["iterations"] - 1:
            return [f"export {attempt} averaged other iterations: {summary}"]
        return []
    return [] if "writing this run" in text else [f"export {attempt}: exit {result.rc}: {text.strip()[-300:]}"]


def key_cases(runs: dict, work: Path) -> list[Case]:
    model = str(runs["model"])
    resumed = work / "resumed"
    shutil.copytree(runs["run"], resumed)
    refused_resume = work / "refused_resume"
    shutil.copytree(runs["run"], refused_resume)
    before = (refused_resume / "metrics.jsonl").read_text()

    def resumed_one_more(result: Result) -> str | None:
        if result.rc != 0:
            return f"exit {result.rc}: {result.err.strip()[-300:]}"
        last = json.loads((resumed / "metrics.jsonl").read_text().splitlines()[-1])
        return None if last.get("iteration") == 7 else f"the resumed run ended at {last.get('iteration')}"

    return [
        Case("accepted keys", "eval_max_new_tokens below max_new_tokens", cli(
            "train", write_yaml(work / "eval_budget.yaml", base_values(model, max_new_tokens=8, eval_max_new_tokens=2)),
            "--output-dir", work / "eval_budget"), ["eval_max_new_tokens", "max_new_tokens"],
            absent=[work / "eval_budget"]),
        Case("accepted keys", "shared_prefix with backend vllm", cli(
            "train", write_yaml(work / "shared_prefix.yaml", base_values(model, shared_prefix=True, backend="vllm")),
            "--output-dir", work / "shared_prefix"), ["shared_prefix", "backend: hf"], absent=[work / "shared_prefix"]),
        Case("accepted keys", "prefetch_candidates changed on --resume (allowed: same weights)", cli(
            "train", "--output-dir", resumed, "--resume", "--set", "iterations=7", "--set", "prefetch_candidates=true"),
            outcome=resumed_one_more),
        Case("accepted keys", "sigma changed on --resume", cli(
            "train", "--output-dir", refused_resume, "--resume", "--set", "sigma=0.5"), ["`sigma`", "--resume"],
            outcome=lambda result: ("accepted (exit 0)" if result.rc == 0 else None if "`sigma`" in result.err and (
                refused_resume / "metrics.jsonl").read_text() == before else "not named, or the run was changed")),
    ]


def python_api_cases(runs: dict) -> list[Case]:
    def names(*words: str) -> Callable[[Result], str | None]:
        def check(result: Result) -> str | None:
            if result.rc != 3:
                return f"no error (exit {result.rc})" if result.rc == 0 else f"exit {result.rc}: {result.err[-300:]}"
            error = json.loads(result.out)
            if not error["evotune_error"]:
                return f"a bare {error['type']}: {error['message']}"
            missing = [word for word in words if word not in error["message"]]
            return f"the message does not name {missing}" if missing else None
        return check

    model = str(runs["model"])
    return [
        Case("python api", "ESConfig typo populaton_size", api("from evotune import ESConfig; "
                                                              "ESConfig(populaton_size=4)"),
             outcome=names("populaton_size", "population_size")),
        Case("python api", "ESConfig with TRL's max_steps", api("from evotune import ESConfig; ESConfig(max_steps=10)"),
             outcome=names("max_steps", "iterations")),
        Case("python api", "ESConfig with TRL's num_generations",
             api("from evotune import ESConfig; ESConfig(num_generations=8)"),
             outcome=names("num_generations", "population_size")),
        Case("python api", "ESConfig learning_rate as text",
             api("from evotune import ESConfig; ESConfig(learning_rate='fast')"), outcome=names("learning_rate")),
        Case("python api", "TrainConfig typo simga",
             api(f"from evotune import TrainConfig; TrainConfig(model={model!r}, simga=0.1)"),
             outcome=names("simga", "sigma")),
    ]


def reward_cases(runs: dict, work: Path) -> list[Case]:
    modules = work / "modules"
    modules.mkdir()
    # the reward module the tests use: its grader is down while grader_down lies beside it
    (modules / "flaky_rewards.py").write_text((ROOT / "tests" / "data" / "flaky_rewards.py").read_text())
    (modules / "grader_down").touch()
    # every later command can import the module (it is found by import path, as a user's would be)
    ENVIRONMENT["PYTHONPATH"] = os.pathsep.join(filter(None, [str(modules), os.environ.get("PYTHONPATH")]))
    config = write_yaml(work / "flaky.yaml", base_values(str(runs["model"]), reward_fns=["flaky_rewards.score"]))
    es_dir = work / "flaky_es"
    script = (f"from evotune import ESConfig, ESTrainer; import flaky_rewards; ESTrainer(model={str(runs['model'])!r}, "
              "reward_funcs=flaky_rewards.score, train_dataset=['Say hi.', 'Name a color.', 'Count to two.'], "
              f"args=ESConfig(output_dir={str(es_dir)!r}, population_size=4, antithetic=True, iterations=1, "
              "batch_size=2, max_new_tokens=4, num_eval=2, dtype='float32', report_to=[])).train()")

    def estrainer_clean(result: Result) -> str | None:
        if result.rc != 3 or not json.loads(result.out)["evotune_error"]:
            return f"exit {result.rc}: {result.out[-300:]}"
        left = sorted(str(path.relative_to(es_dir)) for path in es_dir.rglob("*")) if es_dir.exists() else []
        return f"left {left} in output_dir" if left else None

    return [
        Case("reward function fails", "CLI train, the reward function raises",
             cli("train", config, "--output-dir", work / "flaky_cli"),
             ["flaky_rewards.score", "the grader is down", "same command"], absent=[work / "flaky_cli"]),
        Case("reward function fails", "ESTrainer, the reward function raises", api(script), outcome=estrainer_clean),
    ]


def round3_cases(runs: dict, work: Path) -> list:
    return (config_file_cases(runs, work) + doctor_cases(work) + compare_cases(runs, work) + export_cases(runs, work)
            + key_cases(runs, work) + python_api_cases(runs) + reward_cases(runs, work))


def main() -> None:
    run_round("reliability_round3", "python -m bench.reliability.inputs", __doc__, round3_cases)


if __name__ == "__main__":
    main()
