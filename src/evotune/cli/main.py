"""`evotune` command line: thin wrappers over the Python API."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
from pathlib import Path
from typing import Any, get_args, get_origin

from ..config import DtypeName
from ..eval_options import add_cli_options
from ..errors import ConfigError, EvotuneError


def _output_dir(args: argparse.Namespace, without_config: str) -> str:
    """--output-dir, else runs/<config file name>, else the command's own default."""
    if args.output_dir is not None and not args.output_dir.strip():
        raise ConfigError("--output-dir is empty; name the run directory, e.g. --output-dir runs/my_run (or leave "
                          "the flag out for the default).")
    return args.output_dir or (f"runs/{Path(args.config).stem}" if args.config else without_config)


def _run_parser(commands: Any, name: str, help_text: str, keys: str, default_dir: str) -> argparse.ArgumentParser:
    """A command that runs from a config: CONFIG, --output-dir and --set, as train, sft and grpo share."""
    command = commands.add_parser(name, help=help_text)
    command.add_argument("config", nargs="?", help=f"YAML config (keys: see {keys})")
    command.add_argument("--output-dir", help=f"run directory (default runs/<config name>, or {default_dir})")
    command.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    return command


def _train(args: argparse.Namespace) -> int:
    from ..checkpoint import find_checkpoint
    from ..config import QUICKSTART, load_config
    from ..run_directory import read_run_config
    from ..trainer import Trainer

    output_dir = _output_dir(args, "runs/quickstart")
    if args.resume:  # the run's own config; CONFIG and --set may change only what a resume allows
        base = read_run_config(Path(output_dir))
    else:
        base = None if args.config else QUICKSTART
    config = load_config(args.config, args.set, base=base)
    print(f"evotune: training {config.model} on {config.task} -> {output_dir}", file=sys.stderr)
    trainer = Trainer(config, output_dir, resume=args.resume, overwrite=args.overwrite)
    try:
        final = trainer.train()
    except (EvotuneError, KeyboardInterrupt):
        checkpoint = find_checkpoint(Path(output_dir) / "checkpoint")
        where = f"stopped during iteration {trainer.strategy.iteration + 1}"
        if checkpoint is None:
            print(f"evotune: {where}, before its first checkpoint: nothing to resume. Start it again by adding "
                  "--overwrite to the same command.", file=sys.stderr)
        else:
            print(f"evotune: {where}. Continue from its last checkpoint with: evotune train --output-dir "
                  f"{output_dir} --resume", file=sys.stderr)
        raise
    print(json.dumps({"output_dir": output_dir, **final}, indent=2))
    return 0


def _sft(args: argparse.Namespace) -> int:
    from ..sft import load_sft_config, run_sft

    config = load_sft_config(args.config, args.set)
    output_dir = _output_dir(args, "runs/sft")
    print(f"evotune: LoRA SFT of {config.model} on {config.dataset or config.task} -> {output_dir}", file=sys.stderr)
    print(json.dumps(run_sft(config, output_dir), indent=2))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ..backends.base import resolve_device
    from ..config_files import parse_overrides
    from ..evaluation import EvalOptions, check_options, evaluate_models, format_table
    from ..tasks import get_task
    from ..tracking import dumps_strict

    output = Path(args.output or f"evotune-eval-{args.task}.json")
    plot = args.plot or (str(output.with_suffix(".png")) if args.kl_reference else None)
    options = EvalOptions(max_new_tokens=args.max_new_tokens, dtype=args.dtype, device=resolve_device(args.device),
                          seed=args.seed, num_samples=args.num_samples, temperature=args.temperature,
                          top_p=args.top_p, kl_reference=args.kl_reference, samples_path=args.samples,
                          plot_path=plot, quantization=args.quantization)
    check_options(options)
    # Before any model runs: a bad path would otherwise fail only after the whole evaluation.
    for flag, path in (("--output", output), ("--samples", args.samples), ("--plot", plot)):
        if path:
            _prepare_output_file(flag, Path(path))
    task = get_task(args.task, seed=args.seed, num_eval=args.num_eval, dataset=args.dataset,
                    eval_dataset=args.eval_dataset, **parse_overrides(args.task_arg))
    reference = [args.kl_reference] if args.kl_reference and args.kl_reference not in args.model else []
    models = args.model + reference  # the reference is a row of the table too (KL 0)
    results = evaluate_models(models, task, options)
    print(format_table(results))
    output.write_text(dumps_strict(results, indent=2))  # null, never NaN: strict JSON
    print(f"wrote {output}" + (f" and {plot}" if plot else ""), file=sys.stderr)
    return 0


