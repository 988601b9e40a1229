#!/usr/bin/env bash
# Does averaging the last iterates (evotune export --average-last K) make full-parameter ES's runs agree more, or
# end higher? The stability study's ES runs (bench/drift/drift_study.sh: runs/drift/es-seed<N>, 30 training minutes
# each) are each replayed from their update log and averaged over their last K iterates, then scored on the run's
# own held-out split (n=512) beside its final iterate, both at 32 new tokens (the final iterates as re-scored by
# bench/stability/stability_formats.sh).
# K chosen before any averaged model was scored: 9 (the last evaluation interval, ~1/7 of a run's ~60 iterations)
# and 18.
#   bash bench/stability/stability_averaging.sh        # runs only what is missing (re-run to resume)
set -euo pipefail
RUNS=${RUNS:-runs/drift}
SEEDS=${SEEDS:-"0 1 2 3 4"}
COUNTS=${COUNTS:-"9 18"}
NUM_EVAL=${NUM_EVAL:-512}
NAME=${NAME:-stability_averaging_arithmetic}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for seed in $SEEDS; do
  run="$RUNS/es-seed$seed"
  [ -f "$run/final/config.json" ] || { echo "skipping $run: not finished" >&2; continue; }
  for count in $COUNTS; do
    averaged="$run/averaged-last$count" output="$run/eval-averaged-last$count.json"
    [ -f "$output" ] && continue
    [ -f "$averaged/config.json" ] || evotune export "$run" --average-last "$count" --output-dir "$averaged" --overwrite
    evotune eval --model "$averaged" --task arithmetic --num-eval "$NUM_EVAL" --max-new-tokens 32 --dtype auto \
      --device cpu --seed "$seed" --output "$output"
    rm -rf "$averaged"  # 540 MB a model; `evotune export` rebuilds it exactly
  done
done
python -m bench.stability.stability_averaging "$RUNS" --seeds $SEEDS --counts $COUNTS --name "$NAME"
