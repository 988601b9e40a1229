#!/usr/bin/env bash
# What fine-tuning costs (drift and retention) and run-to-run stability, on 2-digit addition at equal wall-clock:
# BUDGET seconds of training per run (max_training_seconds; evaluation excluded), one CPU thread each,
# SmolLM2-135M-Instruct. Every evaluation scores the held-out arithmetic questions (n=512, at the task's own
# untruncated budget, tasks/arithmetic.py) and the distance of the weights from the base (drift/); for seeds 0 and 1
# (the drift study's) also retention on conciseness (64 held-out questions at 128 tokens) and IFEval (24 prompts at
# 256 tokens): their correctness metrics and the per-token k3 KL to the base on their prompts. One such evaluation
# takes ~5 minutes on one thread, so runs evaluate 4-5 times; seeds 2-4 (stability only) skip retention.
# Methods (settings fixed before any run):
#   es           bench/configs/arithmetic_10tok.yaml (full-parameter OpenES)        seeds 0-4 (the stability study's five)
#   grpo         bench/configs/grpo_arithmetic_10tok.yaml (TRL, LoRA)               seeds 0-4
#   es-anchor1.25  es + anchor_decay 1.25: learning_rate 4e-3 x 1.25 = 0.5% of the distance to the base per update,
#                the AWD paper's fraction (anchor_decay 10 at its learning rate 5e-4)         seeds 0-1
#   es-anchor10  es + anchor_decay 10, the paper's value at our learning rate: 4% per update  seeds 0-1
#   lowrank      bench/configs/lowrank_arithmetic_10tok.yaml (EGGROLL-style rank-1 perturbations)     seeds 0-1
# Each final model is also evaluated at training's 10 new tokens (the truncated number earlier studies reported).
#   bash bench/drift/drift_study.sh                         # runs only what is missing (re-run to resume)
#   METHODS="es grpo" SEEDS="2 3 4" bash bench/drift/drift_study.sh   # a subset (e.g. one per core)
#   TABLE=only bash bench/drift/drift_study.sh              # tables and plots from the runs there are
# Smoke form (minutes): RUNS=runs/drift_smoke BUDGET=20 NUM_EVAL=16 RETENTION_NUM_EVAL=4 SEEDS=0 NAME=drift_smoke \
#   bash bench/drift/drift_study.sh
set -euo pipefail
RUNS=${RUNS:-runs/drift}
BUDGET=${BUDGET:-1800}
SEEDS=${SEEDS:-"0 1 2 3 4"}
METHODS=${METHODS:-"es grpo es-anchor1.25 es-anchor10 lowrank"}
NUM_EVAL=${NUM_EVAL:-512}
RETENTION_NUM_EVAL=${RETENTION_NUM_EVAL:-64}
TRUNCATED_TOKENS=${TRUNCATED_TOKENS:-10}
NAME=${NAME:-drift_arithmetic}
TABLE=${TABLE:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(--set max_training_seconds=$BUDGET --set iterations=100000 --set num_eval=$NUM_EVAL)
retention=(--set "retention_tasks=[conciseness,ifeval]" --set retention_num_eval=$RETENTION_NUM_EVAL)
retained() { extra=(); [[ "$1" =~ -seed[01]$ ]] && extra=("${retention[@]}"); return 0; }  # seeds 0-1 only
finished() { [ -f "$1/final/config.json" ] || [ -f "$1/final/adapter_config.json" ]; }
train() {  # DIR CONFIG ARGS...: start, or resume an interrupted run; skip a finished one
  local dir=$1; shift
  finished "$dir" && return
  if [ -d "$dir/checkpoint" ]; then evotune train --output-dir "$dir" --resume
  else rm -rf "$dir"; retained "$dir"; evotune train "$@" "${common[@]}" "${extra[@]}" --output-dir "$dir"; fi
}
# ES evaluates every 9 iterations (~30 s each on one thread: 7-8 points per curve), GRPO every 30 steps (~27 s
# each: 3-4 points); evaluations are not training time, so their cadence does not change what a run reaches
es_schedule=(--set eval_every=9 --set checkpoint_every=3)
if [ "$TABLE" != only ]; then
  for seed in $SEEDS; do
    for method in $METHODS; do
      dir="$RUNS/$method-seed$seed"
      case $method in
        es) train "$dir" bench/configs/arithmetic_10tok.yaml --set seed=$seed "${es_schedule[@]}" ;;
        es-anchor*) [ "$seed" -le 1 ] && train "$dir" bench/configs/arithmetic_10tok.yaml --set seed=$seed "${es_schedule[@]}" \
                      --set anchor_decay=${method#es-anchor} ;;
        lowrank) [ "$seed" -le 1 ] && train "$dir" bench/configs/lowrank_arithmetic_10tok.yaml --set seed=$seed \
                   "${es_schedule[@]}" ;;
        grpo) finished "$dir" || if ls "$dir/trl" 2>/dev/null | grep -q '^checkpoint-'; then  # TRL saves in trl/
                evotune grpo --output-dir "$dir" --resume
              else rm -rf "$dir"; retained "$dir"; evotune grpo bench/configs/grpo_arithmetic_10tok.yaml --output-dir "$dir" --set seed=$seed \
                "${common[@]}" "${extra[@]}" --set eval_every=30 --set checkpoint_every=10; fi ;;
        *) echo "unknown method $method" >&2; exit 2 ;;
      esac
      # the truncated number beside the untruncated one: the final model at training's token budget
      if finished "$dir" && [ ! -f "$dir/eval-tokens$TRUNCATED_TOKENS.json" ]; then
        evotune eval --model "$dir/final" --task arithmetic --num-eval "$NUM_EVAL" --max-new-tokens "$TRUNCATED_TOKENS" \
          --dtype auto --device cpu --seed "$seed" --output "$dir/eval-tokens$TRUNCATED_TOKENS.json"
      fi
    done
  done
fi
[ "$TABLE" = 0 ] && exit 0
python -m bench.drift.drift_table "$RUNS" --budget "$BUDGET" --truncated-tokens "$TRUNCATED_TOKENS" --name "$NAME"
# stability: every seed of ES and GRPO, each seed's final accuracy, spread and bootstrap interval of the std
evotune compare "$RUNS"/es-seed* "$RUNS"/grpo-seed* --metric eval/accuracy --budget-time "$BUDGET" \
  --output-dir "bench/results/stability/stability_${NAME#drift_}"
