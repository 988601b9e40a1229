#!/usr/bin/env bash
# One arithmetic evaluation at 32 new tokens with every answer kept (evotune eval --samples), for the stability
# scripts (32: evotune eval's default when they first ran; bench/stability/stability_eval_budget.py shows 32 and the task's
# untruncated budget agree within 0.4 points on every stability run): skipped when OUTPUT exists; an interrupted
# one's partial answers are cleared first (--samples appends).
#   bash bench/stability/eval_samples.sh MODEL SPLIT_SEED OUTPUT SAMPLES NUM_EVAL
set -euo pipefail
model=$1 seed=$2 output=$3 samples=$4 num_eval=$5
[ -f "$output" ] && exit 0
rm -f "$samples"
evotune eval --model "$model" --task arithmetic --num-eval "$num_eval" --max-new-tokens 32 --dtype auto --device cpu \
  --seed "$seed" --output "$output" --samples "$samples"
