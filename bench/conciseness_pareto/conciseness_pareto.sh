#!/usr/bin/env bash
# Qiu et al.'s reward-hacking check on conciseness (reward = -|len(completion) - len(solution)|): does ES
# reach the reward with less KL to the base model, and less loss of correctness, than GRPO?
# ES: an alpha (learning_rate) x sigma grid (env LEARNING_RATES, SIGMAS); GRPO: beta 0 and beta > 0; seeds 0 and 1, one CPU thread each.
# Then every final model is evaluated on the held-out prompts with its per-token KL (k3) to the base model
# and `contains_solution` beside the reward, and bench/conciseness_pareto/pareto.py draws the reward-vs-KL plot and the table.
#   bash bench/conciseness_pareto/conciseness_pareto.sh       # runs only what is missing (re-run to resume)
#   SEEDS=0 EVALUATE=0 bash bench/conciseness_pareto/conciseness_pareto.sh &  SEEDS=1 EVALUATE=0 bash bench/conciseness_pareto/conciseness_pareto.sh
#   SEEDS=0 EVALUATE=only bash bench/conciseness_pareto/conciseness_pareto.sh   # evaluate seed 0's runs (and SEEDS=1 ...)
# The stability study's small form (one ES setting, GRPO at beta 0, seeds 2-4 beside seeds 0-1 of the grid):
#   SEEDS="2 3 4" LEARNING_RATES=4e-3 SIGMAS=2e-3 BETAS=0.0 PARETO=0 bash bench/conciseness_pareto/conciseness_pareto.sh
# METHODS="es" or "grpo" trains one method only (e.g. ES on one core beside GRPO on the other, EVALUATE=0 both).
set -euo pipefail
RUNS=${RUNS:-runs/conciseness_pareto}
SEEDS=${SEEDS:-"0 1"}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# One thread makes an ES iteration of 16 x 16 prompts x 32 tokens take ~95 s here, so the runs are small:
# 10 iterations of 16 members x 8 prompts = 1,280 completions per ES run; GRPO gets the same 1,280
# (20 steps x 8 prompts x 8 completions).
ITERATIONS=${ITERATIONS:-10}
BATCH=${BATCH:-8}
LEARNING_RATES=${LEARNING_RATES:-4e-3,8e-3}
SIGMAS=${SIGMAS:-1e-3,2e-3}
GRPO_STEPS=${GRPO_STEPS:-20}
BETAS=${BETAS:-0.0,0.04}
# a GRPO step peaks at ~14 GB RSS here; 4 micro-batches give the same update (tests/test_grpo.py) with less
GRPO_ACCUMULATION=${GRPO_ACCUMULATION:-1}
EVALUATE=${EVALUATE:-1}
METHODS=${METHODS:-"es grpo"}
if [ "$EVALUATE" != only ] && [[ " $METHODS " == *" es "* ]]; then
evotune sweep examples/conciseness.yaml --output-dir "$RUNS/es" --seeds $SEEDS --set iterations=$ITERATIONS \
  --set batch_size=$BATCH --set eval_every=0 --set checkpoint_every=5 \
  --grid learning_rate=$LEARNING_RATES --grid sigma=$SIGMAS
fi
if [ "$EVALUATE" != only ] && [[ " $METHODS " == *" grpo "* ]]; then
evotune sweep examples/grpo_conciseness.yaml --command grpo --output-dir "$RUNS/grpo" --seeds $SEEDS \
  --set iterations=$GRPO_STEPS --set gradient_accumulation_steps=$GRPO_ACCUMULATION --set eval_every=0 --set checkpoint_every=10 --grid beta=$BETAS
fi
[ "$EVALUATE" = 0 ] && exit 0
# Each seed's runs are scored on that seed's held-out questions (conciseness splits its questions by seed, so
# another seed's held-out set overlaps these runs' training questions), beside the base model on the same set;
# one file per seed, so each seed's process can evaluate its own runs as soon as they are done.
for seed in $SEEDS; do
  models=()
  for run in "$RUNS"/es/*/seed$seed "$RUNS"/grpo/*/seed$seed; do models+=(--model "$run"); done
  python -m bench.learning.eval_tasks --task conciseness --seed $seed --num-eval 64 --max-new-tokens 32 --num-samples 0 \
    --dtype float32 --kl-reference smollm2-135m-instruct --name eval_conciseness_pareto_seed$seed --study conciseness_pareto "${models[@]}"
done
[ "${PARETO:-1}" = 0 ] && exit 0  # the stability runs are tabulated by bench/stability/stability.py, not drawn into the grid
python -m bench.conciseness_pareto.pareto bench/results/conciseness_pareto/eval_conciseness_pareto_seed{0,1}.json --output bench/results/conciseness_pareto
