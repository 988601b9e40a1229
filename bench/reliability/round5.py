"""Reliability, round 5: every case of that round, tried against the real CLI with a tiny random model and loopback
addresses only, each classified as held or failed by round 3's rules (harness.judge: a clear refusal names the key
or file and the fix, prints no traceback and leaves nothing half-done). The round's 22 failures (keys a chosen part
never reads, read-only and full disks, cluster addresses by every route, broken regexes, num_eval 0, advice that
went in a circle, damaged exports, wordings), a read-only and a full disk under each of the eight commands (real
tmpfs mounts: run as root), then round 4's cases (its cluster cases start real Ray clusters with the `ray` CLI:
run it where no other Ray is at work), and the count of bad inputs the property test drew from the configs'
metadata (tests/config/test_bad_input_property.py). Round 3's cases come last, as they held then.

    python -m bench.reliability.round5 [--work-dir DIR]      # writes bench/results/reliability/reliability_round5.json
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.reliability.harness import (
    ENVIRONMENT,
    ROOT,
    Case,
    Result,
    base_values,
    cli,
    flat,
    run,
    run_round,
    write_yaml,
)
from bench.reliability.inputs import round3_cases
from bench.reliability.round4 import round4_cases


def train(work: Path, runs: dict, name: str, *settings: str, **values) -> list[str]:
    config = write_yaml(work / f"{name}.yaml", base_values(str(runs["model"]), iterations=1, **values))
    return cli("train", config, "--output-dir", work / name, *settings)


def grpo(work: Path, runs: dict, name: str, *settings: str) -> list[str]:
    """`evotune grpo` at a tiny size; a setting given replaces the tiny one of its key (a key set twice is refused)."""
    tiny = ["task=conciseness", "batch_size=2", "num_generations=2", "max_new_tokens=4", "num_eval=2", "iterations=1",
            "report_to=[]", f"model={runs['model']}"]
    given = [pair for flag, pair in zip(settings[::2], settings[1::2]) if flag == "--set"]
    keys = {pair.split("=", 1)[0] for pair in given}
    kept = [pair for pair in tiny if pair.split("=", 1)[0] not in keys]
    return cli("grpo", "--output-dir", work / name, *[part for pair in [*kept, *given] for part in ("--set", pair)])


def unread_key_cases(runs: dict, work: Path) -> list[Case]:
    """Round 5's item 1: a key the chosen parts never read is refused naming it, its reader and what to set."""
    cases = [("full space", ["--set", "lora_rank=4", "--set", "perturbation_rank=3"], ["space: full", "remove `"]),
             ("full space", ["--set", "cma_diagonal=true"], ["`cma_diagonal`", "strategy: cma"]),
             ("full space", ["--set", "singular_value_fraction=0.5"], ["`singular_value_fraction`", "svd_lora"]),
             ("hf backend", ["--set", "engine_core=in_process"], ["`engine_core`", "backend: vllm"]),
             ("local run", ["--set", "ray_address=auto"], ["`ray_address`", "distributed: ray"]),
             ("local run", ["--set", "worker_num_cpus=2"], ["`worker_num_cpus`", "distributed: ray"])]
    built = [Case("unread keys", f"{' '.join(settings)} ({where})",
                  train(work, runs, f"u{index}", *settings), names=names, absent=[work / f"u{index}"])
             for index, (where, settings, names) in enumerate(cases)]
    # CMA's runs: a config without OpenES's own keys (antithetic, learning_rate), then one of them set
    cma = {key: value for key, value in base_values(str(runs["model"]), iterations=1).items()
           if key not in ("antithetic", "learning_rate")}
    cma.update(strategy="cma", space="svd_lora", lora_rank=4)
    config = write_yaml(work / "cma.yaml", cma)
    for key, value in (("optimizer", "adam"), ("antithetic", "true"), ("learning_rate", "0.2"),
                       ("weight_decay", "0.1"), ("fitness_shaping", "centered_rank"), ("noise", "rademacher")):
        built.append(Case("unread keys", f"strategy=cma with {key}={value}",
                          cli("train", config, "--output-dir", work / f"u_cma_{key}", "--set", f"{key}={value}"),
                          names=[f"`{key}`", "strategy: cma"], absent=[work / f"u_cma_{key}"]))
    built.append(Case("unread keys", "grpo --set lora=false --set lora_rank=4",
                      grpo(work, runs, "u_grpo", "--set", "lora=false", "--set", "lora_rank=4"),
                      names=["`lora_rank`", "lora"], absent=[work / "u_grpo"]))
    return built


