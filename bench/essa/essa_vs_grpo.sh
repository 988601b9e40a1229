#!/usr/bin/env bash
# ESSA's claim in small form (arXiv 2507.04453): from the same SFT adapter, does the evolution stage
# (CMA-ES over the adapter's singular values) add accuracy, and does it beat GRPO continuing the same
# adapter at equal training time? 2-digit addition, SmolLM2-135M-Instruct, seeds 0 and 1, held-out n=512,
# one CPU thread per run, BUDGET seconds of training per method (evaluation excluded).
#   bash bench/essa/essa_vs_grpo.sh        # runs only what is missing (re-run to resume)
# The ESSA settings are fixed before any run (no tuning on the held-out set): relative offsets
# (sigma is a fraction of each singular value), sigma 0.2, population 48 with 8 prompts per member,
# the whole population in one batched generate.
#   TUNED="--set cma_diagonal=true" bash bench/essa/essa_vs_grpo.sh   # adds an ESSA arm (essa_tuned-seedS) with the
#                       levers bench/essa/essa_levers.sh chose on the validation split, scored on the same test set
set -euo pipefail
RUNS=${RUNS:-runs/essa_vs_grpo}
SEEDS=${SEEDS:-"0 1"}
BUDGET=${BUDGET:-600}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
done_run() { [ -f "$1/final/adapter_config.json" ]; }
# essa DIR [--set KEY=VALUE ...]: the ESSA arm from this seed's SFT adapter (resumed if interrupted)
essa() { local run=$1; shift; done_run "$run" && return
  if [ -d "$run/checkpoint" ]; then evotune train --output-dir "$run" --resume
  else rm -rf "$run"; evotune train examples/essa_arithmetic.yaml --output-dir "$run" --set seed=$seed \
    --set adapter="$sft/adapter" --set svd_offsets=relative --set sigma=0.2 --set population_size=48 \
    --set batch_size=8 --set population_batch_size=48 --set num_eval=512 --set iterations=1000 \
    --set max_training_seconds=$BUDGET --set eval_every=8 --set checkpoint_every=4 "$@"; fi; }
for seed in $SEEDS; do
  sft="$RUNS/sft-seed$seed"
  [ -f "$sft/adapter/adapter_config.json" ] || { rm -rf "$sft"; evotune sft examples/sft_arithmetic.yaml \
    --set seed=$seed --set num_eval=512 --output-dir "$sft"; }
  essa "$RUNS/essa-seed$seed"
  [ -z "${TUNED:-}" ] || essa "$RUNS/essa_tuned-seed$seed" $TUNED
  grpo="$RUNS/grpo-seed$seed"
  done_run "$grpo" || { rm -rf "$grpo"; evotune grpo bench/configs/grpo_arithmetic_10tok.yaml --output-dir "$grpo" \
    --set seed=$seed --set adapter="$sft/adapter" --set num_eval=512 --set iterations=1000 \
    --set max_training_seconds=$BUDGET --set eval_every=8 --set checkpoint_every=1000 --set method=sft-grpo; }
done
evotune compare "$RUNS"/essa-seed* "$RUNS"/grpo-seed* --metric eval/accuracy --budget-time "$BUDGET" \
  --output-dir bench/results/essa/compare_essa_vs_grpo_arithmetic
python -m bench.learning.stage_table --runs "$RUNS" --methods essa ${TUNED:+essa_tuned} grpo --budget-time "$BUDGET" \
  --num-eval 512 --name stages_essa_vs_grpo_arithmetic --study essa
[ -z "${TUNED:-}" ] || evotune compare "$RUNS"/essa_tuned-seed* "$RUNS"/grpo-seed* --metric eval/accuracy \
  --budget-time "$BUDGET" --output-dir bench/results/essa/compare_essa_tuned_vs_grpo_arithmetic
