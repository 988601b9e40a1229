"""`evotune` command line: thin wrappers over the Python API."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap
from pathlib import Path
from typing import Any, get_origin

from ..config.checks import resolve_device
from ..config.files import absolutize_paths, parse_overrides, read_config_values
from ..config.grpo import GRPO_QUICKSTART, GRPORunConfig
from ..config.methods import METHODS, describe, rebase
from ..config.parts import base_for_parts
from ..config.train import QUICKSTART, TrainConfig
from ..errors import ConfigError, EvotuneError
from ..evaluation.report import format_table
from ..files.checkpoint import find_checkpoint
from ..import_utils import quiet_third_party, startup_imports
from ..runs.compare import compare_runs
from ..runs.compare_output import format_markdown
from ..runs.directory import check_writable, read_run_config, refuse_other_commands_run
from ..runs.lifecycle import check_writable_file
from ..runs.loading import eval_quantization, load_for_eval
from ..runs.sweep_grid import parse_grid
from ..tasks import get_task
from ..tracking.tracker import dumps_strict
from .openmp import quiet_openmp_for_cpu_clock
from .parser import build_parser


def _output_dir(args: argparse.Namespace, without_config: str) -> str:
    """--output-dir, else runs/<config file name>, else the command's own default."""
    if args.output_dir is not None and not args.output_dir.strip():
        raise ConfigError("--output-dir is empty; name the run directory, e.g. --output-dir runs/my_run (or leave "
                          "the flag out for the default).")
    return args.output_dir or (f"runs/{Path(args.config).stem}" if args.config else without_config)


def _note_method(args: argparse.Namespace, config: Any) -> None:
    """No config: say the run is the quickstart. A config: name the method it runs, whose defaults fill the keys it
    leaves out."""
    if not args.config:
        if args.subcommand == "grpo":
            print(f"evotune: no config: GRPO's quickstart, {config.method} at its own defaults (learning_rate "
                  f"{config.learning_rate:g}, temperature {config.temperature:g}, {config.batch_size} prompts x "
                  f"{config.num_generations} completions, {config.iterations} steps); `evotune grpo --print-config` "
                  "shows them all", file=sys.stderr)
            if config.gradient_accumulation_steps == 1:  # the study's GRPO peaked at ~3x its sliced memory
                print(f"evotune: its loss runs over all {config.batch_size * config.num_generations} completions at "
                      "once; where memory is short, `--set gradient_accumulation_steps=4` gives the same update in "
                      "less (each method's peak: docs/which-method.md#memory)", file=sys.stderr)
        return
    print(f"evotune: method {config.method}: keys the config leaves out take its defaults (`evotune keys --method "
          f"{config.method}` lists them with their sources)", file=sys.stderr)


def _train(args: argparse.Namespace) -> int:
    from ..trainer import Trainer

    output_dir = _output_dir(args, "runs/quickstart")
    if args.resume:  # the run's own config; CONFIG and --set may change only what a resume allows
        base = read_run_config(Path(output_dir))
        refuse_other_commands_run(base, Path(output_dir), "train")
    else:
        base = None if args.config else QUICKSTART
    # the file and --set read once: the values they give, and on top of the base, the config
    given, source = read_config_values(args.config, args.set,
                                       missing_hint="pass a YAML file path or no config for the quickstart")
    # the base's keys (the quickstart's, or the run's own on --resume) only where the chosen parts read them
    base = base if args.resume else rebase(base or {}, given)  # a quickstart the keys choose another method over
    config = TrainConfig.from_dict(base_for_parts(base or {}, given, TrainConfig), source=source)
    if args.print_config:
        return _print_config(config)
    check_writable(output_dir)  # before the line that says where it trains (the run's own check comes again)
    print(f"evotune: training {config.model} on {config.task} -> {output_dir}", file=sys.stderr)
    if not args.resume:
        _note_method(args, config)
    trainer = Trainer(config, output_dir, resume=args.resume, overwrite=args.overwrite)
    started_at = trainer.strategy.iteration
    try:
        final = trainer.train()
    except (EvotuneError, KeyboardInterrupt):
        checkpoint = find_checkpoint(Path(output_dir) / "checkpoint")
        where = trainer.stopped_where()
        if checkpoint is None and not (Path(output_dir) / "config.yaml").exists():  # trainer.py removed it
            print(f"evotune: {where}, before any iteration completed: the run's files were removed, so the same "
                  "command starts it again once the cause is fixed.", file=sys.stderr)
        elif checkpoint is None:
            print(f"evotune: {where}, before its first checkpoint: nothing was saved, so resuming starts it again "
                  f"from iteration 0: evotune train --output-dir {output_dir} --resume", file=sys.stderr)
        else:
            print(f"evotune: {where}. Continue from its last checkpoint with: evotune train --output-dir "
                  f"{output_dir} --resume", file=sys.stderr)
        raise
    if args.resume and trainer.strategy.iteration == started_at:  # a finished run resumed: nothing to train
        print(f"evotune: {output_dir} had already run its {started_at} iterations: nothing was trained, and final/ "
              "holds its last mean. To train on: --set iterations=N (more than it ran).", file=sys.stderr)
    print(json.dumps({"output_dir": output_dir, **final}, indent=2))
    return 0


