"""Greedy decoding without a host sync per new token (backends/decoding.py): the same tokens as transformers' own
greedy loop, and, with the stop check spaced as on an accelerator, host syncs that do not grow with max_new_tokens
(one read per STOP_CHECK_EVERY steps), where generate's own loop reads the device twice per step."""

from __future__ import annotations

import pytest
import torch
from helpers import POPULATION_ROWS as ROWS
from torch.utils._python_dispatch import TorchDispatchMode

from evotune.backends import HFBackend, decoding
from evotune.backends.hf import render_prompt
from evotune.spaces import FullParameterSpace
from evotune.strategies import OpenES

pytestmark = pytest.mark.skipif(not decoding.supported(), reason="greedy_decode needs transformers 5")

PROMPTS = [row["prompt"] for row in ROWS]  # 4 prompts of different token lengths: a left-padded batch
MAX_NEW_TOKENS = 20


@pytest.fixture
def backend(tiny_model_dir):
    """The tiny model in float32 with its weights shaken (seeded) so that rows emit varied tokens, not one repeated."""
    backend = HFBackend.load(tiny_model_dir, dtype="float32", shared_prefix=False)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in backend.model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return backend


def generate_ids(backend: HFBackend, max_new_tokens: int, **extra) -> torch.Tensor:
    """(rows, prompt + new) greedy ids of PROMPTS as one left-padded batch."""
    batch = backend._encode(tuple(render_prompt(backend.tokenizer, prompt) for prompt in PROMPTS))
    return backend.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, temperature=None,
                                  top_p=None, top_k=None, pad_token_id=backend.tokenizer.pad_token_id, **extra)


def stop_early(backend: HFBackend) -> int:
    """Make tokens the rows emit early end-of-sequence tokens: row r stops at new token 2 + 3 r at the latest, so
    rows stop at different steps and the whole batch before MAX_NEW_TOKENS. Returns the prompt width."""
    ids = generate_ids(backend, MAX_NEW_TOKENS)
    width = ids.shape[1] - MAX_NEW_TOKENS
    backend.model.generation_config.eos_token_id = [int(ids[row, width + 2 + 3 * row]) for row in range(len(PROMPTS))]
    return width


@pytest.fixture
def accelerator_checks(monkeypatch):
    """On this CPU, the stop check as on an accelerator: every STOP_CHECK_EVERY steps, not every step."""
    monkeypatch.setattr(decoding, "stop_check_every", lambda device: decoding.STOP_CHECK_EVERY)


@pytest.mark.parametrize("check_every", [1, decoding.STOP_CHECK_EVERY])
@pytest.mark.parametrize("early_eos", [False, True])
def test_greedy_decode_gives_the_tokens_of_generate(backend, monkeypatch, early_eos, check_every):
    monkeypatch.setattr(decoding, "stop_check_every", lambda device: check_every)
    width = stop_early(backend) if early_eos else None
    reference = generate_ids(backend, MAX_NEW_TOKENS)
    ids = generate_ids(backend, MAX_NEW_TOKENS, custom_generate=decoding.greedy_decode)
    assert torch.equal(ids, reference)
    if early_eos:  # the case this tests: rows end at different steps, the batch before max_new_tokens
        assert reference.shape[1] - width < MAX_NEW_TOKENS
        # and between two stop checks: greedy_decode ran steps past the end and had to cut them off
        assert (reference.shape[1] - width) % decoding.STOP_CHECK_EVERY != 0
        padding = (reference[:, width:] == backend.tokenizer.pad_token_id).sum(dim=1)  # (rows,) after each EOS
        assert len(set(padding.tolist())) > 1


@pytest.mark.usefixtures("accelerator_checks")
@pytest.mark.parametrize("shared_prefix", [False, True])
def test_backend_completions_unchanged(backend, monkeypatch, shared_prefix):
    stop_early(backend)
    backend.shared_prefix = shared_prefix
    completions = backend.generate(PROMPTS, MAX_NEW_TOKENS)
    monkeypatch.setattr(decoding, "supported", lambda: False)  # generate's own loop: the path before
    assert completions == backend.generate(PROMPTS, MAX_NEW_TOKENS)
    assert len(set(completions)) > 1


class HostSyncs(TorchDispatchMode):
    """Counts operations that make the host wait for the device on CUDA: reading a value (.item(), bool(), int(),
    `if tensor`: aten.item, _local_scalar_dense, is_nonzero), ops whose output size depends on values, and copies to the
    host (.tolist(), .cpu(), .numpy(), which on a CPU tensor reach no dispatch, so they are wrapped)."""

    OPERATIONS = {"item", "_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "unique", "_unique2",
                  "equal"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, function, types, args=(), kwargs=None):
        self.count += function.__name__.split(".")[0] in self.OPERATIONS
        return function(*args, **(kwargs or {}))

    def __enter__(self):
        self.originals = {name: getattr(torch.Tensor, name) for name in ("tolist", "cpu", "numpy")}
        for name, original in self.originals.items():
            setattr(torch.Tensor, name, self.counted(original))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self.originals.items():
            setattr(torch.Tensor, name, original)
        return super().__exit__(*exc)

    def counted(self, original):
        def method(tensor, *args, **kwargs):
            self.count += 1
            return original(tensor, *args, **kwargs)
        return method


def syncs(run, max_new_tokens: int) -> int:
    """Host syncs while run(max_new_tokens) generates."""
    with HostSyncs() as counter:
        run(max_new_tokens)
    return counter.count


@pytest.mark.usefixtures("accelerator_checks")
def test_host_syncs_do_not_grow_with_new_tokens(tiny_model_dir):
    backend = HFBackend.load(tiny_model_dir, dtype="float32", shared_prefix=False)
    backend.model.generation_config.eos_token_id = None  # no row stops: every count covers max_new_tokens steps
    space = FullParameterSpace(backend.model)
    stacked = space.candidate_factors(OpenES(population_size=2, sigma=0.05, seed=3).ask())  # (2, *shape) each
    short, long = 8, 8 + 4 * decoding.STOP_CHECK_EVERY
    plain = [syncs(lambda tokens: generate_ids(backend, tokens), tokens) for tokens in (short, long)]
    assert plain[1] - plain[0] >= 2 * (long - short)  # the counter sees generate's own two reads per step
    for run in (lambda tokens: backend.generate(PROMPTS, tokens),  # plain batch
                lambda tokens: backend.generate_population(PROMPTS, tokens, space.factors, stacked)):  # space full
        counts = [syncs(run, tokens) for tokens in (short, long)]
        assert counts[1] - counts[0] <= (long - short) // decoding.STOP_CHECK_EVERY  # one per STOP_CHECK_EVERY steps


def test_transformers_loop_switches_the_backend_to_generates_own_loop_and_back(backend):
    """The benches time the two loops side by side with this switch: inside it no custom_generate is passed."""
    assert backend._greedy()["custom_generate"] is decoding.greedy_decode
    with decoding.transformers_loop():
        assert "custom_generate" not in backend._greedy()
    assert backend._greedy()["custom_generate"] is decoding.greedy_decode