def address_cases(runs: dict, work: Path) -> list[Case]:
    """Item 3: cluster addresses by every route get the config's check; timeouts are bounded."""
    config = write_yaml(work / "ray.yaml", base_values(str(runs["model"]), iterations=1, distributed="ray",
                                                      workers=2))
    garbage_environment = {**ENVIRONMENT, "RAY_ADDRESS": "garbage"}

    def with_environment() -> Result:
        done = subprocess.run(cli("train", config, "--output-dir", work / "env_address"), capture_output=True,
                              text=True, env=garbage_environment, timeout=120)
        return Result(done.returncode, done.stdout, done.stderr, 0.0)

    return [
        Case("cluster address", "RAY_ADDRESS=garbage in the environment", with_environment,
             names=["$RAY_ADDRESS", "garbage", "HOST:PORT"], absent=[work / "env_address"]),
        Case("cluster address", "sweep --parallel 2 --ray-address garbage",
             cli("sweep", config, "--grid", "sigma=0.01,0.02", "--parallel", "2", "--ray-address", "garbage",
                 "--output-dir", work / "sweep_address"), names=["garbage", "HOST:PORT"]),
        Case("cluster address", "ray_address=auto against a token cluster, without the token",
             lambda: auto_against_a_token_cluster(runs, work), outcome=lambda result: result.out or None),
        Case("cluster address", "ray_timeout=1e300",
             train(work, runs, "timeout", "--set", "distributed=ray", "--set", "ray_address=127.0.0.1:6379",
                   "--set", "ray_timeout=1e300"), names=["`ray_timeout`"], absent=[work / "timeout"]),
    ]


def auto_against_a_token_cluster(runs: dict, work: Path) -> Result:
    """`ray start --head` with token authentication (Ray's default temp dir, where `auto` looks), then a run with
    `ray_address: auto` and no token: the message must name the cluster found and the token setting, not say that no
    cluster runs (Result.out: what went wrong)."""
    import secrets

    from bench.reliability.cluster import free_port, own_head, token_environment

    port = free_port()
    environment = token_environment(ENVIRONMENT, secrets.token_hex(16))
    config = write_yaml(work / "auto.yaml", base_values(str(runs["model"]), iterations=1, distributed="ray",
                                                        workers=1, ray_address="auto", ray_timeout=20))
    problems = []
    try:
        with own_head(environment, port):
            done = run(cli("train", config, "--output-dir", work / "auto_token"))
        text = flat(done.err)
        if done.rc == 0 or "no running Ray cluster" in text or f":{port}" not in text \
                or "RAY_AUTH_MODE=token" not in text or "Traceback" in text:
            problems.append(f"exit {done.rc}: {text[-400:]}")
    except RuntimeError as failed:
        problems.append(str(failed))
    return Result(0, "; ".join(problems), "", 0.0)


