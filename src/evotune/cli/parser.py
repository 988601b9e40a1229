"""The `evotune` command line's parsers: every command, option, default and example. `cli/main.py` runs them;
docs/hooks.py renders them as the CLI reference page."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Any, get_args

from .. import __version__
from ..config.eval_options import add_cli_options
from ..config.train import DtypeName
from ..estimate.methods import METHODS


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written (epilogs), and every option's default shown unless it has none (None, a
    store_true flag) or its help already names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        # `is`, not `in (...)`: 0 == False, and a default of 0 (--seed, --num-samples) is shown
        if "default" in text or action.default is None or action.default is False or action.default == [] \
                or action.default == argparse.SUPPRESS:
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)"
        return text


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option, still accepted: stores into the new option's dest and says what to write."""

    def __init__(self, option_strings: list[str], dest: str, replacement: str = "", **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"evotune: {option_string} is deprecated here; write {self.replacement} (it names a directory).",
              file=sys.stderr)
        refuse_two_values(parser, namespace, self.dest, values, f"{option_string} and {self.replacement}")
        setattr(namespace, self.dest, values)


class StoreOnce(argparse.Action):
    """--output-dir: refused when its deprecated spelling already named another directory."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        refuse_two_values(parser, namespace, self.dest, values, f"{option_string} and its old spelling --output")
        setattr(namespace, self.dest, values)


def refuse_two_values(parser: argparse.ArgumentParser, namespace: argparse.Namespace, dest: str, value: Any,
                      names: str) -> None:
    current = getattr(namespace, dest, None)
    if current is not None and current != value:
        parser.error(f"{names} name two directories ({current} and {value}); give only --output-dir.")


def _add_command(commands: Any, name: str, help_text: str, examples: str, more: str = "") -> argparse.ArgumentParser:
    """A subcommand with the shared formatter and an epilog of examples; `more`: a paragraph after the description."""
    description = help_text[0].upper() + help_text[1:] + "."
    if more:
        description += "\n\n" + textwrap.fill(" ".join(more.split()), width=100)
    return commands.add_parser(name, help=help_text, description=description,
                               epilog="examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  "),
                               formatter_class=HelpFormatter)


# How long each run command trains, and why the three do not share one key (docs/cli.md says the same): the
# counts are of different things, so a number of one is no guide to the other; compare runs by `samples_seen` or
# `max_training_seconds` (evotune compare --budget-time), not by these counts.
SET_HELP = ("override a config key (repeatable); VALUE is read as YAML: 2e-3, true, null, [q_proj, v_proj], "
            "{digits: 3}")

RUN_LENGTH = {
    "train": """How long: `iterations` ES iterations (default 100) in a config file, 15 in the quickstart
        (`evotune train` without a config), each one population evaluated (population_size members x batch_size
        prompts) and one update of the mean; or `max_training_seconds`. `--print-config` shows what a command
        line resolves to.""",
    "grpo": """How long: `iterations` GRPO optimizer steps (TRL's `max_steps`; default 20, a short baseline run)
        in a config file, 10 in the quickstart (`evotune grpo` without a config: the settings the method-matrix
        study chose for grpo-lora), each batch_size prompts x num_generations sampled completions and one
        gradient step; or `max_training_seconds`. It shares train's key so that --resume, `evotune compare` and
        sweeps treat both alike, but an ES iteration and a GRPO step cost and sample different amounts: compare
        methods by samples_seen or training time, not by this count.""",
    "sft": """How long: `epochs` passes over the training examples (default 1), or exactly `max_steps` optimizer
        steps when that is set. SFT's length is a number of passes over a fixed data set, so it keeps
        TRL/transformers' names; `iterations` is train's and grpo's key, and sft refuses it.""",
}


