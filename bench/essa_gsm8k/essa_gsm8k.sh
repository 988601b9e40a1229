#!/usr/bin/env bash
# ESSA's headline task in CPU form (arXiv 2507.04453 reports GSM8K): SmolLM2-135M-Instruct, LoRA SFT on
# GSM8K's worked solutions (train.jsonl; the step-by-step text ending in \boxed{}), then from that same
# adapter BUDGET seconds each of ESSA (CMA-ES over its singular values, relative offsets) and GRPO
# (continuing the adapter), held-out accuracy on test.jsonl (n=200, math-verify), seeds 0 and 1,
# one CPU thread per run. Long completions make every iteration slow on a CPU: the budget is small.
# Measured (seeds 0 / 1, bench/results/essa_gsm8k/stages_essa_gsm8k.json): base 1.5%, SFT 1.5% / 1.5% (boxed answers 0% ->
# 72% / 67%), ESSA 1.5% / 1.5%, GRPO 1.0% / 1.0%: SmolLM2-135M is at the floor of GSM8K, rewards are ~all zero.
#   bash bench/essa_gsm8k/essa_gsm8k.sh        # runs only what is missing (re-run to resume)
set -euo pipefail
RUNS=${RUNS:-runs/essa_gsm8k}
DATA=${DATA:-../shared/data/gsm8k}
SEEDS=${SEEDS:-"0 1"}
BUDGET=${BUDGET:-900}
TOKENS=${TOKENS:-192}
SFT_ROWS=${SFT_ROWS:-400}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# sft reads the task's files from task_args; train and grpo take them as keys of their own
common=(--set task=gsm8k --set num_eval=200 --set max_new_tokens=$TOKENS)
sft_task=("${common[@]}" --set "task_args={dataset: $DATA/train.jsonl, eval_dataset: $DATA/test.jsonl}")
task=("${common[@]}" --set dataset=$DATA/train.jsonl --set eval_dataset=$DATA/test.jsonl)
done_run() { [ -f "$1/final/adapter_config.json" ]; }
for seed in $SEEDS; do
  sft="$RUNS/sft-seed$seed"
  [ -f "$sft/adapter/adapter_config.json" ] || { rm -rf "$sft"; evotune sft examples/sft_arithmetic.yaml --output-dir "$sft" \
    --set seed=$seed "${sft_task[@]}" --set num_train=$SFT_ROWS --set learning_rate=5e-4; }
  essa="$RUNS/essa-seed$seed"
  done_run "$essa" || {
    if [ -d "$essa/checkpoint" ]; then evotune train --output-dir "$essa" --resume
    else rm -rf "$essa"; evotune train examples/essa_arithmetic.yaml --output-dir "$essa" --set seed=$seed "${task[@]}" \
      --set adapter="$sft/adapter" --set svd_offsets=relative --set sigma=0.2 --set population_size=24 \
      --set batch_size=4 --set population_batch_size=24 --set iterations=1000 --set max_training_seconds=$BUDGET \
      --set eval_every=0 --set checkpoint_every=2; fi; }
  grpo="$RUNS/grpo-seed$seed"
  done_run "$grpo" || { rm -rf "$grpo"; evotune grpo bench/configs/grpo_arithmetic_10tok.yaml --output-dir "$grpo" --set seed=$seed \
    "${task[@]}" --set adapter="$sft/adapter" --set batch_size=2 --set num_generations=4 --set iterations=1000 \
    --set max_training_seconds=$BUDGET --set eval_every=0 --set checkpoint_every=1000 --set method=sft-grpo; }
done
python -m bench.learning.stage_table --runs "$RUNS" --methods essa grpo --budget-time "$BUDGET" --num-eval 200 --name stages_essa_gsm8k --study essa_gsm8k
evotune compare "$RUNS"/essa-seed* "$RUNS"/grpo-seed* --metric eval/accuracy --budget-time "$BUDGET" \
  --output-dir bench/results/essa_gsm8k/compare_essa_gsm8k