def value_cases(runs: dict, work: Path) -> list[Case]:
    """Items 4, 5 and 8's values: broken regexes, num_eval 0, seeds out of range, log_samples -1."""
    return [
        Case("values", "parameters=['(']", train(work, runs, "v1", "--set", "parameters=['(']"),
             names=["`parameters`", "("], absent=[work / "v1"]),
        Case("values", "exclude_parameters=['[a-']", train(work, runs, "v2", "--set", "exclude_parameters=['[a-']"),
             names=["`exclude_parameters`"], absent=[work / "v2"]),
        Case("values", "train num_eval=0", train(work, runs, "v3", "--set", "num_eval=0"), names=["`num_eval`"],
             absent=[work / "v3"]),
        Case("values", "grpo num_eval=0", grpo(work, runs, "v4", "--set", "num_eval=0"), names=["`num_eval`"],
             absent=[work / "v4"]),
        Case("values", "grpo seed=-1", grpo(work, runs, "v5", "--set", "seed=-1"), names=["`seed`"],
             absent=[work / "v5"]),
        Case("values", "log_samples=-1", train(work, runs, "v6", "--set", "log_samples=-1"),
             names=["`log_samples`"], absent=[work / "v6"]),
        Case("values", "--set SIGMA=1 (did you mean)", train(work, runs, "v7", "--set", "SIGMA=1"),
             names=["SIGMA", "`sigma`"], absent=[work / "v7"]),
        Case("values", "a repeated --set key", train(work, runs, "v8", "--set", "sigma=0.1", "--set", "sigma=0.2"),
             names=["sigma", "twice"], absent=[work / "v8"]),
    ]


def copied_run(runs: dict, work: Path, name: str) -> Path:
    import shutil

    copy = work / name
    shutil.copytree(runs["run"], copy)
    return copy


def resumed_anyway(result: Result) -> str | None:
    """A damaged metrics.jsonl: the resume must go on (exit 0) and say what it kept."""
    text = flat(result.err)
    if result.rc != 0:
        return f"exit {result.rc}: {text[-300:]}"
    return None if "--resume keeps the" in text else "no note of the records kept"


def run_directory_cases(runs: dict, work: Path) -> list[Case]:
    """Item 6: each damaged state of a run directory gets one way forward, never advice that loops."""
    no_config = copied_run(runs, work, "no_config")
    (no_config / "config.yaml").unlink()
    garbage = copied_run(runs, work, "garbage_metrics")
    with (garbage / "metrics.jsonl").open("ab") as handle:
        handle.write(b"\xff\xfe garbage\n")
    one_row = work / "one_row.jsonl"
    one_row.write_text('{"prompt": "say hi", "answer": "hi"}\n')
    return [
        Case("run directory", "--resume of a run whose config.yaml was deleted",
             cli("train", "--output-dir", no_config, "--resume"), names=["config.yaml", "--overwrite"]),
        Case("run directory", "--resume over garbage appended to metrics.jsonl",
             cli("train", "--output-dir", garbage, "--resume", "--set", "iterations=7"), outcome=resumed_anyway),
        Case("run directory", "--resume of a finished run", cli("train", "--output-dir", runs["run"], "--resume"),
             outcome=lambda result: None if result.rc == 0 and "nothing was trained" in flat(result.err)
             else f"exit {result.rc}: {flat(result.err)[-300:]}"),
        Case("eval", "eval on a 1-row custom dataset, --num-eval 4",
             cli("eval", "--model", runs["model"], "--task", "custom", "--dataset", one_row, "--num-eval", "4",
                 "--task-arg", "reward_fns=[evotune.tasks.arithmetic.arithmetic_reward]", "--output",
                 work / "one_row.json"), names=["1 row", "eval_dataset"]),
        Case("eval", "eval on a 1-row custom dataset, --num-eval 0",
             cli("eval", "--model", runs["model"], "--task", "custom", "--dataset", one_row, "--num-eval", "0",
                 "--task-arg", "reward_fns=[evotune.tasks.arithmetic.arithmetic_reward]", "--output",
                 work / "one_row0.json"), names=["1 row", "eval_dataset"], forbidden=["set num_eval"]),
        Case("eval", "eval --task-arg nodigits", cli("eval", "--model", runs["model"], "--task", "arithmetic",
                                                     "--task-arg", "nodigits", "--output", work / "nd.json"),
             names=["--task-arg", "digits=3"], forbidden=["--set"]),
    ]