def _add_output_dir(command: argparse.ArgumentParser, help_text: str, required: bool = False) -> None:
    """--output-dir, with the old --output accepted (deprecated) for the commands that once spelled it so."""
    command.add_argument("--output-dir", required=False, action=StoreOnce,
                         help=help_text + (" (required)" if required else ""))
    command.add_argument("--output", dest="output_dir", action=DeprecatedAlias, replacement="--output-dir")


def _run_parser(commands: Any, name: str, help_text: str, examples: str, default_dir: str) -> argparse.ArgumentParser:
    """A command that runs from a config: CONFIG, --output-dir and --set, as train, sft and grpo share."""
    command = _add_command(commands, name, help_text, examples, RUN_LENGTH[name])
    command.add_argument("config", nargs="?", help=f"YAML config (its keys: `evotune keys {name}`)")
    command.add_argument("--output-dir", help=f"run directory (default runs/<config name>, or {default_dir})")
    command.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    command.add_argument("--print-config", action="store_true",
                         help="print the resolved config (YAML: the file, --set and the defaults, as config.yaml "
                              "would record it) and exit without running or writing anything")
    return command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evotune", description="Fine-tune LLMs with evolution strategies.", formatter_class=HelpFormatter,
        epilog="examples:\n  evotune train --output-dir runs/quickstart\n  evotune train --help")
    parser.add_argument("--version", action="version", version=f"evotune {__version__}")
    parser.add_argument("--verbose", action="store_true",
                        help="also print the third-party warnings evotune keeps quiet (version ranges, deprecations "
                             "inside TRL's and PEFT's calls, bitsandbytes' kernel lookup)")
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")  # sweep has a --command
    _add_train_and_sft(commands)
    _add_eval(commands)
    _add_export(commands)
    _add_grpo(commands)
    _add_compare(commands)
    _add_sweep(commands)
    _add_doctor(commands)
    _add_estimate(commands)
    _add_keys(commands)
    return parser


def _usage_with_required_output_dir(command: argparse.ArgumentParser) -> None:
    """Show --output-dir as required in the usage line, though argparse cannot mark it so beside its old spelling
    (call once every argument is added)."""
    usage = command.format_usage().removeprefix("usage: ").strip()
    command.usage = usage.replace("[--output-dir OUTPUT_DIR]", "--output-dir OUTPUT_DIR")


def _add_train_and_sft(commands: Any) -> None:
    """`evotune train` (ES) and `evotune sft` (ESSA's first stage): runs with a run directory."""
    train = _run_parser(commands, "train", "run ES training (no config: the quickstart on the built-in model)", """
        evotune train --output-dir runs/quickstart
        evotune train examples/arithmetic.yaml --output-dir runs/arith --set sigma=2e-3
        evotune train --output-dir runs/arith --resume --set iterations=40""", "runs/quickstart")
    _add_resume_flags(train, "config.yaml, metrics.jsonl, checkpoint/, final/, ...")

    sft = _run_parser(commands, "sft", "LoRA supervised fine-tuning (ESSA stage 1): writes OUTPUT_DIR/adapter", """
        evotune sft examples/sft_arithmetic.yaml --output-dir runs/sft_arithmetic
        evotune sft examples/sft_arithmetic.yaml --output-dir runs/sft_arithmetic --overwrite
        evotune sft --output-dir runs/sft_arithmetic --resume""", "runs/sft")
    _add_resume_flags(sft, "config.yaml, metrics.jsonl, checkpoint/, adapter/, loss.png, ...")


