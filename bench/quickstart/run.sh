#!/usr/bin/env bash
# The quickstart as a new user runs it, measured: `evotune train` with the shipped defaults (only the seed set),
# one run after another on all the machine's cores (2 here), each run's wall time from start to its final/ model
# (model load and evaluations included), then the held-out gain of each seed on fresh questions at 48 tokens.
# Feeds bench/results/quickstart/quickstart_heldout.json, which README.md and docs/getting-started.md quote.
# COMMAND=grpo measures `evotune grpo`'s quickstart the same way (grpo_quickstart_heldout.json). SETTINGS (key=value
# words, each passed as --set; ";"-separated where a value holds a space) measures a candidate quickstart under its
# own NAME. Before each run the speed probe
# (`evotune doctor --speed`'s) is recorded beside it, so that runs made on different days compare at their speeds.
#   bash bench/quickstart/run.sh                 # seeds 0 1 2; runs only what is missing
#   COMMAND=grpo SEEDS=0 bash bench/quickstart/run.sh
#   NAME=quickstart_lowrank SETTINGS="space=lowrank population_size=64 batch_size=4" bash bench/quickstart/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMAND=${COMMAND:-train}
NAME=${NAME:-$([ "$COMMAND" = train ] && echo quickstart || echo "${COMMAND}_quickstart")}
SETTINGS=${SETTINGS:-}
RUNS=${RUNS:-runs/${NAME}_study}
SEEDS=${SEEDS:-"0 1 2"}
THREADS=${THREADS:-$(nproc)}
export OMP_NUM_THREADS=$THREADS
for seed in $SEEDS; do
  dir="$RUNS/seed$seed"
  [ -f "$dir/wall_time.json" ] && continue
  rm -rf "$dir"
  probe=$(python3 -c "import json; from evotune.doctor import speed_probe; print(json.dumps(speed_probe()))")
  sets=()
  # key=value words; separated by ";" instead where a value holds a space (task_args={phrasings: 4})
  if [[ "$SETTINGS" == *";"* ]]; then IFS=';' read -ra pairs <<< "$SETTINGS"; else read -ra pairs <<< "$SETTINGS"; fi
  for pair in "${pairs[@]+"${pairs[@]}"}"; do
    pair="${pair#"${pair%%[![:space:]]*}"}"; pair="${pair%"${pair##*[![:space:]]}"}"  # trimmed
    [ -n "$pair" ] && sets+=(--set "$pair")
  done
  start=$(date +%s.%N)
  evotune "$COMMAND" --output-dir "$dir" --set seed="$seed" "${sets[@]}"
  end=$(date +%s.%N)
  python3 -c "import json, sys; json.dump({'wall_time_s': round($end - $start, 1), 'threads': $THREADS,
    'speed_probe': json.loads(sys.argv[1])}, sys.stdout)" "$probe" > "$dir/wall_time.json"
done
runs=()
for seed in $SEEDS; do runs+=("$RUNS/seed$seed"); done
# MEASURE=0: train only (several settings are then measured together, in one call of bench.quickstart.measure)
[ "${MEASURE:-1}" = 1 ] && python3 -m bench.quickstart.measure "${runs[@]}" --name "${NAME}_heldout"
true
