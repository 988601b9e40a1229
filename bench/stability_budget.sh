#!/usr/bin/env bash
# Does training at the evaluation's token budget remove full-parameter ES's run-to-run spread on arithmetic?
# The stability study's ES runs (bench/drift_study.sh, examples/arithmetic.yaml) train at max_new_tokens 10 and are
# scored at the task's untruncated 24 (tasks/arithmetic.py), so nothing a run writes after its tenth token is
# ever rewarded or penalized; the two low seeds answer "The answer is ..." at 51-66 characters on average
# (bench/stability_formats.sh). Here the same five seeds train at max_new_tokens 24, so the
# reward they climb is the one they are scored on; everything else as the study's ES runs (30 training minutes,
# one CPU thread, eval every 9 iterations, n=512 held-out). Chosen before any of these runs: 24, the task's own
# evaluation budget (no other value is tried).
#   bash bench/stability_budget.sh                          # runs only what is missing (re-run to resume)
#   SEEDS="0 2 4" TABLE=0 bash bench/stability_budget.sh & SEEDS="1 3" TABLE=0 bash bench/stability_budget.sh
set -euo pipefail
RUNS=${RUNS:-runs/stability_budget}
STUDY=${STUDY:-runs/drift}            # the study's ES runs at 10 tokens (es-seed<N>)
BUDGET=${BUDGET:-1800}
SEEDS=${SEEDS:-"0 1 2 3 4"}
TOKENS=${TOKENS:-24}
NUM_EVAL=${NUM_EVAL:-512}
TABLE=${TABLE:-1}
NAME=${NAME:-stability_budget_arithmetic}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for seed in $SEEDS; do
  dir="$RUNS/es-tokens$TOKENS-seed$seed"
  [ -f "$dir/final/config.json" ] && continue
  if [ -d "$dir/checkpoint" ]; then evotune train --output-dir "$dir" --resume
  else rm -rf "$dir"; evotune train examples/arithmetic.yaml --set seed=$seed --set max_new_tokens=$TOKENS \
    --set max_training_seconds=$BUDGET --set iterations=100000 --set num_eval=$NUM_EVAL --set eval_every=9 \
    --set checkpoint_every=3 --output-dir "$dir"; fi
done
[ "$TABLE" = 0 ] && exit 0
# both budgets side by side: each seed's final accuracy, the spread, a bootstrap interval of the std
evotune compare "$STUDY"/es-seed* "$RUNS"/es-tokens$TOKENS-seed* --metric eval/accuracy --budget-time "$BUDGET" \
  --output "bench/results/$NAME"
RUNS=$RUNS SEEDS="$SEEDS" METHODS=es-tokens$TOKENS NAME=stability_formats_budget bash bench/stability_formats.sh