def _print_config(config: Any) -> int:
    """The resolved config as config.yaml would record it (`dtype: auto` as this machine resolves it); nothing
    runs and nothing is written."""
    import yaml

    from ..backends.models import resolve_dtype

    absolutize_paths(config)
    values = config.to_dict()
    if values.get("dtype") == "auto":
        values["dtype"] = resolve_dtype("auto", resolve_device(values.get("device", "auto")))
    print(yaml.safe_dump(values, sort_keys=False), end="")
    return 0


def _sft(args: argparse.Namespace) -> int:
    from ..sft import load_sft_config, run_sft

    output_dir = _output_dir(args, "runs/sft")
    # --resume: the run's own config.yaml; CONFIG and --set may change only what a resume allows
    config = load_sft_config(args.config, args.set, resume_dir=output_dir if args.resume else None)
    if args.print_config:
        return _print_config(config)
    check_writable(output_dir)  # before the line that says where it trains (the run's own check comes again)
    print(f"evotune: LoRA SFT of {config.model} on {config.dataset or config.task} -> {output_dir}", file=sys.stderr)
    try:
        summary = run_sft(config, output_dir, overwrite=args.overwrite, resume=args.resume)
    except KeyboardInterrupt:
        if find_checkpoint(Path(output_dir) / "checkpoint") is not None:
            print(f"evotune: stopped. Continue from its last checkpoint with: evotune sft --output-dir {output_dir} "
                  "--resume", file=sys.stderr)
        raise
    print(json.dumps(summary, indent=2))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ..evaluation.evaluate import EvalOptions, check_options, eval_budget, evaluate_models

    models, task_name, task_kwargs, split_seed, (budget, trained_budget) = _eval_target(args)
    output = Path(args.output or f"evotune-eval-{task_name}.json")
    plot = args.plot or (str(output.with_suffix(".png")) if args.kl_reference else None)
    options = EvalOptions(max_new_tokens=budget, transfer=args.transfer,
                          transfer_max_new_tokens=args.transfer_max_new_tokens,
                          dtype=args.dtype, device=resolve_device(args.device),
                          seed=args.seed, num_samples=args.num_samples, temperature=args.temperature,
                          top_p=args.top_p, kl_reference=args.kl_reference, samples_path=args.samples,
                          plot_path=plot, quantization=args.quantization)
    check_options(options)
    # Before any model runs: a bad path would otherwise fail only after the whole evaluation.
    for flag, path in (("--output", output), ("--samples", args.samples), ("--plot", plot)):
        if path:
            check_writable_file(Path(path), flag)
    task = get_task(task_name, seed=split_seed, **task_kwargs)
    if budget is None and trained_budget:  # the budget of the run's own evaluations, as training scored them
        options = dataclasses.replace(options, max_new_tokens=eval_budget(task, trained_budget))
    reference = [args.kl_reference] if args.kl_reference and args.kl_reference not in models else []
    results = evaluate_models(models + reference, task, options, load_for_eval, eval_quantization)
    print(format_table(results))  # the reference is a row of the table too (KL 0)
    output.write_text(dumps_strict(results, indent=2))  # null, never NaN: strict JSON
    print(f"wrote {output}" + (f" and {plot}" if plot else ""), file=sys.stderr)
    return 0


