#!/usr/bin/env bash
# Full-parameter ES vs GRPO on 2-digit addition at equal wall-clock (SmolLM2-135M-Instruct, CPU):
# BUDGET seconds of training per run (max_training_seconds; evaluation excluded), one CPU thread each,
# seeds 0 and 1, held-out exact-match accuracy on 512 prompts; then `evotune compare --budget-time`.
# ES uses bench/configs/arithmetic_10tok.yaml (its settings come from the sweep in bench/results/sweep_arithmetic/),
# GRPO bench/configs/grpo_arithmetic_10tok.yaml at its best measured learning rate (1e-4 vs 1e-5,
# bench/results/es_vs_grpo/compare_grpo_learning_rate_arithmetic).
#   bash bench/es_vs_grpo/es_vs_grpo_time.sh                       # runs only what is missing (re-run to resume)
#   METHODS=grpo SEEDS=0 bash bench/es_vs_grpo/es_vs_grpo_time.sh  # one arm
set -euo pipefail
RUNS=${RUNS:-runs/es_vs_grpo_time}
SEEDS=${SEEDS:-"0 1"}
BUDGET=${BUDGET:-1800}
METHODS=${METHODS:-"es grpo"}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(--set max_training_seconds=$BUDGET --set iterations=1000 --set num_eval=512)
finished() { [ -f "$1/final/config.json" ] || [ -f "$1/final/adapter_config.json" ]; }
for seed in $SEEDS; do
  for method in $METHODS; do
    dir="$RUNS/$method-seed$seed"
    finished "$dir" && continue
    case $method in
      es) if [ -d "$dir/checkpoint" ]; then evotune train --output-dir "$dir" --resume
          else rm -rf "$dir"; evotune train bench/configs/arithmetic_10tok.yaml --output-dir "$dir" --set seed=$seed "${common[@]}" \
            --set eval_every=4 --set checkpoint_every=2; fi ;;
      grpo) rm -rf "$dir"; evotune grpo bench/configs/grpo_arithmetic_10tok.yaml --output-dir "$dir" --set seed=$seed "${common[@]}" \
              --set eval_every=10 --set checkpoint_every=1000 ;;
    esac
  done
done
evotune compare "$RUNS"/*-seed* --metric eval/accuracy --budget-time "$BUDGET" --output-dir bench/results/es_vs_grpo/compare_es_vs_grpo_time