def _prepare_output_file(flag: str, path: Path) -> None:
    """Create the file's directory now, or say why it cannot be written."""
    from ..errors import ConfigError

    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file path.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a part of the path is a file, or no permission
        raise ConfigError(f"{flag} {path}: cannot create its directory {path.parent} ({exc.strerror}); choose "
                          "another path.") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evotune", description="Fine-tune LLMs with evolution strategies.")
    commands = parser.add_subparsers(dest="command", required=True)
    train = _run_parser(commands, "train", "run ES training (no config: the quickstart on the built-in model)",
                        "`evotune keys`", "runs/quickstart")
    train.add_argument("--resume", action="store_true",
                       help="continue the run in OUTPUT_DIR from its checkpoint, with its own config.yaml")
    train.add_argument("--overwrite", action="store_true",
                       help="replace the run files (config.yaml, metrics.jsonl, checkpoint/, final/, ...) in OUTPUT_DIR")
    train.set_defaults(run=_train)

    sft = _run_parser(commands, "sft", "LoRA supervised fine-tuning (ESSA stage 1): writes OUTPUT_DIR/adapter",
                      "evotune.sft.SFTConfig", "runs/sft")
    sft.set_defaults(run=_sft)

    evaluate = commands.add_parser("eval", help="evaluate one or more models on a task")
    evaluate.add_argument("--model", action="append", required=True,
                          help="alias, model dir, .gguf, hub id, adapter, run dir or run checkpoint/ (repeatable)")
    evaluate.add_argument("--task", required=True)
    evaluate.add_argument("--task-arg", action="append", default=[], metavar="KEY=VALUE")
    evaluate.add_argument("--num-eval", type=int, default=None)
    add_cli_options(evaluate)  # --max-new-tokens, --dtype, --device, --seed, --num-samples, ...: EvalOptions'
    evaluate.add_argument("--output", help="JSON file for the metrics (default evotune-eval-TASK.json)")
    evaluate.add_argument("--samples", help="also append (model, prompt, completion, reward) rows to this JSONL")
    evaluate.add_argument("--dataset", help="gsm8k / math / ifeval / reward_model / custom: data file or hub name")
    evaluate.add_argument("--eval-dataset", help="held-out data file (default: a seeded split of --dataset)")
    evaluate.add_argument("--plot", help="reward-vs-KL PNG (default: next to --output when --kl-reference is set)")
    evaluate.set_defaults(run=_eval)

    export = commands.add_parser("export", help="write a plain transformers model (merging a LoRA run's adapter)")
    export.add_argument("model", help="run directory (its final/), a run's checkpoint/, an adapter (with --merge: "
                                      "merged), or alias / directory / .gguf")
    export.add_argument("--output-dir", required=True)
    export.add_argument("--merge", action="store_true", help="fold the LoRA adapter into the base weights")
    export.add_argument("--dtype", default="float32", choices=get_args(DtypeName),
                        help="dtype of the written weights (float32 keeps every bit of an fp32-trained mean; auto: "
                             "this machine's fast dtype)")
    export.add_argument("--overwrite", action="store_true", help="write into an --output-dir that already holds files")
    export.add_argument("--average-last", type=int, metavar="K",
                        help="an `evotune train` run's mean averaged over its last K iterates, replayed from its "
                             "update log (tail averaging: smooths the last updates' noise)")
    export.set_defaults(run=_export)

    grpo = _run_parser(commands, "grpo", "the GRPO baseline (TRL's GRPOTrainer) on the same run-directory contract",
                       "evotune.baselines.grpo.GRPORunConfig", "runs/grpo")
    grpo.add_argument("--resume", action="store_true",
                      help="continue the run in OUTPUT_DIR from its last TRL checkpoint, with its own config.yaml")
    grpo.add_argument("--overwrite", action="store_true",
                      help="replace the run files (config.yaml, metrics.jsonl, trl/, final/, ...) in OUTPUT_DIR")
    grpo.add_argument("--sweep-learning-rates", type=float, nargs="+", metavar="LR",
                      help="one run per learning rate, in OUTPUT_DIR/lr_<value>")
    grpo.set_defaults(run=_grpo)

    compare = commands.add_parser("compare", help="runs side by side: table and curves vs samples and time")
    compare.add_argument("runs", nargs="+", help="run directories (their config.yaml and metrics.jsonl)")
    compare.add_argument("--output", required=True, help="directory for compare.json, compare.md and PNGs")
    compare.add_argument("--metric", help="eval metric (default eval/accuracy, else eval/reward)")
    compare.add_argument("--target", type=float, help="also report the time and samples to reach this value")
    compare.add_argument("--budget", type=int, help="also report the metric at this many sampled completions "
                                                    "(default: the smallest budget among the runs)")
    compare.add_argument("--budget-time", type=float, metavar="SECONDS",
                         help="also report the metric at this much cumulative training time (equal wall-clock)")
    compare.add_argument("--label", action="append", default=[], metavar="DIR=NAME",
                         help="name run DIR's method NAME (repeatable): runs of one NAME share a row, whatever their "
                              "configs (default: runs whose configs differ only in the seed share a row)")
    compare.set_defaults(run=_compare)

    sweep = commands.add_parser("sweep", help="one run per grid point and seed (resumable), a table and a heatmap")
    sweep.add_argument("config", nargs="?",
                       help="YAML config every run starts from (none: as `evotune train` / `grpo` without one)")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...", required=True,
                       help="a config key and its values (repeatable; the first two make the heatmap's axes)")
    sweep.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds per grid point (default 0)")
    sweep.add_argument("--output", required=True, help="directory of the runs, sweep.json, sweep.md, heatmap.png")
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    sweep.add_argument("--command", default="train", choices=["train", "grpo"], help="what each run is")
    sweep.add_argument("--metric", help="eval metric of the table (default eval/accuracy, else eval/reward)")
    sweep.add_argument("--parallel", type=int, default=1, metavar="N",
                       help="run N grid runs at once as Ray tasks (default 1: one after another, no Ray)")
    sweep.add_argument("--cpus-per-run", type=float, default=1, metavar="C", help="with --parallel: cores per run")
    sweep.add_argument("--ray-address", help="with --parallel: Ray cluster to use (default: $RAY_ADDRESS, else local)")
    sweep.set_defaults(run=_sweep)

    doctor = commands.add_parser("doctor", help="check every path (hf, vLLM shapes, LoRA, low-rank, TP, Ray) on a "
                                                "tiny model on this machine: a table of pass/fail")
    doctor.add_argument("--engine-core", action="append", choices=["in_process", "separate_process"],
                        help="vLLM engine shape to check (repeat for both; default: this machine's default)")
    doctor.add_argument("--output", help="also write the results as JSON to this file")
    doctor.add_argument("--work-dir", help="keep the runs here (default: a temporary directory, removed)")
    doctor.set_defaults(run=_doctor)

    keys = commands.add_parser("keys", help="list the config keys with their defaults, choices and help")
    keys.add_argument("which", nargs="?", default="train", choices=["train", "sft", "grpo"], metavar="COMMAND",
                      help="whose keys: train (default), sft or grpo")
    keys.set_defaults(run=_keys)
    return parser


