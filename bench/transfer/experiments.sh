#!/usr/bin/env bash
# The transfer experiments (bench/transfer/README.md): each variant at the same CPU-second budget, seed after seed
# (every variant's seed 0, then every variant's seed 1, ...: a stop leaves the variants with equal seeds), then one
# measurement of every finished run on the same held-out questions and transfer split.
#   BUDGET=620 bash bench/transfer/experiments.sh        # BUDGET: the quickstart's CPU seconds on this machine
#   VARIANT_NAMES="quickstart phrasings4" MEASURE=0 ...   # a subset; train only
# `training_clock: cpu` runs with OpenMP's idle threads passive (evotune sets it), so work beside these runs does not
# stretch their budget (bench/results/speed/omp_wait_policy.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET=${BUDGET:?set BUDGET to the quickstart\'s CPU seconds on this machine (its steps\' summed cpu_s)}
RUNS=${RUNS:-runs/transfer_study}
SEEDS=${SEEDS:-"0 1 2"}
NAMES=${VARIANT_NAMES:-"quickstart phrasings4 prompts16 es_at_scale_paper full_es lora_es grpo_lora"}
CLOCK="training_clock=cpu;max_training_seconds=$BUDGET;iterations=100000"
declare -A VARIANTS=(  # ";"-separated --set pairs (bench/quickstart/run.sh's SETTINGS)
  [quickstart]=""
  [prompts16]="batch_size=16"
  [phrasings4]="task_args={phrasings: 4}"
  [full_es]="method=full-es"
  [lora_es]="method=lora-es"
  [es_at_scale_paper]="method=full-es;population_size=30;antithetic=false;sigma=0.001;learning_rate=0.0005;noise=gaussian"
  [grpo_lora]=""  # `evotune grpo`'s quickstart, the reference
)
for seed in $SEEDS; do
  for name in $NAMES; do
    dir="$RUNS/$name/seed$seed"
    [ -f "$dir/wall_time.json" ] && continue
    command=train; [ "$name" = grpo_lora ] && command=grpo
    COMMAND=$command RUNS="$RUNS/$name" SEEDS="$seed" MEASURE=0 NAME="transfer_$name" \
      SETTINGS="$CLOCK;${VARIANTS[$name]}" bash bench/quickstart/run.sh
  done
done
[ "${MEASURE:-1}" = 1 ] || exit 0
# every finished run; `evotune grpo` runs are measured apart (their own held-out draw and base)
es_runs=(); grpo_runs=()
for name in $NAMES; do
  for dir in "$RUNS/$name"/seed*; do
    [ -f "$dir/wall_time.json" ] || continue
    if [ "$name" = grpo_lora ]; then grpo_runs+=("$dir"); else es_runs+=("$dir"); fi
  done
done
[ ${#es_runs[@]} -gt 0 ] && python3 -m bench.quickstart.measure "${es_runs[@]}" --name transfer_heldout --study transfer
[ ${#grpo_runs[@]} -gt 0 ] && python3 -m bench.quickstart.measure "${grpo_runs[@]}" --name transfer_grpo_heldout \
  --study transfer
true
