#!/usr/bin/env bash
# ES (full parameters) vs ESSA (svd_lora + CMA-ES after LoRA SFT) vs GRPO (TRL, LoRA) on
# SmolLM2-135M-Instruct, CPU, 2,560 sampled training completions per run, seeds 0 and 1,
# on arithmetic and conciseness; then `evotune compare` per task into bench/results/.
#   bash bench/compare_methods.sh            # runs only what is missing (re-run to resume)
# Run nothing else on the machine meanwhile: the comparison is also per wall-clock second.
set -euo pipefail
RUNS=${RUNS:-runs/compare}
SEEDS=${SEEDS:-"0 1"}
done_run() { [ -f "$1/final/config.json" ] || [ -f "$1/final/adapter_config.json" ] || [ -f "$1/final/model.safetensors" ]; }
train() { local dir=$1; shift; done_run "$dir" || { rm -rf "$dir"; evotune train "$@" --output-dir "$dir"; }; }
grpo() { local dir=$1; shift; done_run "$dir" || { rm -rf "$dir"; evotune grpo "$@" --output-dir "$dir"; }; }
sft() { local dir=$1; shift; [ -f "$dir/adapter/adapter_config.json" ] || { rm -rf "$dir"; evotune sft "$@" --output-dir "$dir"; }; }

for seed in $SEEDS; do  # arithmetic: 5 ES iterations x 16 x 32 = 2,560
  train "$RUNS/arithmetic/es-seed$seed" examples/arithmetic.yaml --set seed=$seed --set iterations=5 --set eval_every=1
  sft "$RUNS/arithmetic/sft-seed$seed" examples/sft_arithmetic.yaml --set seed=$seed
  train "$RUNS/arithmetic/essa-seed$seed" examples/essa_arithmetic.yaml --set seed=$seed \
    --set adapter="$RUNS/arithmetic/sft-seed$seed/adapter" --set population_size=16 --set iterations=5 --set eval_every=1
done
for seed in $SEEDS; do  # 40 steps x 8 x 8 = 2,560
  grpo "$RUNS/arithmetic/grpo-seed$seed" examples/grpo_arithmetic.yaml --set seed=$seed --set iterations=40 \
    --set eval_every=10 --set checkpoint_every=20 --set learning_rate=1e-4 --set temperature=0.7 --set dtype=bfloat16
done
for seed in $SEEDS; do  # conciseness: 10 ES iterations x 16 x 16 = 2,560
  train "$RUNS/conciseness/es-seed$seed" examples/conciseness.yaml --set seed=$seed --set iterations=10 --set eval_every=2
  sft "$RUNS/conciseness/sft-seed$seed" examples/sft_conciseness.yaml --set seed=$seed
  train "$RUNS/conciseness/essa-seed$seed" examples/essa_conciseness.yaml --set seed=$seed \
    --set adapter="$RUNS/conciseness/sft-seed$seed/adapter"
done
for seed in $SEEDS; do
  grpo "$RUNS/conciseness/grpo-seed$seed" examples/grpo_conciseness.yaml --set seed=$seed
done
evotune compare "$RUNS"/arithmetic/{es,essa,grpo}-seed* --metric eval/accuracy --target 0.15 --output bench/results/compare_arithmetic
evotune compare "$RUNS"/conciseness/{es,essa,grpo}-seed* --metric eval/reward --target -45 --output bench/results/compare_conciseness
