#!/usr/bin/env bash
# The quickstart and the one it replaced, side by side: the earlier full-ES quickstart (seed 0) and the lowrank-es
# quickstart (seeds 0 1 2) trained one after the other on this machine, each after a speed probe (run.sh), then all
# four scored in one call on the same fresh questions against one base. Writes
# bench/results/quickstart/quickstart_heldout.json (its by_settings: each setting's seeds; README quotes both).
#   bash bench/quickstart/candidates.sh            # about an hour on 2 cores; runs only what is missing
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-runs/quickstart_candidates}
EARLIER="space=full population_size=16 batch_size=16 learning_rate=0.008 iterations=10"
RUNS="$RUNS/full" SEEDS=0 MEASURE=0 SETTINGS="$EARLIER" bash bench/quickstart/run.sh
RUNS="$RUNS/lowrank" SEEDS="0 1 2" MEASURE=0 bash bench/quickstart/run.sh   # the shipped quickstart, as it is
python3 -m bench.quickstart.measure "$RUNS/full/seed0" "$RUNS"/lowrank/seed{0,1,2} --name quickstart_heldout
