#!/usr/bin/env bash
# The GPU check, for whenever a GPU machine is lent (the device tool's `status` says whether it is).
#
# The GPU machine has no network, and a device call takes at most 64 MiB along, the working tree included. So,
# on this machine first:
#   bash bench/gpu_check/gpu_check.sh prepare    # .gpu_carry/call1..N (each within the limit, checked), and the
#                                                # device calls to make, back to back, printed as JSON
# then the printed calls: calls 1..N-1 leave a part of the model in /tmp on the GPU machine; the last one runs
#   bash bench/gpu_check/gpu_check.sh install    # wheels into /tmp/evotune_site, the model reassembled (sha256)
#   bash bench/gpu_check/gpu_check.sh run        # the measurement (bench/gpu_check/check.py), one timeout
#   bash bench/gpu_check/gpu_check.sh scaling    # or the scaling study's GPU cells (bench/scaling/), one timeout
# and, here, before spending a lent GPU's minutes (no device needed):
#   bash bench/gpu_check/gpu_check.sh plan ["NVIDIA H100 80GB HBM3"]   # each row: carried, measured or skipped
# `run` writes $OUT/gpu_check.json (bench/results/gpu_check.json without $OUT), rewritten after every step; rows
# bench/results/gpu_check/gpu_check_*.json measured on a card of the same name are carried, not measured again.
# It imports evotune from the installed target only (PYTHONPATH, and the checkout's src/ is not on the path).
# DEVICE=cpu MODEL=<dir> with tiny settings is the dry run CI does (test_gpu_check.py in tests/bench/).
set -euo pipefail
cd "$(dirname "$0")/../.."
SITE=${SITE:-/tmp/evotune_site}
case "${1:-run}" in
  prepare)
    python3 bench/gpu_check/carry.py prepare ${CARRY_ARGS:-} ;;
  install)
    python3 bench/gpu_check/carry.py install --target "$SITE" ${CARRY_ARGS:-}
    PYTHONPATH="$SITE" python3 -c "import evotune, cma, gguf, math_verify, peft, transformers
import importlib.util as u
print('installed: evotune', evotune.__version__, evotune.__file__, '| transformers', transformers.__version__,
      '| trl', 'yes' if u.find_spec('trl') else 'no')" ;;
  plan)
    shopt -s nullglob
    previous=(bench/results/gpu_check/gpu_check_*.json)
    python3 -m bench.gpu_check.check --plan --card "${2:-NVIDIA H200}" --budget-seconds "${BUDGET:-500}" \
      --previous "${previous[@]}" ${GPU_CHECK_ARGS:-} ;;
  run)
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    DEVICE=${DEVICE:-cuda}
    OUTPUT=${OUTPUT:-${OUT:-bench/results}/gpu_check.json}
    WORK=${WORK:-$(mktemp -d)/runs}
    extra=()
    if [ -n "${MODEL:-}" ]; then extra+=(--model "$MODEL"); fi
    # rows measured before on a card of the same name are kept, not measured again (check.py --previous)
    shopt -s nullglob
    previous=(bench/results/gpu_check/gpu_check_*.json)
    if [ ${#previous[@]} -gt 0 ]; then extra+=(--previous "${previous[@]}"); fi
    timeout "${TIMEOUT:-480}" python3 -m bench.gpu_check.check --device "$DEVICE" --output "$OUTPUT" \
      --work-dir "$WORK" "${extra[@]}" ${GPU_CHECK_ARGS:-} ;;
  scaling)
    # the scaling study's GPU cells (bench/scaling/): bfloat16, the shapes a 24 GiB CPU machine cannot hold, the
    # arms that may fit; one file per cell under $OUT/scaling/bfloat16/, copied into bench/results/scaling/ after
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    timeout "${TIMEOUT:-480}" python3 -m bench.scaling.run --results "${OUT:-bench/results}/scaling" \
      --cache /tmp/evotune_scaling_models --work /tmp/evotune_scaling_work \
      --shapes ${SCALING_SHAPES:-Qwen2.5-3B Qwen2.5-7B Llama-3-8B} \
      --arms ${SCALING_ARMS:-generation lowrank full_es_batched es_lora grpo_lora grpo_full} ;;
  *) echo "usage: bash bench/gpu_check/gpu_check.sh [prepare|install|plan|run|scaling]" >&2; exit 2 ;;
esac