def _eval_target(args: argparse.Namespace) -> tuple[list[str], str, dict[str, Any], int, tuple[int | None, int | None]]:
    """(models, task, its arguments, the held-out split's seed, (the token budget or None for the task's own, the
    run's training budget, which the run's own evaluations never went below)) of an
    `evotune eval`: RUN_DIR's own task, data, rewards, split and budget from its config.yaml, each replaced by a flag
    that gives another; without RUN_DIR, the flags alone."""
    run = read_run_config(Path(args.run), "evotune eval RUN_DIR") if args.run else {}
    models = ([args.run] if args.run else []) + args.model
    if not models:
        raise ConfigError("evotune eval needs what to score: a run directory (evotune eval runs/my_task) or --model "
                          "MODEL with --task TASK.")
    given_data = args.task or args.dataset or args.reward_fn
    task_name = args.task or ("custom" if args.reward_fn else run.get("task"))
    if task_name is None:
        raise ConfigError("evotune eval --model needs --task (arithmetic, gsm8k, ..., or custom with --dataset and "
                          "--reward-fn), or a run directory to take its task from.")
    own = run if not given_data or task_name == run.get("task") else {}  # another task: none of the run's data
    task_kwargs = {**(own.get("task_args") or {}), **parse_overrides(args.task_arg, "--task-arg", "digits=3")}
    # a flag, else the same key as a --task-arg (the older spelling), else the run's own
    given = {"dataset": args.dataset, "eval_dataset": args.eval_dataset, "num_eval": args.num_eval,
             "reward_fns": args.reward_fn or None, "reward_weights": None}
    for key, value in given.items():
        task_kwargs[key] = value if value is not None else task_kwargs.get(key, own.get(key) or None)
    if args.reward_fn:  # the run's weights belong to the run's rewards
        task_kwargs["reward_weights"] = None
    split_seed = own.get("data_seed") if own.get("data_seed") is not None else own.get("seed", args.seed)
    budget = args.max_new_tokens if args.max_new_tokens is not None else own.get("eval_max_new_tokens")
    return models, task_name, task_kwargs, split_seed, (budget, own.get("max_new_tokens"))


def _require_output_dir(args: argparse.Namespace) -> str:
    if not args.output_dir or not args.output_dir.strip():
        raise ConfigError(f"`evotune {args.subcommand}` needs --output-dir DIR: the directory it writes its results "
                          "to.")
    check_writable(args.output_dir)  # read-only, under a file, a full disk: one line before any work (train's check)
    return args.output_dir


def _export(args: argparse.Namespace) -> int:
    from ..runs.export import export_model  # here, not at the top: `evotune --help` needs no torch

    check_writable(args.output_dir)
    print(json.dumps(export_model(args.model, args.output_dir, args.merge, args.dtype, args.overwrite,
                                  args.average_last), indent=2))
    return 0


def _grpo(args: argparse.Namespace) -> int:
    from ..baselines.grpo import load_grpo_config, run_grpo, sweep_learning_rates

    output_dir = _output_dir(args, "runs/grpo")
    if args.sweep_learning_rates and (args.resume or args.overwrite):
        raise ConfigError("--sweep-learning-rates starts one run per rate in OUTPUT_DIR/lr_<value>; resume or replace "
                          "one of them with `evotune grpo --output-dir OUTPUT_DIR/lr_<value> --resume` "
                          "(or --overwrite).")
    # --resume: the run's own config.yaml; CONFIG and --set may change only what a resume allows. No config: the
    # quickstart, the settings the method-matrix study chose (config/grpo.py)
    config = load_grpo_config(args.config, args.set, resume_dir=output_dir if args.resume else None,
                              base=None if args.config else GRPO_QUICKSTART)
    if args.print_config:
        return _print_config(config)
    check_writable(output_dir)  # before the notes on what runs (the run's own check comes again)
    if not args.resume:
        _note_method(args, config)
    if args.sweep_learning_rates:
        print(json.dumps(sweep_learning_rates(config, output_dir, args.sweep_learning_rates), indent=2))
    else:
        print(json.dumps(run_grpo(config, output_dir, resume=args.resume, overwrite=args.overwrite), indent=2))
    return 0


def _compare(args: argparse.Namespace) -> int:
    output_dir = _require_output_dir(args)
    result = compare_runs(args.runs, output_dir, args.metric, args.target, args.budget, args.budget_time,
                          args.label)
    print(format_markdown(result["methods"], result["metric"], result["notes"], result["retention"]))
    print(f"wrote {output_dir}/compare.json, compare.md and plots", file=sys.stderr)
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from ..sweep import SweepFailed, announce, format_table, sweep

    output_dir = _require_output_dir(args)
    grid = parse_grid(args.grid)
    # no config: the base `evotune train` or `evotune grpo` has without one (its quickstart), so the same command
    # with --set reproduces any point
    quickstart = None if args.config else {"train": QUICKSTART, "grpo": GRPO_QUICKSTART}[args.command]
    given, _ = read_config_values(args.config, args.set)
    base = base_for_parts(rebase(quickstart or {}, given), given,
                          {"train": TrainConfig, "grpo": GRPORunConfig}[args.command])
    announce(args.command, base, grid, args.seeds, args.parallel, args.yes)
    try:
        result = sweep(base, grid, args.seeds, output_dir, args.command, args.metric, args.parallel,
                       args.cpus_per_run, args.ray_address)
    except SweepFailed as failure:  # the table of the runs that finished, then the failures (exit code 2)
        print(format_table(failure.result))
        raise
    print(format_table(result))
    print(f"wrote {output_dir}/sweep.json, sweep.md" + (" and heatmap.png" if len(result["keys"]) > 1 else ""),
          file=sys.stderr)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from ..doctor import Check, describe_speed, format_table, run_doctor, speed_probe

    def progress(check: Any) -> None:
        print(f"evotune doctor: {check.status.upper():4} {check.name} ({check.seconds:g} s): {check.detail}",
              file=sys.stderr, flush=True)

    # before any check runs (they take minutes): a bad --output or --work-dir would otherwise fail at the end, or
    # doctor's runs would land among the user's files
    if args.output:
        check_writable_file(Path(args.output), "--output")
    if args.speed:
        result = speed_probe()
        print(describe_speed(result))
        if args.output:
            Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
        return 0
    if args.work_dir:
        work = Path(args.work_dir)
        if work.exists() and not work.is_dir():
            raise ConfigError(f"--work-dir {work} is a file; give a new or empty directory for doctor's runs.")
        if work.is_dir() and any(work.iterdir()):
            raise ConfigError(f"--work-dir {work} is not empty; doctor writes its runs there and would mix them with "
                              "what it holds. Give a new or empty directory.")
        check_writable(work)
    report = run_doctor(args.engine_core, args.work_dir, progress, args.checks)
    print(format_table(report["environment"], [Check(**check) for check in report["checks"]]))
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if any(check["status"] == "fail" for check in report["checks"]) else 0


