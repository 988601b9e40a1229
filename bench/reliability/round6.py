"""Reliability, round 6: every case of that round, tried against the real CLI with a tiny random model, each judged by
round 3's rules (harness.judge: a clear refusal names the key or file and the fix, prints no traceback and leaves
nothing half-done), or, where the right outcome is not a refusal (a bool reward is accepted), by its own check.

Data loss and silent wrong results: writes and removals through a symbolic link (final/, checkpoint/, the run
directory, an export), a column named twice (CSV, JSONL, JSON), `parameters` on an adapter space, runs of different
tasks compared, impossible shapes and an overlong prompt in `evotune estimate`. A hang: a reward that never returns,
in this process and in a Ray worker. Tracebacks: pickle-only models under train, eval and export. False refusals:
bool rewards, `--model Llama-3-8B`, `estimate --command train --set population_size=8`. Misleading lines: a resume
by another command, a malformed config.json. Guard and warning gaps: a reward module exporting
`functools.partial(os.system)`, a run into a folder of a user's files, a sweep of 1,000 runs.

    python -m bench.reliability.round6 [--work-dir DIR]      # writes bench/results/reliability/reliability_round6.json
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from bench.reliability.harness import Case, Result, base_values, cli, flat, run, run_round, write_yaml


def snapshot(folder: Path) -> dict:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def users_folder(work: Path, name: str) -> Path:
    """A folder of a user's own files, which a write through a link would change."""
    folder = work / f"users_{name}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"mine": true}\n')
    (folder / "notes.txt").write_text("do not touch\n")
    return folder


def through_a_link(runs: dict, work: Path, name: str, link: str, arguments: list[str]) -> Callable[[], Result]:
    """A copy of the finished run whose `link` (final, checkpoint, or "" for the run directory) points at a user's
    folder, then the command: it must refuse, and the folder and the run keep every byte (Result.out: what went
    wrong, appended to the command's own output)."""

    def attempt() -> Result:
        copy = work / f"link_{name}"
        shutil.copytree(runs["run"], copy)
        users = users_folder(work, name)
        target = copy / link if link else work / f"link_{name}_dir"
        if link:
            (copy / link).rename(copy / f"{link}.moved")
        target.symlink_to(users if link else copy, target_is_directory=True)
        before_users, before_run = snapshot(users), snapshot(copy)
        done = run([part.replace("{run}", str(target if not link else copy)) for part in arguments])
        changed = [what for what, was, now in (("the user's folder", before_users, snapshot(users)),
                                               ("the run", before_run, snapshot(copy))) if was != now]
        problem = f" [{' and '.join(changed)} changed]" if changed else ""
        return Result(done.rc, done.out + problem, done.err, done.seconds)

    return attempt


def link_cases(runs: dict, work: Path) -> list[Case]:
    resume = cli("train", "--output-dir", "{run}", "--resume", "--set", "iterations=8")
    overwrite = cli("train", str(work / "overwrite.yaml"), "--output-dir", "{run}", "--overwrite")
    write_yaml(work / "overwrite.yaml", base_values(str(runs["model"]), iterations=1))
    cases = [("final/ a link, --resume", "final", resume), ("final/ a link, --overwrite", "final", overwrite),
             ("checkpoint/ a link, --resume", "checkpoint", resume), ("the run directory a link, --resume", "", resume)]
    built = [Case("links", name, through_a_link(runs, work, f"l{index}", link, arguments),
                  names=["is a symbolic link", "never writes or deletes"], forbidden=["changed]"])
             for index, (name, link, arguments) in enumerate(cases)]
    export_users = users_folder(work, "export")
    (work / "export_link").symlink_to(export_users, target_is_directory=True)
    built.append(Case("links", "export --overwrite onto a link",
                      cli("export", runs["run"], "--output-dir", work / "export_link", "--overwrite"),
                      names=["export_link is a symbolic link"]))
    return built


def data_cases(runs: dict, work: Path) -> list[Case]:
    files = {"repeated.csv": "prompt,answer,prompt\nfirst,1,second\nthird,2,fourth\n",
             "repeated.jsonl": '{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": "2", "prompt": "c"}\n',
             "repeated.json": '[{"prompt": "a"}, {"prompt": "b", "prompt": "c"}, {"prompt": "d"}]'}
    where = {"repeated.csv": "header (line 1)", "repeated.jsonl": "line 2", "repeated.json": "row 2"}
    built = []
    for name, text in files.items():
        (work / name).write_text(text)
        config = write_yaml(work / f"{name}.yaml", base_values(str(runs["model"]), task="custom",
                                                                dataset=str(work / name), num_eval=1, iterations=1,
                                                                reward_fns=["evotune.tasks:conciseness_reward"]))
        built.append(Case("datasets", f"a column named twice ({name})",
                          cli("train", config, "--output-dir", work / f"d_{name}"),
                          names=[f"{where[name]}: the column 'prompt' is given twice"], absent=[work / f"d_{name}"]))
    for key in ("parameters", "exclude_parameters"):
        config = write_yaml(work / f"k_{key}.yaml", base_values(str(runs["model"]), space="lora", iterations=1,
                                                                **{key: ["mlp"]}))
        built.append(Case("unread keys", f"{key} on space: lora", cli("train", config, "--output-dir",
                                                                       work / f"k_{key}"),
                          names=[f"`{key}`", "space: full", "space: lowrank"], absent=[work / f"k_{key}"]))
    return built


