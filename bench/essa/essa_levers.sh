#!/usr/bin/env bash
# Which lever makes ESSA's evolution stage add accuracy over its SFT start? From one `evotune sft` adapter
# (rank 8, 2-digit addition), BUDGET seconds of training per setting (one CPU thread, population batched,
# 8 prompts per member), scored on the validation split (eval_split: validation, n=256; the SFT run trains
# without those questions too), so the test set of bench/essa/essa_vs_grpo.sh is never used to choose.
#   bash bench/essa/essa_levers.sh                 # runs only what is missing (re-run to resume)
#   PARALLEL=2 bash bench/essa/essa_levers.sh      # two runs at once (Ray tasks, one core each)
#   PARTS="reward prompts" bash bench/essa/essa_levers.sh   # some of: sigma diagonal openes reward prompts population
# (alpha, rank and population together: bench/essa/essa_heatmap.sh)
set -euo pipefail
RUNS=${RUNS:-runs/essa_levers}
SEEDS=${SEEDS:-0}
BUDGET=${BUDGET:-300}
PARALLEL=${PARALLEL:-1}
PARTS=${PARTS:-all}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
validation="task_args={eval_split: validation}"
sft="$RUNS/sft-seed0"
[ -f "$sft/adapter/adapter_config.json" ] || { rm -rf "$sft"; evotune sft examples/sft_arithmetic.yaml --output-dir "$sft" \
  --set "$validation" --set num_eval=256; }
common=(--seeds $SEEDS --parallel "$PARALLEL" --set adapter="$sft/adapter" --set svd_offsets=relative
        --set population_size=48 --set batch_size=8 --set population_batch_size=48 --set max_training_seconds=$BUDGET
        --set iterations=1000 --set eval_every=0 --set checkpoint_every=1000 --set num_eval=256 --set "$validation")
sweep() { local name=$1; shift; evotune sweep examples/essa_arithmetic.yaml --output-dir "$RUNS/$name" "${common[@]}" "$@"
          mkdir -p bench/results/essa/essa_levers; cp "$RUNS/$name/sweep.md" "bench/results/essa/essa_levers/$name.md"
          cp "$RUNS/$name/sweep.json" "bench/results/essa/essa_levers/$name.json"; }
want() { [ "$PARTS" = all ] || [[ " $PARTS " == *" $1 "* ]]; }
want sigma && sweep sigma --grid sigma=0.2,0.5,1.0              # relative: a fraction of each singular value
want diagonal && sweep diagonal --set sigma=0.5 --grid cma_diagonal=true   # separable CMA-ES
want openes && sweep openes --set sigma=0.5 --set strategy=openes --set antithetic=true --grid learning_rate=0.1,0.5
# less noisy fitness: partial credit per digit (accuracy stays exact match), and 32 prompts per member
want reward && sweep reward --set sigma=0.5 --grid "task_args={eval_split: validation, reward: digits}"
want prompts && sweep prompts --set sigma=0.5 --set population_size=16 --grid batch_size=32
# ESSA's large populations, afforded by few prompts per member (population batching pays most there)
want population && sweep population --set sigma=0.5 --set population_batch_size=96 --set batch_size=4 \
  --set max_training_seconds=$((2 * BUDGET)) --grid population_size=96
true