def _add_eval(commands: Any) -> None:
    """`evotune eval`: one or more models scored on a task."""
    evaluate = _add_command(commands, "eval", "evaluate a run, or one or more models, on a task", """
        evotune eval runs/my_task
        evotune eval --model smollm2-135m-instruct --model runs/arith --task arithmetic --num-eval 512
        evotune eval --model runs/my_task --dataset data/my_prompts.jsonl --reward-fn my_rewards:exact_match
        evotune eval --model runs/conc --task conciseness --kl-reference smollm2-135m-instruct""")
    evaluate.add_argument("run", nargs="?", metavar="RUN_DIR",
                          help="a run directory, scored on its own task, dataset, rewards and held-out split (its "
                               "config.yaml); --model adds rows, --task and the data flags score it on another task")
    evaluate.add_argument("--model", action="append", default=[],
                          help="alias, model dir, .gguf, hub id, adapter, run dir or run checkpoint/ (repeatable)")
    evaluate.add_argument("--task", help="built-in task name (arithmetic, gsm8k, ...) or custom (default: RUN_DIR's "
                                         "task; custom when --reward-fn is given)")
    evaluate.add_argument("--task-arg", action="append", default=[], metavar="KEY=VALUE",
                          help="a task argument, as the config's task_args (repeatable), e.g. digits=3")
    evaluate.add_argument("--reward-fn", action="append", default=[], metavar="MODULE:FUNCTION",
                          help="custom: a reward function with TRL's signature (repeatable), looked up in the current "
                               "folder, then the installed packages; or path/to/file.py:function")
    evaluate.add_argument("--num-eval", type=int, default=None,
                          help="held-out prompts to score (default: the task's own evaluation set size)")
    add_cli_options(evaluate)  # --max-new-tokens, --dtype, --device, --seed, --num-samples, ...: EvalOptions'
    evaluate.add_argument("--no-transfer", dest="transfer", action="store_false",
                          help="score the held-out prompts only, not the task's transfer split (arithmetic's other "
                               "wordings, subtraction and one more digit)")
    evaluate.add_argument("--output", help="JSON file for the metrics (default evotune-eval-TASK.json)")
    evaluate.add_argument("--samples", help="also append (model, prompt, completion, reward) rows to this JSONL file")
    evaluate.add_argument("--dataset", help="gsm8k / math / ifeval / reward_model / custom: data file or hub name")
    evaluate.add_argument("--eval-dataset", help="held-out data file (default: a seeded split of --dataset)")
    evaluate.add_argument("--plot", help="reward-vs-KL PNG file (default: next to --output when --kl-reference is set)")


def _add_export(commands: Any) -> None:
    """`evotune export`: a model directory from_pretrained loads."""
    export = _add_command(commands, "export", "write a model directory from_pretrained loads (--merge folds a LoRA "
                                              "adapter into the base)", """
        evotune export runs/essa_arithmetic --merge --output-dir runs/essa_arithmetic_merged
        evotune export runs/arith --average-last 5 --output-dir runs/arith_averaged""")
    export.add_argument("model", help="run directory (its final/), a run's checkpoint/, an adapter (with --merge: "
                                      "merged), or alias / directory / .gguf")
    export.add_argument("--output-dir", required=True, help="directory for the written model (required)")
    export.add_argument("--merge", action="store_true", help="fold the LoRA adapter into the base weights")
    export.add_argument("--dtype", default="float32", choices=get_args(DtypeName),
                        help="dtype of the written weights (float32 keeps every bit of an fp32-trained mean; auto: "
                             "this machine's fast dtype)")
    export.add_argument("--overwrite", action="store_true", help="write into an --output-dir that already holds files")
    export.add_argument("--average-last", type=int, metavar="K",
                        help="an `evotune train` run's mean averaged over its last K iterates, replayed from its "
                             "update log (tail averaging: smooths the last updates' noise)")


def _add_grpo(commands: Any) -> None:
    """`evotune grpo`: the GRPO baseline, with a learning-rate sweep."""
    grpo = _run_parser(commands, "grpo", "the GRPO baseline (TRL's GRPOTrainer) on the same run-directory contract", """
        evotune grpo --output-dir runs/grpo
        evotune grpo examples/grpo_arithmetic.yaml --output-dir runs/grpo_arithmetic
        evotune grpo examples/grpo_arithmetic.yaml --output-dir runs/grpo_lr --sweep-learning-rates 3e-4 1e-3 3e-3""",
                       "runs/grpo")
    _add_resume_flags(grpo, "config.yaml, metrics.jsonl, trl/, final/, ...", "its last TRL checkpoint")
    grpo.add_argument("--sweep-learning-rates", type=float, nargs="+", metavar="LR",
                      help="one run per learning rate, in OUTPUT_DIR/lr_<value>")