def _export(args: argparse.Namespace) -> int:
    from ..export import export_model

    print(json.dumps(export_model(args.model, args.output_dir, args.merge, args.dtype, args.overwrite,
                                  args.average_last), indent=2))
    return 0


def _grpo(args: argparse.Namespace) -> int:
    from ..baselines.grpo import load_grpo_config, run_grpo, sweep_learning_rates

    from ..errors import ConfigError

    output_dir = _output_dir(args, "runs/grpo")
    if args.sweep_learning_rates and (args.resume or args.overwrite):
        raise ConfigError("--sweep-learning-rates starts one run per rate in OUTPUT_DIR/lr_<value>; resume or replace "
                          "one of them with `evotune grpo --output-dir OUTPUT_DIR/lr_<value> --resume` (or --overwrite).")
    # --resume: the run's own config.yaml; CONFIG and --set may change only what a resume allows
    config = load_grpo_config(args.config, args.set, resume_dir=output_dir if args.resume else None)
    if args.sweep_learning_rates:
        print(json.dumps(sweep_learning_rates(config, output_dir, args.sweep_learning_rates), indent=2))
    else:
        print(json.dumps(run_grpo(config, output_dir, resume=args.resume, overwrite=args.overwrite), indent=2))
    return 0


def _compare(args: argparse.Namespace) -> int:
    from ..compare import compare_runs, format_markdown

    result = compare_runs(args.runs, args.output, args.metric, args.target, args.budget, args.budget_time,
                          args.label)
    print(format_markdown(result["methods"], result["metric"], result["notes"], result["retention"]))
    print(f"wrote {args.output}/compare.json, compare.md and plots", file=sys.stderr)
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from ..config import QUICKSTART
    from ..config_files import read_config_values
    from ..sweep import SweepFailed, format_table, sweep
    from ..sweep_grid import parse_grid

    grid = parse_grid(args.grid)
    # no config: the base `evotune train` (the quickstart) or `evotune grpo` (the defaults) has without one, so
    # the same command with --set reproduces any point
    quickstart = QUICKSTART if args.command == "train" and not args.config else None
    base, _ = read_config_values(args.config, args.set, base=quickstart)
    try:
        result = sweep(base, grid, args.seeds, args.output, args.command, args.metric, args.parallel,
                       args.cpus_per_run, args.ray_address)
    except SweepFailed as failure:  # the table of the runs that finished, then the failures (exit code 2)
        print(format_table(failure.result))
        raise
    print(format_table(result))
    print(f"wrote {args.output}/sweep.json, sweep.md" + (" and heatmap.png" if len(result["keys"]) > 1 else ""),
          file=sys.stderr)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from ..doctor import format_table, run_doctor

    def progress(check: Any) -> None:
        print(f"evotune doctor: {check.status.upper():4} {check.name} ({check.seconds:g} s): {check.detail}",
              file=sys.stderr, flush=True)

    report = run_doctor(args.engine_core, args.work_dir, progress)
    from ..doctor import Check

    print(format_table(report["environment"], [Check(**check) for check in report["checks"]]))
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if any(check["status"] == "fail" for check in report["checks"]) else 0


def _keys(args: argparse.Namespace) -> int:
    from ..config import TrainConfig

    if args.which == "sft":
        from ..sft import SFTConfig as config_class
    elif args.which == "grpo":
        from ..baselines.grpo import GRPORunConfig as config_class
    else:
        config_class = TrainConfig
    choices, types = config_class.choices(), config_class.field_types()
    for declared in dataclasses.fields(config_class):  # defaults from the fields: SFTConfig() alone is invalid
        key, help_text = declared.name, declared.metadata["help"]
        default = declared.default if declared.default_factory is dataclasses.MISSING else declared.default_factory()
        each = "each " if get_origin(types[key]) is list else ""
        allowed = f"; {each}one of: {', '.join(choices[key])}" if key in choices else ""
        print(f"{key} (default {default!r}{allowed}): {help_text}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except EvotuneError as exc:
        # paths are never broken (at their hyphens, or when longer than a line), so they copy whole
        print("evotune: error: " + textwrap.fill(str(exc), width=100, subsequent_indent="  ", break_on_hyphens=False,
                                                 break_long_words=False), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
