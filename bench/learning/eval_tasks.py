"""Held-out evaluation of one or more models on a task, as `evotune eval` does, into bench/results/.

Greedy accuracy with a 95% Wilson interval, avg@k / pass@k from k sampled completions, and
optionally the per-token KL from a reference model with the reward-vs-KL plot.

    python -m bench.learning.eval_tasks --task gsm8k --dataset ../shared/data/gsm8k/test.jsonl \
        --eval-dataset ../shared/data/gsm8k/test.jsonl --num-eval 200 --max-new-tokens 256 --num-samples 4
    python -m bench.learning.eval_tasks --task arithmetic --num-eval 128 --max-new-tokens 10 --num-samples 4 \
        --model runs/bench/arithmetic-seed0 --model runs/bench/arithmetic-seed1 \
        --kl-reference smollm2-135m-instruct --name eval_arithmetic_kl
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.common import study_results, write_result
from evotune.evaluation.evaluate import EvalOptions, evaluate_models  # noqa: E402
from evotune.evaluation.report import format_table  # noqa: E402
from evotune.runs.loading import eval_quantization, load_for_eval  # noqa: E402
from evotune.tasks import get_task  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", required=True)
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--dataset")
    parser.add_argument("--eval-dataset")
    parser.add_argument("--num-eval", type=int)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--num-samples", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--kl-reference")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name")
    parser.add_argument("--study", default="learning",
                        help="the study whose results folder, bench/results/STUDY/, gets the file")
    args = parser.parse_args()

    task = get_task(args.task, seed=args.seed, num_eval=args.num_eval, dataset=args.dataset,
                    eval_dataset=args.eval_dataset)
    name = args.name or f"eval_{args.task}"
    options = EvalOptions(max_new_tokens=args.max_new_tokens, dtype=args.dtype, seed=args.seed,
                          num_samples=args.num_samples, temperature=args.temperature, kl_reference=args.kl_reference,
                          plot_path=str(study_results(args.study) / f"{name}.png") if args.kl_reference else None)
    started = time.perf_counter()
    models = args.model or ["smollm2-135m-instruct"]
    if args.kl_reference and args.kl_reference not in models:
        models = models + [args.kl_reference]  # the reference is a row too (KL 0), as in `evotune eval`
    results = evaluate_models(models, task, options, load_for_eval, eval_quantization)
    print(format_table(results))
    write_result(name, {"command": "python -m bench.learning.eval_tasks " + " ".join(sys.argv[1:]), "task": args.task,
                        "max_new_tokens": args.max_new_tokens, "num_samples": args.num_samples,
                        "temperature": args.temperature, "dtype": args.dtype,
                        "wall_time_s": round(time.perf_counter() - started, 1), "results": results}, study=args.study)


if __name__ == "__main__":
    main()