def export_cases(runs: dict, work: Path) -> list[Case]:
    """Item 7: a truncated weights file is one line naming it; a damaged checkpoint's export says which iterate."""
    truncated = copied_run(runs, work, "truncated")
    weights = truncated / "final" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4096])
    damaged = copied_run(runs, work, "damaged_checkpoint")
    tensors = next((damaged / "checkpoint").glob("*.safetensors"))
    tensors.write_bytes(tensors.read_bytes()[:-64] + b"\0" * 64)

    def names_the_iterate(result: Result) -> str | None:
        text = flat(result.err)
        if result.rc != 0:
            return f"exit {result.rc}: {text[-300:]}"
        record = json.loads(result.out)
        if "fallback" not in record or "export writes iteration" not in text or "run again" in text:
            return f"the output does not say which iterate and why: {text[-300:]}"
        return None

    return [
        Case("export", "export of a truncated final/model.safetensors",
             cli("export", truncated, "--output-dir", work / "x1"), names=[str(weights), "truncated"],
             absent=[work / "x1"]),
        Case("export", "export of a damaged checkpoint/", cli("export", damaged / "checkpoint", "--output-dir",
                                                              work / "x2"), outcome=names_the_iterate),
    ]


REWARD_EXIT = "def score(prompts, completions, **kwargs):\n    raise SystemExit(3)\n"


def reward_cases(runs: dict, work: Path) -> list[Case]:
    """Items 5 and 8: a reward that raises SystemExit is named; grpo's failed start leaves nothing."""
    (work / "exiting_rewards.py").write_text(REWARD_EXIT)
    environment = {**ENVIRONMENT, "PYTHONPATH": f"{work}{os.pathsep}{ENVIRONMENT.get('PYTHONPATH', '')}"}

    def with_path(command: list[str]) -> Result:
        done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
        return Result(done.returncode, done.stdout, done.stderr, 0.0)

    reward = ["--set", "reward_fns=[exiting_rewards.score]"]
    return [
        Case("rewards", "a reward that raises SystemExit(3) (train)",
             lambda: with_path(train(work, runs, "r1", *reward)), names=["exiting_rewards.score", "SystemExit"],
             absent=[work / "r1"]),
        Case("rewards", "a reward that raises SystemExit(3) (grpo)",
             lambda: with_path(grpo(work, runs, "r2", *reward)), names=["exiting_rewards.score"],
             absent=[work / "r2"]),
    ]


WHERE_IT_STOPPED = """
import sys
from evotune.errors import OutputError
from evotune.trainer import Trainer
def fail(self):
    raise OutputError("No space left on device (injected)")
if sys.argv[1] == "final":
    Trainer.finish = fail
else:
    real = Trainer.save_checkpoint
    Trainer.save_checkpoint = lambda self: fail(self) if self.strategy.iteration == 4 else real(self)
from evotune.cli.main import console_main
sys.exit(console_main(sys.argv[2:]))
"""


def wording_cases(runs: dict, work: Path) -> list[Case]:
    """Item 8: a run that stops after an iteration (its checkpoint or final/ failing) says so, with that number."""
    two = write_yaml(work / "two.yaml", base_values(str(runs["model"]), iterations=2, eval_every=0))
    six = write_yaml(work / "six.yaml", base_values(str(runs["model"]), iterations=6, eval_every=0))
    return [
        Case("wording", "a 2-iteration run whose final/ cannot be written",
             [sys.executable, "-c", WHERE_IT_STOPPED, "final", "train", str(two), "--output-dir", str(work / "w1")],
             names=["stopped after iteration 2, while writing final/"], forbidden=["iteration 3"]),
        Case("wording", "a checkpoint that fails after iteration 4",
             [sys.executable, "-c", WHERE_IT_STOPPED, "checkpoint", "train", str(six), "--output-dir",
              str(work / "w2")], names=["stopped after iteration 4"], forbidden=["iteration 5"]),
    ]