def _add_compare(commands: Any) -> None:
    """`evotune compare`: runs side by side (its --output-dir is required)."""
    compare = _add_command(commands, "compare", "runs side by side: table and curves vs samples and time", """
        evotune compare runs/es-seed0 runs/es-seed1 runs/grpo-seed0 --output-dir runs/compare
        evotune compare runs/* --metric eval/accuracy --budget-time 1800 --output-dir runs/compare""")
    compare.add_argument("runs", nargs="+", help="run directories (their config.yaml and metrics.jsonl)")
    _add_output_dir(compare, "directory for compare.json, compare.md and PNGs", required=True)
    compare.add_argument("--metric", help="a metric the runs log at evaluations: eval/<name>, drift/<name> or "
                                          "retain/<task>/<name> (default eval/accuracy, else eval/reward)")
    compare.add_argument("--target", type=float, help="also report the time and samples to reach this value")
    compare.add_argument("--budget", type=int, help="also report the metric at this many sampled completions "
                                                    "(default: the smallest budget among the runs)")
    compare.add_argument("--budget-time", type=float, metavar="SECONDS",
                         help="also report the metric at this much cumulative training time (equal wall-clock)")
    compare.add_argument("--label", action="append", default=[], metavar="DIR=NAME",
                         help="name run DIR's method NAME (repeatable): runs of one NAME share a row, whatever their "
                              "configs (default: runs whose configs differ only in the seed share a row)")
    _usage_with_required_output_dir(compare)


def _add_sweep(commands: Any) -> None:
    """`evotune sweep`: one run per grid point and seed (its --output-dir is required)."""
    sweep = _add_command(commands, "sweep", "one run per grid point and seed (resumable), a table and a heatmap", """
        evotune sweep examples/arithmetic.yaml --grid sigma=1e-3,2e-3 --grid learning_rate=2e-3,4e-3 \\
            --seeds 0 1 --output-dir runs/sweep --set max_training_seconds=300""")
    sweep.add_argument("config", nargs="?",
                       help="YAML config every run starts from (none: as `evotune train` / `grpo` without one)")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...", required=True,
                       help="a config key and its values (repeatable; the first two make the heatmap's axes)")
    sweep.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds per grid point")
    _add_output_dir(sweep, "directory of the runs, sweep.json, sweep.md, heatmap.png", required=True)
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    sweep.add_argument("--command", default="train", choices=["train", "grpo"], help="what each run is")
    sweep.add_argument("--metric", help="eval metric of the table (default eval/accuracy, else eval/reward)")
    sweep.add_argument("--parallel", type=int, default=1, metavar="N",
                       help="run N grid runs at once as Ray tasks (1: one after another, no Ray)")
    sweep.add_argument("--cpus-per-run", type=float, default=1, metavar="C", help="with --parallel: cores per run")
    sweep.add_argument("--ray-address", help="with --parallel: Ray cluster to use (default: $RAY_ADDRESS, else local)")
    sweep.add_argument("--yes", action="store_true",
                       help="start a sweep of more than 100 runs or 24 estimated hours (it prints both first)")
    _usage_with_required_output_dir(sweep)


