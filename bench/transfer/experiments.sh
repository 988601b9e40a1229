#!/usr/bin/env bash
# The transfer experiments (bench/transfer/README.md): each variant at the same CPU-second budget, 3 seeds, then one
# measurement of every run on the same held-out questions and transfer split.
#   BUDGET=375 bash bench/transfer/experiments.sh        # BUDGET: CPU seconds per run (the quickstart's, measured)
#   VARIANT_NAMES="quickstart phrasings4" GRPO=0 ...      # a subset
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET=${BUDGET:?set BUDGET to the quickstart\'s CPU seconds on this machine (its runs\' summed cpu_s)}
RUNS=${RUNS:-runs/transfer_study}
SEEDS=${SEEDS:-"0 1 2"}
CLOCK="training_clock=cpu;max_training_seconds=$BUDGET;iterations=100000"
declare -A VARIANTS=(  # ";"-separated --set pairs (bench/quickstart/run.sh's SETTINGS)
  [quickstart]=""
  [prompts16]="batch_size=16"
  [phrasings4]="task_args={phrasings: 4}"
  [full_es]="method=full-es"
  [lora_es]="method=lora-es"
  [es_at_scale_paper]="method=full-es;population_size=30;antithetic=false;sigma=0.001;learning_rate=0.0005;noise=gaussian"
)
runs=()
for name in ${VARIANT_NAMES:-quickstart prompts16 phrasings4 full_es lora_es es_at_scale_paper}; do
  for seed in $SEEDS; do
    dir="$RUNS/$name/seed$seed"
    runs+=("$dir")
    [ -f "$dir/wall_time.json" ] && continue
    RUNS="$RUNS/$name" SEEDS="$seed" MEASURE=0 NAME="transfer_$name" SETTINGS="$CLOCK;${VARIANTS[$name]}" \
      bash bench/quickstart/run.sh
  done
done
python3 -m bench.quickstart.measure "${runs[@]}" --name transfer_heldout --study transfer
# grpo-lora's quickstart at the same CPU seconds, the reference (measured apart: `evotune grpo` runs)
[ "${GRPO:-1}" = 1 ] || exit 0
grpo_runs=()
for seed in $SEEDS; do
  dir="$RUNS/grpo_lora/seed$seed"
  grpo_runs+=("$dir")
  [ -f "$dir/wall_time.json" ] && continue
  COMMAND=grpo RUNS="$RUNS/grpo_lora" SEEDS="$seed" MEASURE=0 NAME=transfer_grpo_lora SETTINGS="$CLOCK" \
    bash bench/quickstart/run.sh
done
python3 -m bench.quickstart.measure "${grpo_runs[@]}" --name transfer_grpo_heldout --study transfer
