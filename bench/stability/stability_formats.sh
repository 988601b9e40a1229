#!/usr/bin/env bash
# What the stability study's arithmetic runs ended up writing: each final model (runs/drift/<method>-seed<N>, ES and
# GRPO, bench/drift/drift_study.sh) scored again on its own held-out split (n=512, at 32 new tokens:
# bench/stability/eval_samples.sh) with every answer kept (evotune eval --samples), then bench/stability/stability_formats.py counts
# the forms of the answers (a number, "a + b = c", "the answer is ...") and the right sums followed by another
# number, which the task's last-number reward scores as wrong.
#   bash bench/stability/stability_formats.sh          # evaluates only what is missing (re-run to resume)
set -euo pipefail
RUNS=${RUNS:-runs/drift}
SEEDS=${SEEDS:-"0 1 2 3 4"}
METHODS=${METHODS:-"es grpo"}         # run names <method>-seed<N> (bench/stability/stability_budget.sh: es-tokens24)
NUM_EVAL=${NUM_EVAL:-512}
NAME=${NAME:-stability_formats_arithmetic}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for method in $METHODS; do
  for seed in $SEEDS; do
    run="$RUNS/$method-seed$seed"
    [ -f "$run/final/config.json" ] || [ -f "$run/final/adapter_config.json" ] || continue
    bash bench/stability/eval_samples.sh "$run/final" "$seed" "$run/eval-final.json" "$run/samples-final.jsonl" "$NUM_EVAL"
  done
done
python -m bench.stability.stability_formats "$RUNS" --seeds $SEEDS --methods $METHODS --num-eval "$NUM_EVAL" --name "$NAME"
