#!/usr/bin/env bash
# ES (full parameters) vs ESSA (svd_lora + CMA-ES after LoRA SFT) vs GRPO (TRL, LoRA) on
# SmolLM2-135M-Instruct, CPU, 2,560 sampled training completions per run, seeds 0 and 1,
# on arithmetic and conciseness; then `evotune compare` per task into bench/results/.
#   bash bench/es_vs_grpo/compare_methods.sh            # runs only what is missing (re-run to resume)
# Run nothing else on the machine meanwhile: the comparison is also per wall-clock second.
# Stage 1: every method at 2,560 sampled training completions per run.
set -euo pipefail
RUNS=${RUNS:-runs/compare}
SEEDS=${SEEDS:-"0 1"}
done_run() { [ -f "$1/final/config.json" ] || [ -f "$1/final/adapter_config.json" ] || [ -f "$1/final/model.safetensors" ]; }
train() { local dir=$1; shift; done_run "$dir" || { rm -rf "$dir"; evotune train "$@" --output-dir "$dir"; }; }
grpo() { local dir=$1; shift; done_run "$dir" || { rm -rf "$dir"; evotune grpo "$@" --output-dir "$dir"; }; }
sft() { local dir=$1; shift; [ -f "$dir/adapter/adapter_config.json" ] || { rm -rf "$dir"; evotune sft "$@" --output-dir "$dir"; }; }

for seed in $SEEDS; do  # arithmetic: 5 ES iterations x 16 x 32 = 2,560
  train "$RUNS/arithmetic/es-seed$seed" bench/configs/arithmetic_10tok.yaml --set seed=$seed --set iterations=5 --set eval_every=1
  sft "$RUNS/arithmetic/sft-seed$seed" examples/sft_arithmetic.yaml --set seed=$seed
  train "$RUNS/arithmetic/essa-seed$seed" examples/essa_arithmetic.yaml --set seed=$seed \
    --set adapter="$RUNS/arithmetic/sft-seed$seed/adapter" --set population_size=16 --set iterations=5 --set eval_every=1
done
for seed in $SEEDS; do  # 40 steps x 8 x 8 = 2,560
  grpo "$RUNS/arithmetic/grpo-seed$seed" bench/configs/grpo_arithmetic_10tok.yaml --set seed=$seed --set iterations=40 \
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
# Stage 2: the ES runs continue to 20 iterations (10,240 / 5,120 samples; --resume is exact), so the
# time axis shows what ES reaches in the wall-clock time GRPO needs for 2,560 samples.
for seed in $SEEDS; do
  [ "$(tail -n 1 "$RUNS/arithmetic/es-seed$seed/metrics.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["iteration"])')" = 20 ] ||
    evotune train bench/configs/arithmetic_10tok.yaml --output-dir "$RUNS/arithmetic/es-seed$seed" --resume --set seed=$seed \
      --set iterations=20 --set eval_every=1
  [ "$(tail -n 1 "$RUNS/conciseness/es-seed$seed/metrics.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["iteration"])')" = 20 ] ||
    evotune train examples/conciseness.yaml --output-dir "$RUNS/conciseness/es-seed$seed" --resume --set seed=$seed \
      --set iterations=20 --set eval_every=2
done
# GRPO's learning-rate sensitivity: the papers' full-parameter 1e-5 on the same LoRA run (seed 0).
grpo "$RUNS/arithmetic-lr/grpo-lr1e-5-seed0" bench/configs/grpo_arithmetic_10tok.yaml --set seed=0 --set iterations=40 \
  --set eval_every=10 --set checkpoint_every=20 --set learning_rate=1e-5 --set temperature=0.7 --set dtype=bfloat16 \
  --set method=grpo-lr1e-5

evotune compare "$RUNS"/arithmetic/{es,essa,grpo}-seed* --metric eval/accuracy --target 0.15 --budget 2560 \
  --output-dir bench/results/es_vs_grpo/compare_arithmetic
evotune compare "$RUNS"/conciseness/{es,essa,grpo}-seed* --metric eval/reward --target -45 --budget 2560 \
  --output-dir bench/results/es_vs_grpo/compare_conciseness
# conciseness rewards length only: is the answer still in the (shorter) completion?
evotune compare "$RUNS"/conciseness/{es,essa,grpo}-seed* --metric eval/contains_solution --budget 2560 \
  --output-dir bench/results/es_vs_grpo/compare_conciseness_correctness
evotune compare "$RUNS"/arithmetic/grpo-seed0 "$RUNS"/arithmetic-lr/grpo-lr1e-5-seed0 --metric eval/accuracy \
  --output-dir bench/results/es_vs_grpo/compare_grpo_learning_rate_arithmetic
