#!/usr/bin/env bash
# Does training at the evaluation's token budget remove full-parameter ES's run-to-run spread on arithmetic?
# The stability study's ES runs (bench/drift/drift_study.sh, bench/configs/arithmetic_10tok.yaml) train at max_new_tokens 10, so
# nothing a run writes after its tenth token is ever rewarded or penalized. At 10 tokens its five seeds score
# alike (25-43%), untruncated they spread from 31% to 55% (bench/stability/stability_eval_budget.py): seeds that answer
# "a + b = c", which 10 tokens cut, score higher than those that answer "The answer is N" (bench/stability/stability_formats.sh),
# and training never saw the difference. Here the same
# seeds train at max_new_tokens 48, the task's untruncated evaluation budget (tasks/arithmetic.py), so the reward
# they climb is the one they are scored on; everything else as the study's ES runs (30 training minutes, one CPU
# thread, eval every 9 iterations, n=512 held-out). Chosen before any of these runs: the task's evaluation budget
# (no other value is tried).
#   bash bench/stability/stability_budget.sh                          # runs only what is missing (re-run to resume)
#   SEEDS=3 TABLE=0 bash bench/stability/stability_budget.sh & SEEDS=4 TABLE=0 bash bench/stability/stability_budget.sh
set -euo pipefail
RUNS=${RUNS:-runs/stability_budget}
BUDGET=${BUDGET:-1800}
SEEDS=${SEEDS:-"0 1 2 3 4"}
TOKENS=${TOKENS:-48}
NUM_EVAL=${NUM_EVAL:-512}
TABLE=${TABLE:-1}
NAME=${NAME:-stability_budget_arithmetic}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for seed in $SEEDS; do
  dir="$RUNS/es-tokens$TOKENS-seed$seed"
  [ -f "$dir/final/config.json" ] && continue
  if [ -d "$dir/checkpoint" ]; then evotune train --output-dir "$dir" --resume
  else rm -rf "$dir"; evotune train bench/configs/arithmetic_10tok.yaml --set seed=$seed --set max_new_tokens=$TOKENS \
    --set max_training_seconds=$BUDGET --set iterations=100000 --set num_eval=$NUM_EVAL --set eval_every=9 \
    --set checkpoint_every=3 --output-dir "$dir"; fi
done
[ "$TABLE" = 0 ] && exit 0
# each seed's final accuracy (the runs' own evaluations, at the untruncated 48 tokens), the spread, a bootstrap
# interval of the std, the curves; the study's runs at 48: bench/results/stability/stability_eval_budget_arithmetic.md
evotune compare "$RUNS"/es-tokens$TOKENS-seed* --metric eval/accuracy --budget-time "$BUDGET" \
  --output-dir "bench/results/$NAME"
