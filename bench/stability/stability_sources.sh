#!/usr/bin/env bash
# Where full-parameter ES's run-to-run spread on arithmetic comes from: the drift study's seed-0 ES run
# (runs/drift/es-seed0: seed 0, data_seed unset = 0) re-run with one source of randomness changed at a time, at
# the same 30 training minutes, one CPU thread, bench/configs/arithmetic_10tok.yaml, no retention:
#   noise-seed0   seed 1, data_seed 0   only the noise: the same prompts each iteration, the same held-out split
#   data-seed0    seed 0, data_seed 1   only the data: other prompts each iteration (and another train/held-out
#                                       split), the same noise
# Then every final model (these two, and the study's es-seed0 and es-seed1) is scored on both held-out splits,
# data seed 0's and data seed 1's (n=512 each, at 32 new tokens: bench/stability/eval_samples.sh), keeping each answer
# (--samples): a model's two scores differ only by the evaluation set, so the table separates what the
# evaluation set adds to the spread from what training adds. A data seed's training questions overlap the other
# seed's held-out ones, so the table counts only the questions no compared run trained on
# (bench/stability/stability_sources.py).
# Chosen before any of these runs: seed 0 (the first), and seed 1 as "the other" value of each source.
#   bash bench/stability/stability_sources.sh          # runs only what is missing (re-run to resume); needs es-seed0/1
#   SOURCES=noise bash bench/stability/stability_sources.sh & SOURCES=data bash bench/stability/stability_sources.sh   # one per core
# Smoke form: RUNS=runs/stability_sources_smoke STUDY=runs/drift_smoke BUDGET=20 NUM_EVAL=16 SPLITS=0 \
#   NAME=stability_sources_smoke bash bench/stability/stability_sources.sh
set -euo pipefail
RUNS=${RUNS:-runs/stability_sources}
STUDY=${STUDY:-runs/drift}            # where es-seed0 (and es-seed1) of bench/drift/drift_study.sh are
BUDGET=${BUDGET:-1800}
NUM_EVAL=${NUM_EVAL:-512}
NAME=${NAME:-stability_sources_arithmetic}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$RUNS"
train() {  # DIR SEED DATA_SEED: start, resume, or skip a finished run
  local dir=$1
  [ -f "$dir/final/config.json" ] && return
  if [ -d "$dir/checkpoint" ]; then evotune train --output-dir "$dir" --resume
  else rm -rf "$dir"; evotune train bench/configs/arithmetic_10tok.yaml --set seed="$2" --set data_seed="$3" \
    --set max_training_seconds="$BUDGET" --set iterations=100000 --set num_eval="$NUM_EVAL" \
    --set eval_every=9 --set checkpoint_every=3 --output-dir "$dir"; fi
}
SOURCES=${SOURCES:-"noise data"}
[[ " $SOURCES " == *" noise "* ]] && train "$RUNS/noise-seed0" 1 0
[[ " $SOURCES " == *" data "* ]] && train "$RUNS/data-seed0" 0 1
# each final model on each held-out split, one file per (model, split), so a model that finishes later is added
for run in "$STUDY/es-seed0" "$STUDY/es-seed1" "$RUNS/noise-seed0" "$RUNS/data-seed0"; do
  [ -f "$run/final/config.json" ] || continue
  for split in ${SPLITS:-0 1}; do
    bash bench/stability/eval_samples.sh "$run/final" "$split" "$RUNS/eval-$(basename "$run")-split$split.json" \
      "$RUNS/samples-$(basename "$run")-split$split.jsonl" "$NUM_EVAL"
  done
done
python -m bench.stability.stability_sources "$RUNS" --num-eval "$NUM_EVAL" --name "$NAME"
