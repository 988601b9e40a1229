#!/usr/bin/env bash
# ESSA's quantization table in small form (arXiv 2507.04453: INT4/INT8 bases close to BF16 at a fraction of the
# memory): one SFT adapter trained on a float32 base, then ESSA (CMA-ES over its singular values) from that same
# adapter on a float32, INT8 and INT4 base with the same CMA-ES budget (iterations x population), 2 seeds, held-out
# n=512 on 2-digit addition, SmolLM2-135M-Instruct, one CPU thread per run. Also the SFT adapter alone on each base
# (what quantization costs before evolution, and whether ESSA wins it back).
#   bash bench/essa_quantization/essa_quantization.sh     # runs only what is missing (re-run to resume; finished runs are skipped)
# Per precision and seed the table (bench/essa_quantization/quantization_table.py -> bench/results/$NAME.json) gives the SFT adapter's
# accuracy on that base, ESSA's accuracy at its start and end, peak RSS and seconds per ESSA iteration.
# The settings are examples/essa_arithmetic.yaml's (absolute offsets, sigma 0.02, alpha 0.5, 32 prompts per member),
# fixed before any run. The smoke form that checks the script end to end in a few minutes:
#   RUNS=runs/essa_quantization_smoke SEEDS=0 ITERATIONS=1 POPULATION=4 NUM_EVAL=16 BATCH_SIZE=4 \
#     NAME=essa_quantization_smoke SFT_ARGS="--set num_train=16 --set max_steps=2" bash bench/essa_quantization/essa_quantization.sh
set -euo pipefail
RUNS=${RUNS:-runs/essa_quantization}
SEEDS=${SEEDS:-"0 1"}
ITERATIONS=${ITERATIONS:-15}
POPULATION=${POPULATION:-24}
POPULATION_BATCH=${POPULATION_BATCH:-4}   # candidates per batched generate (x BATCH_SIZE rows), the same for all
BATCH_SIZE=${BATCH_SIZE:-32}
NUM_EVAL=${NUM_EVAL:-512}
# training and held-out budget alike (ESSA's start = the SFT adapter's own eval, a cross-check); the SFT adapter
# scored the same at 6, 10, 16 and 32 new tokens (float32 base; the bare base model needs 16: it is not evaluated here)
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-10}
TOKEN_CHECK=${TOKEN_CHECK:-"6 32"}         # and at 10 and 32 on the INT8 and INT4 bases (seed 0, n=512)
NAME=${NAME:-essa_quantization}
SFT_ARGS=${SFT_ARGS:-}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$RUNS"
# bitsandbytes quantizes a save_pretrained directory, not the built-in GGUF: export it once (float32); every
# stage, float32 runs included, uses this same directory.
base="$RUNS/smollm2-135m-instruct-hf"
[ -f "$base/config.json" ] || { rm -rf "$base"; evotune export smollm2-135m-instruct --output-dir "$base"; }
# evaluate MODEL QUANTIZATION TOKENS OUTPUT SEED (skipped when OUTPUT exists: eval writes it only at the end)
evaluate() { [ -f "$4" ] || evotune eval --model "$1" --quantization "$2" --task arithmetic --num-eval "$NUM_EVAL" \
  --max-new-tokens "$3" --dtype float32 --device cpu --seed "$5" --output "$4"; }
for seed in $SEEDS; do
  sft="$RUNS/sft-seed$seed"
  [ -f "$sft/adapter/adapter_config.json" ] || { rm -rf "$sft"; evotune sft examples/sft_arithmetic.yaml \
    --set model="$(realpath "$base")" --set seed=$seed --set num_eval=$NUM_EVAL \
    --set max_new_tokens=$MAX_NEW_TOKENS $SFT_ARGS --output-dir "$sft"; }
  for quantization in none int8 int4; do
    precision=${quantization/none/float32}
    evaluate "$sft/adapter" "$quantization" "$MAX_NEW_TOKENS" "$sft/eval-$precision.json" "$seed"
    # the token budget check: the SFT adapter on this base at growing max_new_tokens (a quantized base may
    # answer at more length than the float32 one)
    for tokens in $TOKEN_CHECK; do
      evaluate "$sft/adapter" "$quantization" "$tokens" "$sft/eval-$precision-tokens$tokens.json" "$seed"; done
    run="$RUNS/essa-$precision-seed$seed"
    [ -f "$run/final/adapter_config.json" ] && continue
    if [ -d "$run/checkpoint" ]; then evotune train --output-dir "$run" --resume
    else rm -rf "$run"; evotune train examples/essa_arithmetic.yaml --output-dir "$run" --set model="$(realpath "$base")" \
      --set adapter="$(realpath "$sft/adapter")" --set quantization=$quantization --set seed=$seed \
      --set iterations=$ITERATIONS --set population_size=$POPULATION --set population_batch_size=$POPULATION_BATCH \
      --set batch_size=$BATCH_SIZE --set num_eval=$NUM_EVAL --set max_new_tokens=$MAX_NEW_TOKENS \
      --set eval_max_new_tokens=$MAX_NEW_TOKENS --set dtype=float32 \
      --set device=cpu --set eval_every=0 --set checkpoint_every=1 --set report_to=[]; fi
  done
done
python -m bench.essa_quantization.quantization_table --runs "$RUNS" --seeds $SEEDS --num-eval "$NUM_EVAL" \
  --max-new-tokens "$MAX_NEW_TOKENS" --token-check $TOKEN_CHECK --name "$NAME"
