#!/usr/bin/env bash
# Which full-parameter ES settings learn 2-digit addition fastest per CPU-minute? `evotune sweep` from
# bench/configs/arithmetic_10tok.yaml, BUDGET seconds of training per point (one CPU thread), scored on the task's
# *validation* split (task_args eval_split: validation, n=256, disjoint from the test set and from train),
# so the test set that bench/es_vs_grpo/es_vs_grpo_time.sh reports on is never used to choose settings.
#   bash bench/sweep_arithmetic/sweep_arithmetic.sh            # everything (re-run to resume; finished points are skipped)
#   PART=1 bash bench/sweep_arithmetic/sweep_arithmetic.sh & PART=2 bash bench/sweep_arithmetic/sweep_arithmetic.sh   # parts 1-3 split the points
#   SEEDS="0 1" PART=4 bash bench/sweep_arithmetic/sweep_arithmetic.sh    # the leaders at a second seed (seed 0 is skipped)
set -euo pipefail
RUNS=${RUNS:-runs/sweep_arithmetic}
SEEDS=${SEEDS:-0}
BUDGET=${BUDGET:-240}
PART=${PART:-all}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(--seeds $SEEDS --set max_training_seconds=$BUDGET --set iterations=1000 --set num_eval=256
        --set eval_every=0 --set checkpoint_every=1000 --set "task_args={eval_split: validation}")
sweep() { local name=$1; shift; evotune sweep bench/configs/arithmetic_10tok.yaml --output-dir "$RUNS/$name" "${common[@]}" "$@"
          mkdir -p bench/results/sweep_arithmetic
          cp "$RUNS/$name/sweep.md" "bench/results/sweep_arithmetic/$name.md"
          cp "$RUNS/$name/sweep.json" "bench/results/sweep_arithmetic/$name.json"
          [ ! -f "$RUNS/$name/heatmap.png" ] || cp "$RUNS/$name/heatmap.png" "bench/results/sweep_arithmetic/$name.png"; }
if [ "$PART" = all ] || [ "$PART" = 1 ]; then
  # population against prompts per member: 16 x 32 (the example) vs 16 x 8 (4x the iterations) vs 64 x 8
  sweep shape --grid batch_size=32,8
  sweep population --set batch_size=8 --grid population_size=64
  # a dense reward (partial credit per digit; accuracy stays exact) and rank shaping, at 16 x 8
  sweep reward --set batch_size=8 --grid "task_args={eval_split: validation, reward: digits}"
  sweep shaping --set batch_size=8 --grid fitness_shaping=centered_rank
fi
if [ "$PART" = all ] || [ "$PART" = 2 ]; then
  # sigma x learning rate at 16 x 8 (the example's 2e-3 / 4e-3 is in `shape`), and antithetic off
  sweep sigma_lr --set batch_size=8 --grid sigma=2e-3,4e-3 --grid learning_rate=8e-3,1.6e-2
  sweep antithetic --set batch_size=8 --grid antithetic=false
fi
if [ "$PART" = all ] || [ "$PART" = 3 ]; then
  # which weights evolve (SmolLM2 ties the LM head to the embeddings; 30 layers): all but the embeddings,
  # attention only, MLP only, the last 10 layers
  sweep weights --set batch_size=8 --grid "exclude_parameters=[embed_tokens]"
  sweep parameters --set batch_size=8 --grid "parameters=[self_attn],[mlp],['layers.2[0-9].']"
  # Adam: its first step moves every weight by learning_rate, about sgd's 4e-3 x |g| ~ 1e-3 at population 16
  sweep optimizer --set batch_size=8 --set learning_rate=1e-3 --grid optimizer=adam
fi
if [ "$PART" = 4 ]; then
  # the example (16 x 32), 16 x 8 and the digits reward again: are their differences more than one seed's luck?
  sweep shape --grid batch_size=32,8
  sweep reward --set batch_size=8 --grid "task_args={eval_split: validation, reward: digits}"
fi