def compare_cases(runs: dict, work: Path) -> list[Case]:
    other = work / "concise_as_arithmetic"
    shutil.copytree(runs["run"], other)
    config = (other / "config.yaml").read_text().replace("task: conciseness", "task: arithmetic")
    (other / "config.yaml").write_text(config)
    return [Case("compare", "runs of different tasks, --metric eval/reward",
                 cli("compare", runs["run"], other, "--metric", "eval/reward", "--output-dir", work / "compare"),
                 outcome=lambda result: None if "different tasks" in flat(result.out + result.err)
                 else f"no note of the different tasks (exit {result.rc})")]


def estimate_cases(runs: dict, work: Path) -> list[Case]:
    config = json.loads((runs["model"] / "config.json").read_text())
    built = []
    for index, change in enumerate(({"hidden_size": 0}, {"num_hidden_layers": -3}, {"vocab_size": 0})):
        folder = work / f"shape{index}"
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        key = next(iter(change))
        built.append(Case("estimate", f"config.json with {key} {change[key]}",
                          cli("estimate", "--model", folder / "config.json", "--no-speed-probe"),
                          names=[f"`{key}` is {change[key]}"]))
    long = work / "long_context"
    shutil.copytree(runs["model"], long)
    (long / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    built.append(Case("estimate", "prompts + budget beyond a 512-token context",
                      cli("estimate", "--model", long, "--method", "lowrank-es", "--set", "max_new_tokens=5000",
                          "--no-speed-probe"),
                      outcome=lambda result: None if "does NOT run" in flat(result.out) and "beyond the model's "
                      "context of 512" in flat(result.out) else f"not flagged (exit {result.rc})"))
    malformed = work / "malformed"
    malformed.mkdir(exist_ok=True)
    (malformed / "config.json").write_text("{not json")
    built.append(Case("wordings", "a malformed config.json", cli("estimate", "--model", malformed,
                                                                  "--no-speed-probe"),
                      names=["config.json is not valid JSON"]))
    accepted = [("--model Llama-3-8B", cli("estimate", "--model", "Llama-3-8B", "--no-speed-probe")),
                ("--command train --set population_size=8",
                 cli("estimate", "--command", "train", "--set", "population_size=8", "--no-speed-probe"))]
    built += [Case("false refusals", name, command, outcome=lambda result: None if result.rc == 0
                   else f"refused: {flat(result.err)[-300:]}") for name, command in accepted]
    return built


REWARDS = """import functools
import os
import time


def hangs(prompts, completions, hang=None, **kwargs):
    if hang is None or any(hang):  # rows marked `hang: false` (the Ray case's held-out rows) are scored
        time.sleep(3600)
    return [0.0] * len(completions)


def as_bools(prompts, completions, **kwargs):
    return [len(completion) > 2 for completion in completions]


system = functools.partial(os.system)
"""


def reward_cases(runs: dict, work: Path) -> list[Case]:
    folder = work / "rewards"
    folder.mkdir(exist_ok=True)
    (folder / "round6_rewards.py").write_text(REWARDS)
    (folder / "data.jsonl").write_text("".join(json.dumps({"prompt": f"Say {n}."}) + "\n" for n in range(8)))
    # the Ray case: held-out rows (scored by the driver) answer, training rows (scored by the actor) hang
    (folder / "train.jsonl").write_text("".join(json.dumps({"prompt": f"Say {n}.", "hang": True}) + "\n"
                                                for n in range(6)))
    (folder / "held_out.jsonl").write_text("".join(json.dumps({"prompt": f"Say {n}.", "hang": False}) + "\n"
                                                   for n in range(2)))

    def config(name: str, reward: str, **extra) -> Path:
        return write_yaml(folder / f"{name}.yaml", base_values(str(runs["model"]), task="custom", iterations=1,
                                                               dataset=str(folder / "data.jsonl"), num_eval=2,
                                                               reward_fns=[f"round6_rewards:{reward}"], **extra))

    return [
        Case("a hang", "a reward that never returns (reward_timeout 3)",
             cli("train", config("hang", "hangs", reward_timeout=3), "--output-dir", work / "r_hang"),
             names=["did not return within 3 s (`reward_timeout`)", "first prompt: 'Say"], absent=[work / "r_hang"]),
        Case("a hang", "a reward that never returns, in a Ray worker",
             cli("train", config("hang_ray", "hangs", reward_timeout=3, distributed="ray", workers=1),
                 "--output-dir", work / "r_hang_ray", "--set", f"dataset={folder / 'train.jsonl'}", "--set",
                 f"eval_dataset={folder / 'held_out.jsonl'}"),
             names=["did not return within 3 s (`reward_timeout`)"], absent=[work / "r_hang_ray"]),
        Case("false refusals", "a reward returning bools",
             cli("train", config("bools", "as_bools"), "--output-dir", work / "r_bools"),
             outcome=lambda result: None if result.rc == 0 else f"refused: {flat(result.err)[-300:]}"),
        Case("guard", "a module exporting functools.partial(os.system)",
             cli("train", config("partial", "system"), "--output-dir", work / "r_partial"),
             names=["runs commands or code"], absent=[work / "r_partial"]),
    ]


def pickle_cases(runs: dict, work: Path) -> list[Case]:
    import torch
    from safetensors.torch import load_file

    pickled = work / "pickled_model"
    shutil.copytree(runs["model"], pickled)
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    refusal = ["pytorch_model.bin: pickle files are not loaded", "convert to safetensors"]
    grpo_run = work / "grpo_pickled"
    tiny = ["task=conciseness", "batch_size=2", "num_generations=2", "max_new_tokens=4", "num_eval=2", "iterations=1",
            "checkpoint_every=1", "report_to=[]", f"model={runs['model']}"]
    done = run(cli("grpo", "--output-dir", grpo_run, *[part for pair in tiny for part in ("--set", pair)]), timeout=600)
    planted = [path for path in sorted(grpo_run.glob("trl/checkpoint-*/optimizer.pt"))[-1:]] if done.rc == 0 else []
    for path in planted:  # a pickle of more than tensors where TRL keeps the optimizer's state
        torch.save({"state": Planted()}, path)
    return [Case("tracebacks", "a pickle-only model: train",
                 cli("train", "--output-dir", work / "p_train", "--set", f"model={pickled}", "--set", "iterations=1"),
                 names=refusal, absent=[work / "p_train"]),
            Case("tracebacks", "a pickle-only model: eval",
                 cli("eval", "--model", pickled, "--task", "arithmetic", "--num-eval", "2", "--output",
                     work / "p_eval.json"), names=refusal, absent=[work / "p_eval.json"]),
            Case("tracebacks", "a pickle-only model: export", cli("export", pickled, "--output-dir", work / "p_export"),
                 names=refusal, absent=[work / "p_export"]),
            Case("tracebacks", "grpo --resume over a pickled optimizer state",
                 cli("grpo", "--output-dir", grpo_run, "--resume", "--set", "iterations=2"),
                 names=["pickle files are not loaded", "--overwrite"] if planted else ["(the GRPO run to resume: "
                                                                                      "none was made)"])]


class Planted:  # not a tensor: torch's weights-only loader refuses its pickle
    pass


def directory_cases(runs: dict, work: Path) -> list[Case]:
    built = []
    for command, key in (("grpo", {"num_generations": 8, "lora": True}), ("sft", {"num_train": 300})):
        folder = work / f"{command}_run"
        folder.mkdir(exist_ok=True)
        write_yaml(folder / "config.yaml", {"model": str(runs["model"]), "task": "arithmetic", **key})
        built.append(Case("wordings", f"train --resume on an `evotune {command}` run",
                          cli("train", "--output-dir", folder, "--resume"),
                          names=[f"is an `evotune {command}` run", f"evotune {command} --output-dir"]))
    etc = work / "etc_like"
    etc.mkdir(exist_ok=True)
    for name, text in (("passwd", "root:x:0:0\n"), ("hosts", "127.0.0.1 localhost\n")):
        (etc / name).write_text(text)
    built.append(Case("guard", "train into a folder holding passwd and hosts",
                      cli("train", "--output-dir", etc, "--set", f"model={runs['model']}", "--set", "iterations=1"),
                      names=["holds files that are not an evotune run's (hosts, passwd)"],
                      absent=[etc / "config.yaml", etc / "final"]))
    grid = ["--grid", "sigma=" + ",".join(f"{0.001 * k:g}" for k in range(1, 11)),
            "--grid", "learning_rate=" + ",".join(f"{0.01 * k:g}" for k in range(1, 11))]
    built.append(Case("guard", "a sweep of 1,000 runs without --yes",
                      cli("sweep", *grid, "--seeds", *map(str, range(10)), "--set", f"model={runs['model']}",
                          "--output-dir", work / "big_sweep"),
                      names=["starts 1,000 runs", "--yes"], absent=[work / "big_sweep"]))
    return built


def round6_cases(runs: dict, work: Path) -> list[Case]:
    return (link_cases(runs, work) + data_cases(runs, work) + compare_cases(runs, work) + estimate_cases(runs, work)
            + reward_cases(runs, work) + pickle_cases(runs, work) + directory_cases(runs, work))


def main() -> None:
    run_round("reliability_round6", "python -m bench.reliability.round6", __doc__, round6_cases)


if __name__ == "__main__":
    main()
