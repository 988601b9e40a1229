#!/usr/bin/env bash
# Qiu et al.'s reward-hacking check on conciseness (reward = -|len(completion) - len(solution)|): does ES
# reach the reward with less KL to the base model, and less loss of correctness, than GRPO?
# ES: an alpha (learning_rate) x sigma grid; GRPO: beta 0 and beta > 0; seeds 0 and 1, one CPU thread each.
# Then every final model is evaluated on the held-out prompts with its per-token KL (k3) to the base model
# and `contains_solution` beside the reward, and bench/pareto.py draws the reward-vs-KL plot and the table.
#   bash bench/conciseness_pareto.sh       # runs only what is missing (re-run to resume)
set -euo pipefail
RUNS=${RUNS:-runs/conciseness_pareto}
SEEDS=${SEEDS:-"0 1"}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
evotune sweep examples/conciseness.yaml --output "$RUNS/es" --seeds $SEEDS --set iterations=10 --set eval_every=0 \
  --grid learning_rate=2e-3,4e-3,8e-3 --grid sigma=1e-3,2e-3
evotune sweep examples/grpo_conciseness.yaml --command grpo --output "$RUNS/grpo" --seeds $SEEDS \
  --set eval_every=0 --grid beta=0.0,0.04
models=()
for run in "$RUNS"/es/*/seed* "$RUNS"/grpo/*/seed*; do models+=(--model "$run"); done
python bench/eval_tasks.py --task conciseness --num-eval 64 --max-new-tokens 32 --num-samples 0 --dtype float32 \
  --kl-reference smollm2-135m-instruct --name eval_conciseness_pareto "${models[@]}"
python bench/pareto.py bench/results/eval_conciseness_pareto.json --output bench/results/conciseness_pareto
