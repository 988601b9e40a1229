"""`retention_tasks` on the vLLM backend (full-parameter ES, the engine's own weights): the same retain/ metrics as
the same run on the hf backend (fp32: the same greedy completions), without the KL (`retention_kl: false`)."""

from __future__ import annotations

import json

import pytest

from helpers import ENGINE_CORES, requires_vllm, save_vllm_tiny_model, start_engine, stop_engine

from evotune.config import TrainConfig
from evotune.trainer import Trainer

pytestmark = requires_vllm


# CI: the engine core in its own process, as on CUDA; the in-process shape with the slow tests (its engine paths
# are in CI through test_vllm_engine*.py, and retention's own code does not depend on the shape)
@pytest.mark.parametrize("engine_core", [pytest.param(core, marks=pytest.mark.slow) if core == "in_process"
                                         else core for core in ENGINE_CORES])
def test_vllm_run_logs_the_hf_runs_retention_metrics(engine_core, tiny_model_dir, tmp_path):
    model_dir = save_vllm_tiny_model(str(tmp_path / "model"), tiny_model_dir)
    values = dict(model=model_dir, task="conciseness", population_size=4, antithetic=True, sigma=0.05,
                  learning_rate=0.05, iterations=2, batch_size=2, max_new_tokens=6, num_eval=2, eval_every=1,
                  checkpoint_every=2, dtype="float32", noise="rademacher", report_to=[], seed=0,
                  retention_tasks=["ifeval", "countdown"], retention_num_eval=6, retention_kl=False)
    engine = start_engine(model_dir, engine_core)
    try:
        Trainer(TrainConfig(**values, backend="vllm"), tmp_path / "vllm", backend=engine).train()
    finally:
        stop_engine(engine)
    Trainer(TrainConfig(**values), tmp_path / "hf").train()
    runs = {}
    for name in ("vllm", "hf"):
        records = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        runs[name] = [{key: value for key, value in record.items() if key.startswith("retain/")}
                      for record in records if "eval/reward" in record]
    assert len(runs["vllm"]) == 3 and "retain/ifeval/reward" in runs["vllm"][-1]
    assert not any(key.endswith("/kl") for record in runs["vllm"] for key in record)
    assert runs["vllm"] == runs["hf"]
