#!/usr/bin/env bash
# ESSA's rank x population x alpha grid in small form (arXiv 2507.04453, Figures 4-6): for LoRA ranks
# 4 / 8 / 16, an `evotune sft` adapter on 2-digit addition; then from each, BUDGET seconds of CMA-ES over
# its singular values (relative offsets) for every population size x alpha (singular_value_fraction).
# Scored on the validation split (eval_split: validation, n=256; the SFT runs train without those
# questions too), one CPU thread per run. The heatmap has one panel per rank (the `adapter` key).
#   bash bench/essa/essa_heatmap.sh                 # runs only what is missing (re-run to resume)
#   PARALLEL=2 bash bench/essa/essa_heatmap.sh      # two runs at once (Ray tasks, one core each)
#   POPULATIONS=16,48 FRACTIONS=0.25,1.0 BUDGET=120 bash bench/essa/essa_heatmap.sh   # the corners only
set -euo pipefail
RUNS=${RUNS:-runs/essa_heatmap}
SEEDS=${SEEDS:-0}
BUDGET=${BUDGET:-180}
SIGMA=${SIGMA:-0.5}
RANKS=${RANKS:-"4 8 16"}
POPULATIONS=${POPULATIONS:-16,32,64}
FRACTIONS=${FRACTIONS:-0.25,0.5,1.0}
PARALLEL=${PARALLEL:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
validation="task_args={eval_split: validation}"
adapters=()
for rank in $RANKS; do
  sft="$RUNS/sft-rank$rank"
  [ -f "$sft/adapter/adapter_config.json" ] || { rm -rf "$sft"; evotune sft examples/sft_arithmetic.yaml --output-dir "$sft" \
    --set lora_rank=$rank --set lora_alpha=$((2 * rank)) --set "$validation" --set num_eval=256; }
  adapters+=("$sft/adapter")
done
evotune sweep examples/essa_arithmetic.yaml --output-dir "$RUNS/sweep" --seeds $SEEDS --parallel "$PARALLEL" \
  --grid population_size=$POPULATIONS --grid singular_value_fraction=$FRACTIONS \
  --grid "adapter=$(IFS=,; echo "${adapters[*]}")" \
  --set svd_offsets=relative --set sigma=$SIGMA --set batch_size=8 --set population_batch_size=64 \
  --set max_training_seconds=$BUDGET --set iterations=1000 --set eval_every=0 --set checkpoint_every=1000 \
  --set num_eval=256 --set "$validation"
mkdir -p bench/results/essa/essa_heatmap
cp "$RUNS/sweep/sweep.md" "$RUNS/sweep/sweep.json" "$RUNS/sweep/heatmap.png" bench/results/essa/essa_heatmap/