COMMANDS = {  # the eight commands, with OUT for the output path on the mounted disk
    "train": lambda runs, out: cli("train", "--set", f"model={runs['model']}", "--set", "iterations=1",
                                   "--output-dir", out),
    "sft": lambda runs, out: cli("sft", "--set", "task=arithmetic", "--set", f"model={runs['model']}", "--set",
                                 "max_steps=1", "--output-dir", out),
    "grpo": lambda runs, out: cli("grpo", "--set", f"model={runs['model']}", "--set", "iterations=1",
                                  "--output-dir", out),
    "eval": lambda runs, out: cli("eval", "--model", runs["model"], "--task", "arithmetic", "--num-eval", "2",
                                  "--output", out / "eval.json"),
    "export": lambda runs, out: cli("export", runs["run"], "--output-dir", out),
    "compare": lambda runs, out: cli("compare", runs["run"], runs["run"], "--output-dir", out),
    "sweep": lambda runs, out: cli("sweep", "--grid", "sigma=0.1,0.2", "--set", f"model={runs['model']}",
                                   "--output-dir", out),
    "doctor": lambda runs, out: cli("doctor", "--work-dir", out),
}


def disk_cases(runs: dict, work: Path) -> list[Case]:
    """A read-only and a full disk under each command: one line naming the path, nothing partial left."""
    cases = []
    for disk in ("read-only", "full"):
        mount = work / f"disk_{disk}"
        mount.mkdir(exist_ok=True)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)]).returncode != 0:
            raise SystemExit("round 5's disk cases mount a tmpfs: run as root")
        atexit.register(subprocess.run, ["umount", "-l", str(mount)], capture_output=True)
        if disk == "full":
            subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'filler'}", "bs=64k"], capture_output=True)
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        reason = "Read-only file system" if disk == "read-only" else "No space left on device"
        for command, build in COMMANDS.items():
            out = mount / command / "inner"
            cases.append(Case(f"{disk} disk", f"{command} onto a {disk} disk", build(runs, out),
                              names=[str(out), reason], absent=[mount / command]))
    return cases


def property_cases(work: Path) -> tuple[list[Case], dict]:
    """The property test's run, as one case, and how many inputs it drew per command."""
    counts_file = work / "property_counts.json"
    result = run([sys.executable, "-m", "pytest", str(ROOT / "tests/config/test_bad_input_property.py"), "-q",
                  "-p", "no:cacheprovider"], timeout=900, cwd=ROOT)
    counts = json.loads(counts_file.read_text()) if counts_file.is_file() else {}
    case = Case("generated", f"the property test's drawn inputs ({sum(counts.values())})",
                lambda: result, outcome=lambda done: None if done.rc == 0 else flat(done.out)[-400:])
    return [case], counts


def round5_cases(runs: dict, work: Path) -> list:
    os.environ["EVOTUNE_PROPERTY_COUNTS"] = str(work / "property_counts.json")
    ENVIRONMENT["EVOTUNE_PROPERTY_COUNTS"] = os.environ["EVOTUNE_PROPERTY_COUNTS"]
    generated, _ = property_cases(work)
    return (unread_key_cases(runs, work) + address_cases(runs, work) + value_cases(runs, work)
            + run_directory_cases(runs, work) + export_cases(runs, work) + reward_cases(runs, work)
            + wording_cases(runs, work) + disk_cases(runs, work) + round4_cases(runs, work)
            + round3_cases(runs, work) + generated)


def main() -> None:
    run_round("reliability_round5", "python -m bench.reliability.round5", __doc__, round5_cases)


if __name__ == "__main__":
    main()