def _estimate(args: argparse.Namespace) -> int:
    from ..estimate.report import run_estimate  # torch and transformers: `evotune --help` needs neither

    print(run_estimate(args.config, args.command, args.method, args.model, args.set, args.prompt_tokens,
                       speed=not args.no_speed_probe, as_json=args.json))
    return 0


def _keys(args: argparse.Namespace) -> int:
    if args.method:
        print("\n".join(describe(args.method)))
        return 0
    if args.which == "sft":
        from ..sft import SFTConfig as config_class
    elif args.which == "grpo":
        from ..baselines.grpo import GRPORunConfig as config_class
    else:
        config_class = TrainConfig
    choices, types = config_class.choices(), config_class.field_types()
    methods = [method for method in METHODS.values() if method.command == config_class.COMMAND]
    for declared in dataclasses.fields(config_class):  # defaults from the fields: SFTConfig() alone is invalid
        key, help_text = declared.name, declared.metadata["help"]
        default = declared.default if declared.default_factory is dataclasses.MISSING else declared.default_factory()
        each = "each " if get_origin(types[key]) is list else ""
        allowed = f"; {each}one of: {', '.join(choices[key])}" if key in choices else ""
        owned = [f"{method.name} {method.defaults[key].value!r}" for method in methods if key in method.defaults]
        shown = f"default per method: {', '.join(owned)}" if owned and len(owned) == len(methods) else \
            f"default {default!r}" + (f", {', '.join(owned)}" if owned else "")
        print(f"{key} ({shown}{allowed}): {help_text}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {"train": _train, "sft": _sft, "eval": _eval, "export": _export, "grpo": _grpo,
                "compare": _compare, "sweep": _sweep, "doctor": _doctor, "estimate": _estimate,
                "keys": _keys}
    try:
        return handlers[args.subcommand](args)
    except EvotuneError as exc:
        # paths are never broken (at their hyphens, or when longer than a line), so they copy whole
        print("evotune: error: " + textwrap.fill(str(exc), width=100, subsequent_indent="  ", break_on_hyphens=False,
                                                 break_long_words=False), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


# What each command imports anyway (torch and transformers through them), made at the start of its own process
HEAVY_MODULES = {"train": ("evotune.trainer",), "sweep": ("evotune.trainer",), "sft": ("evotune.sft",),
                 "grpo": ("evotune.baselines.grpo",), "eval": ("evotune.evaluation.evaluate",),
                 "export": ("evotune.runs.export",), "doctor": ("evotune.doctor", "evotune.trainer")}


def console_main(argv: list[str] | None = None) -> int:
    """The `evotune` command: main() in a process of its own, whose command's heavy imports come first, without the
    garbage collector and then frozen (import_utils.startup_imports: 1.5 s less for a short `evotune train`).
    main() itself changes nothing of the collector, so code that calls it in its own process (tests, notebooks) keeps
    its own."""
    import importlib

    argv = sys.argv[1:] if argv is None else argv
    command = next((word for word in argv if not word.startswith("-")), "")
    quiet_third_party(verbose="--verbose" in argv[:argv.index(command)] if command else "--verbose" in argv)
    modules = HEAVY_MODULES.get(command, ())
    quiet_openmp_for_cpu_clock(argv)  # before torch loads OpenMP, which reads it once
    if modules and not {"-h", "--help", "--print-config"} & set(argv):  # these print before anything runs
        with startup_imports():
            for name in ("torch", "transformers.modeling_utils", "transformers.generation.utils", *modules):
                importlib.import_module(name)
    return main(argv)


if __name__ == "__main__":
    sys.exit(console_main())
