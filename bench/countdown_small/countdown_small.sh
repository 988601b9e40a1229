#!/usr/bin/env bash
# Countdown in small form (Qiu et al.'s Table 1 task): easy instances (3 numbers from 1-20, targets up to 50),
# a format warm start by SFT on the task's own solver's solutions, then from that same start, BUDGET seconds
# of training each (one CPU thread): full-parameter ES on the merged warm start, ESSA on the adapter's
# singular values, GRPO continuing the adapter. Held-out n=200, seeds 0 and 1.
#   bash bench/countdown_small/countdown_small.sh        # runs only what is missing (re-run to resume)
set -euo pipefail
RUNS=${RUNS:-runs/countdown_small}
SEEDS=${SEEDS:-"0 1"}
BUDGET=${BUDGET:-600}
METHODS=${METHODS:-"es essa grpo"}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
finished() { [ -f "$1/final/config.json" ] || [ -f "$1/final/adapter_config.json" ]; }
train() {  # DIR ARGS...: start, or resume an interrupted run
  local dir=$1; shift
  finished "$dir" && return
  if [ -d "$dir/checkpoint" ]; then evotune train --output-dir "$dir" --resume
  else rm -rf "$dir"; evotune train "$@" --output-dir "$dir"; fi
}
timed=(--set iterations=1000 --set max_training_seconds=$BUDGET)
for seed in $SEEDS; do
  sft="$RUNS/sft-seed$seed"
  [ -f "$sft/adapter/adapter_config.json" ] || { rm -rf "$sft"; evotune sft examples/sft_countdown.yaml --set seed=$seed \
    --output-dir "$sft"; }
  for method in $METHODS; do
    case $method in
      es) [ -f "$sft/merged/config.json" ] || evotune export "$sft/adapter" --merge --dtype float32 --overwrite \
            --output-dir "$sft/merged"
          train "$RUNS/es-seed$seed" examples/countdown.yaml --set seed=$seed --set model="$sft/merged" "${timed[@]}" ;;
      essa) train "$RUNS/essa-seed$seed" examples/essa_countdown.yaml --set seed=$seed --set adapter="$sft/adapter" \
              "${timed[@]}" ;;
      grpo) finished "$RUNS/grpo-seed$seed" || { rm -rf "$RUNS/grpo-seed$seed"; evotune grpo examples/grpo_countdown.yaml \
              --output-dir "$RUNS/grpo-seed$seed" --set seed=$seed --set adapter="$sft/adapter" "${timed[@]}" \
              --set checkpoint_every=1000; } ;;
    esac
  done
done
evotune compare "$RUNS"/{es,essa,grpo}-seed* --metric eval/accuracy --budget-time "$BUDGET" \
  --output-dir bench/results/countdown_small/compare_countdown_small 2>/dev/null || evotune compare "$RUNS"/*-seed*[0-9] --metric eval/accuracy \
  --budget-time "$BUDGET" --output-dir bench/results/countdown_small/compare_countdown_small
