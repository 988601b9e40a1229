"""What crosses vLLM's engine-core boundary. On CUDA (and with `engine_core: separate_process`) the engine
core is another process and vLLM carries collective_rpc's arguments and results through msgpack with no type
information: a tensor comes back as nested lists. Every RPC evotune makes is recorded during a real run
(train, checkpoint, resume, final/, checksum) and put through vLLM's own MsgpackEncoder/MsgpackDecoder:
each must come back equal, so only plain values may cross."""

from __future__ import annotations

import torch
from helpers import requires_vllm, save_vllm_tiny_model, start_engine, stop_engine

from evotune.config import TrainConfig
from evotune.trainer import Trainer

pytestmark = requires_vllm


def plain(value):
    """msgpack has no tuple: compare tuples as lists."""
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def config(model_dir: str, **overrides) -> TrainConfig:
    values = dict(model=model_dir, backend="vllm", task="conciseness", population_size=4, antithetic=True, sigma=0.05,
                  learning_rate=0.05, iterations=2, batch_size=2, max_new_tokens=4, num_eval=2, eval_every=0,
                  checkpoint_every=1, dtype="float32", noise="rademacher", report_to=[], seed=0)
    values.update(overrides)
    return TrainConfig(**values)


def test_every_rpc_survives_vllms_msgpack(tiny_model_dir, tmp_path):
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    from evotune.backends.vllm_worker import EngineWeightsExtension

    model_dir = save_vllm_tiny_model(str(tmp_path / "model"), tiny_model_dir)
    engine = start_engine(model_dir)  # in process, so the calls can be recorded here
    calls, rpc = [], engine.rpc

    def recording(method, *args):
        results = rpc(method, *args)
        calls.append((method, args, results))
        return results

    engine.rpc = recording
    try:
        Trainer(config(model_dir), tmp_path / "run", backend=engine).train()  # init, apply, update, save, final/
        resumed = Trainer(config(model_dir, iterations=3), tmp_path / "run", resume=True, backend=engine)  # load
        resumed.train()
        resumed.space.checksum()
        resumed.space.transfer_bytes()
        resumed.space.noise_fingerprint()
    finally:
        engine.rpc = rpc
        stop_engine(engine)

    # `evotune eval` of the vLLM run's checkpoint: HF tensors, loaded on the hf backend, = its final/
    from evotune.runs.loading import load_for_eval

    checkpoint = load_for_eval(str(tmp_path / "run" / "checkpoint"), "float32", "cpu")
    final = dict(load_for_eval(str(tmp_path / "run"), "float32", "cpu").model.named_parameters())
    assert all(torch.equal(param, final[name]) for name, param in checkpoint.model.named_parameters())

    made = {method for method, _, _ in calls}
    assert made == {name for name in dir(EngineWeightsExtension) if name.startswith("evotune_")}
    encoder, decoder = MsgpackEncoder(), MsgpackDecoder()
    for method, args, results in calls:
        for value in (args, results):
            assert decoder.decode(encoder.encode(value)) == plain(value), method

    # why the protocol is plain values only: a tensor does not survive the trip
    crossed = decoder.decode(encoder.encode({"weight": torch.ones(2, 3)}))["weight"]
    assert not isinstance(crossed, torch.Tensor)