def _add_doctor(commands: Any) -> None:
    """`evotune doctor`: every path checked on a tiny model, or this machine's speed probe."""
    doctor = _add_command(commands, "doctor", "check every path (hf, vLLM shapes, LoRA, low-rank, TP, Ray) on a tiny "
                                              "model on this machine: a table of pass/fail", """
        evotune doctor
        evotune doctor --engine-core in_process --engine-core separate_process --output doctor.json
        evotune doctor --checks hf vllm
        evotune doctor --speed          # this machine's speed probe and the quickstart's time to expect""")
    doctor.add_argument("--checks", nargs="+", choices=["hf", "vllm", "tensor-parallel", "ray"], metavar="GROUP",
                        help="run only these groups of checks: hf, vllm (full-es, ESSA, low-rank on each engine "
                             "shape), tensor-parallel, ray (default: all)")
    doctor.add_argument("--engine-core", action="append", choices=["in_process", "separate_process"],
                        help="vLLM engine shape to check (repeat for both; default: this machine's default)")
    doctor.add_argument("--output", help="also write the results to this JSON file")
    doctor.add_argument("--work-dir", help="keep the runs in this directory (default: a temporary one, removed)")
    doctor.add_argument("--speed", action="store_true",
                        help="instead of the checks: time one quickstart generate on the built-in model (~1 minute "
                             "with its load) and print how long `evotune train` with no config should take here")


def _add_estimate(commands: Any) -> None:
    """`evotune estimate`: a run's peak memory and time per iteration, before it starts."""
    estimate = _add_command(commands, "estimate", "predict a run's peak memory and seconds per iteration, and "
                                                  "whether it fits, before starting it", """
        evotune estimate --model Qwen2.5-1.5B                  # every method on one model: which fit here
        evotune estimate --method grpo-full --model Qwen2.5-0.5B
        evotune estimate examples/arithmetic.yaml --set population_size=32
        evotune estimate examples/grpo_arithmetic.yaml --command grpo --json""",
                            """Counts a run's terms (runtime and GRPO's trainer runtime, weights, fp32 master
        copy, drift copy, KV cache, stacked candidates, optimizer state, activations, logits; passes over the
        weights, tokens forward and backward) from its config and its model's config, with coefficients fitted on
        the scaling study's measured cells (docs/benchmarks/scaling.md); seconds scale to this machine by its
        speed probe. The hf backend's costs.""")
    estimate.add_argument("config", nargs="?", help="the run's YAML config (default: the command's quickstart)")
    estimate.add_argument("--command", choices=["train", "grpo", "sft"], default=None,
                          help="whose config CONFIG is (default train, or the --method's)")
    estimate.add_argument("--method", choices=list(METHODS), default=None,
                          help="without CONFIG: this method on its command's quickstart settings (none and no "
                               "CONFIG: one line per method)")
    estimate.add_argument("--model", help="alias, model dir, config.json, hub id in the local cache, or a public "
                                          "shape known offline (e.g. Qwen2.5-7B, Llama-3-8B)")
    estimate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    estimate.add_argument("--prompt-tokens", type=int, default=None,
                          help="tokens of a prompt (default: measured on the task's first batch)")
    estimate.add_argument("--no-speed-probe", action="store_true",
                          help="quote seconds on the study's machine instead of timing this one (~10 s)")
    estimate.add_argument("--json", action="store_true", help="print JSON instead of the table")


def _add_keys(commands: Any) -> None:
    """`evotune keys`: the config keys with their defaults, choices and help."""
    keys = _add_command(commands, "keys", "list the config keys with their defaults, choices and help", """
        evotune keys
        evotune keys sft
        evotune keys --method lowrank-es""")
    keys.add_argument("which", nargs="?", default="train", choices=["train", "sft", "grpo"], metavar="COMMAND",
                      help="whose keys: train, sft or grpo")
    keys.add_argument("--method", choices=list(METHODS), default=None,
                      help="one method's defaults instead, each with its source (its paper, or the method study)")


def _add_resume_flags(command: argparse.ArgumentParser, files: str, checkpoint: str = "its checkpoint") -> None:
    command.add_argument("--resume", action="store_true",
                         help=f"continue the run in OUTPUT_DIR from {checkpoint}, with its own config.yaml")
    command.add_argument("--overwrite", action="store_true", help=f"replace the run files ({files}) in OUTPUT_DIR")
