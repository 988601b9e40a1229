"""`evotune` command line: thin wrappers over the Python API."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path

from ..errors import EvotuneError


def _train(args: argparse.Namespace) -> int:
    from ..config import QUICKSTART, load_config
    from ..trainer import Trainer

    config = load_config(args.config, args.set, base=None if args.config else QUICKSTART)
    output_dir = args.output_dir or ("runs/quickstart" if args.config is None else f"runs/{Path(args.config).stem}")
    print(f"evotune: training {config.model} on {config.task} -> {output_dir}", file=sys.stderr)
    trainer = Trainer(config, output_dir, resume=args.resume)
    try:
        final = trainer.train()
    except (EvotuneError, KeyboardInterrupt):
        iteration = trainer.strategy.iteration
        print(f"evotune: stopped during iteration {iteration + 1}. {output_dir} is resumable from its last "
              f"checkpoint: evotune train {args.config or ''} --output-dir {output_dir} --resume".replace("  ", " "),
              file=sys.stderr)
        raise
    print(json.dumps({"output_dir": output_dir, **final}, indent=2))
    return 0


def _sft(args: argparse.Namespace) -> int:
    from ..sft import load_sft_config, run_sft

    config = load_sft_config(args.config, args.set)
    output_dir = args.output_dir or (f"runs/{Path(args.config).stem}" if args.config else "runs/sft")
    print(f"evotune: LoRA SFT of {config.model} on {config.dataset or config.task} -> {output_dir}", file=sys.stderr)
    print(json.dumps(run_sft(config, output_dir), indent=2))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ..backends import HFBackend
    from ..config import parse_overrides
    from ..tasks import get_task
    from ..trainer import evaluate_model, resolve_device

    task = get_task(args.task, seed=args.seed, num_eval=args.num_eval, **parse_overrides(args.task_arg))
    results = []
    for model in args.model:
        started = time.perf_counter()
        backend = HFBackend.load(model, args.dtype, resolve_device(args.device))
        metrics, completions = evaluate_model(backend, task, task.eval_rows, args.max_new_tokens)
        results.append({"model": model, "task": args.task, "num_eval": len(task.eval_rows),
                        **metrics, "time_s": round(time.perf_counter() - started, 2)})
        if args.samples:
            with open(args.samples, "a") as handle:
                for row, completion in zip(task.eval_rows, completions):
                    handle.write(json.dumps({"model": model, "prompt": row["prompt"], "completion": completion}) + "\n")
    keys = [key for key in results[0] if key not in ("model", "task")]
    print(" | ".join(["model"] + keys))
    for result in results:
        print(" | ".join([result["model"]] + [f"{result[k]:.4f}" if isinstance(result[k], float) else str(result[k])
                                              for k in keys]))
    output = Path(args.output or f"evotune-eval-{args.task}.json")
    output.write_text(json.dumps(results, indent=2))
    print(f"wrote {output}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evotune", description="Fine-tune LLMs with evolution strategies.")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="run ES training (no config: the quickstart on the built-in model)")
    train.add_argument("config", nargs="?", help="YAML config (keys: see `evotune keys`)")
    train.add_argument("--output-dir", help="run directory (default runs/<config name>)")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    train.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR/checkpoint")
    train.set_defaults(run=_train)

    sft = commands.add_parser("sft", help="LoRA supervised fine-tuning (ESSA stage 1): writes OUTPUT_DIR/adapter")
    sft.add_argument("config", nargs="?", help="YAML config (keys: see evotune.sft.SFTConfig)")
    sft.add_argument("--output-dir", help="run directory (default runs/<config name>, or runs/sft)")
    sft.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    sft.set_defaults(run=_sft)

    evaluate = commands.add_parser("eval", help="evaluate one or more models on a task")
    evaluate.add_argument("--model", action="append", required=True, help="alias, directory, .gguf, or hub id (repeatable)")
    evaluate.add_argument("--task", required=True)
    evaluate.add_argument("--task-arg", action="append", default=[], metavar="KEY=VALUE")
    evaluate.add_argument("--num-eval", type=int, default=None)
    evaluate.add_argument("--max-new-tokens", type=int, default=32)
    evaluate.add_argument("--dtype", default="bfloat16")
    evaluate.add_argument("--device", default="auto")
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--output", help="JSON file for the metrics (default evotune-eval-TASK.json)")
    evaluate.add_argument("--samples", help="also append prompt/completion pairs to this JSONL file")
    evaluate.set_defaults(run=_eval)

    export = commands.add_parser("export", help="write a plain transformers model (merging a LoRA run's adapter)")
    export.add_argument("model", help="run directory or adapter (with --merge), or alias / directory / .gguf")
    export.add_argument("--output-dir", required=True)
    export.add_argument("--merge", action="store_true", help="fold the LoRA adapter into the base weights")
    export.add_argument("--dtype", default="float32", help="dtype of the written weights")
    export.set_defaults(run=_export)

    keys = commands.add_parser("keys", help="list the config keys with their defaults and help")
    keys.set_defaults(run=_keys)
    return parser


def _export(args: argparse.Namespace) -> int:
    from ..export import export_model

    print(json.dumps(export_model(args.model, args.output_dir, args.merge, args.dtype), indent=2))
    return 0


def _keys(args: argparse.Namespace) -> int:
    from ..config import TrainConfig

    defaults = TrainConfig().to_dict()
    for key, help_text in TrainConfig.help().items():
        print(f"{key} (default {defaults[key]!r}): {help_text}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except EvotuneError as exc:
        print("evotune: error: " + textwrap.fill(str(exc), width=100, subsequent_indent="  "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
