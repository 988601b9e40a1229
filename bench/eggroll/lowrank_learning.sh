#!/usr/bin/env bash
# EGGROLL (space: lowrank, population 64 x 4 prompts) vs full-parameter OpenES (population 16 x 32
# prompts) on 2-digit addition with SmolLM2-135M-Instruct: learning at equal training time.
# Each run trains for BUDGET seconds (max_training_seconds; evaluation excluded) on one CPU thread,
# seeds 0 and 1, held-out accuracy on 512 prompts; then `evotune compare --budget-time`.
#   bash bench/eggroll/lowrank_learning.sh          # runs only what is missing (re-run to resume)
set -euo pipefail
RUNS=${RUNS:-runs/lowrank_learning}
SEEDS=${SEEDS:-"0 1"}
BUDGET=${BUDGET:-1200}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(--set max_training_seconds=$BUDGET --set iterations=1000 --set num_eval=512 --set checkpoint_every=2)
run() {  # DIR CONFIG ARGS...: start, or resume an interrupted run; skip a finished one
  local dir=$1; shift
  if [ -f "$dir/final/config.json" ]; then return; fi
  if [ -d "$dir/checkpoint" ]; then evotune train "$@" --output-dir "$dir" --resume
  else rm -rf "$dir"; evotune train "$@" --output-dir "$dir"; fi
}
for seed in $SEEDS; do
  run "$RUNS/full-seed$seed" bench/configs/arithmetic_10tok.yaml --set seed=$seed "${common[@]}" --set eval_every=4
  run "$RUNS/lowrank-seed$seed" examples/lowrank_arithmetic.yaml --set seed=$seed "${common[@]}" --set eval_every=4
done
evotune compare "$RUNS"/full-seed* "$RUNS"/lowrank-seed* --metric eval/accuracy --budget-time "$BUDGET" \
  --output-dir bench/results/eggroll/compare_lowrank_vs_full_arithmetic
