"""report_to's loggers (TensorBoard, offline W&B, Trackio's local store), samples.jsonl and final/README.md
on a tiny real run: the logged keys are read back from what each tool wrote to disk."""

from __future__ import annotations

import glob
import json
import struct
import sys
from pathlib import Path

import pytest
import yaml
from helpers import front_matter, requires_trackio, requires_wandb, tiny_config

from evotune.callbacks import SamplesCallback
from evotune.errors import ConfigError
from evotune.tracking.loggers import build_loggers, read_logger_ids, samples_markdown
from evotune.trainer import Trainer

TRAIN_KEYS = {"reward_mean", "reward_std", "reward_max", "time_s", "samples_seen", "peak_rss_mib"}
EVAL_KEYS = {"eval/reward", "eval/accuracy"}


def run_tiny(model_dir: str, run: Path, report_to: list[str], **overrides) -> Trainer:
    """Arithmetic (so rewards and accuracy are both logged), 2 iterations, evaluated at 0, 1 and 2."""
    values = dict(task="arithmetic", iterations=2, eval_every=1, checkpoint_every=1, report_to=report_to)
    values.update(overrides)
    trainer = Trainer(tiny_config(model_dir, **values), run)
    trainer.train()
    return trainer


# ---- samples.jsonl and the model card, with TensorBoard ------------------------------------------------


def test_tensorboard_samples_and_model_card_on_a_real_run(tiny_model_dir, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    trainer = run_tiny(tiny_model_dir, run, ["tensorboard"])

    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert [row["iteration"] for row in samples] == [0] * 4 + [1] * 4 + [2] * 4  # log_samples: 4 per evaluation
    assert all(set(row) == {"iteration", "prompt", "completion", "reward"} for row in samples)
    first = trainer.task.eval_rows[:4]
    assert [row["prompt"] for row in samples[:4]] == [r["prompt"][-1]["content"] for r in first]  # same prompts
    last = samples[-4:]  # the rewards are the task's for these completions
    assert [row["reward"] for row in last] == list(trainer.task.rewards(first, [r["completion"] for r in last]))
    assert [row["completion"] for row in last] == trainer.last_completions[:4]

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    events.Reload()
    tags = events.Tags()
    assert TRAIN_KEYS | EVAL_KEYS <= set(tags["scalars"])
    assert [event.step for event in events.Scalars("eval/accuracy")] == [0, 1, 2]
    assert {"config/text_summary", "samples/text_summary"} <= set(tags["tensors"])
    assert [event.step for event in events.Tensors("samples/text_summary")] == [0, 1, 2]
    assert "population_size: 4" in events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert tags["images"] == ["curves"]

    card = (run / "final" / "README.md").read_text()
    meta = front_matter(card)
    assert meta["library_name"] == "transformers" and "evotune" in meta["tags"] and "es-at-scale" in meta["tags"]
    assert "base_model" not in meta  # a local directory is not a Hub id
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    before, after = records[0], records[-1]
    row = next(line for line in card.splitlines() if line.startswith("| reward |"))
    assert row.split("|")[2].strip() == f"{before['eval/reward']:.4g}"
    assert row.split("|")[3].strip() == f"{after['eval/reward']:.4g}"
    assert "after (iteration 2)" in card and "arxiv.org/abs/2509.24372" in card
    assert f"evotune train {run}/config.yaml --output-dir NEW_DIR" in card
    assert yaml.safe_load(card.split("```yaml\n")[1].split("```")[0]) == trainer.config.to_dict()


def test_samples_are_cut_back_to_the_checkpoint_on_resume(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps({"iteration": i, "prompt": "p", "completion": "c", "reward": 0.0}) + "\n"
                            for i in (0, 2, 4)) + '{"iteration": 6, "pro')  # torn by a kill

    class Resumed:
        output_dir = tmp_path

        class strategy:
            iteration = 2

    SamplesCallback().on_train_begin(Resumed())
    assert [json.loads(line)["iteration"] for line in path.read_text().splitlines()] == [0, 2]
    Resumed.strategy.iteration = 0  # a new run starts the file again
    SamplesCallback().on_train_begin(Resumed())
    assert path.read_text() == ""


def test_samples_markdown_escapes_cells():
    text = samples_markdown([{"iteration": 1, "prompt": "a|b", "completion": "x\ny", "reward": 0.25}])
    assert text.splitlines()[0] == "| iteration | prompt | completion | reward |"
    assert text.splitlines()[2] == "| 1 | a\\|b | x<br>y | 0.25 |"


def test_a_missing_logger_package_names_its_extra(tmp_path, monkeypatch):
    for package in ("wandb", "trackio"):
        monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
        with pytest.raises(ConfigError, match=rf"pip install 'evotune\[{package}\]'"):
            build_loggers([package], tmp_path)
    with pytest.raises(ConfigError, match="loggers are tensorboard, wandb, trackio"):
        build_loggers(["comet"], tmp_path)


# ---- Weights & Biases, offline -------------------------------------------------------------------------


def wandb_records(path: str):
    """The protobuf records of an offline run's .wandb file (W&B's LevelDB-style log: 7-byte header, then
    32 KiB blocks of chunks, each with a 7-byte header: crc32c, length, type FULL/FIRST/MIDDLE/LAST)."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    position, block, pending = 7, 32768, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if length == 0 and kind == 0:  # zero padding to the end of the block
            position += left
            continue
        chunk, position = data[position + 7:position + 7 + length], position + 7 + length
        if kind in (1, 2):
            pending = chunk
        else:
            pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def wandb_history(path: str) -> tuple[list[dict], dict]:
    """(history rows as {key: json value}, the run's config) of an offline run file."""
    rows, config = [], {}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
        elif kind == "run":
            config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
    return rows, config


@requires_wandb
def test_wandb_offline_run_logs_metrics_config_samples_and_curves(tiny_model_dir, tmp_path, monkeypatch):
    for name, value in {"WANDB_MODE": "offline", "WANDB_DIR": tmp_path / "wandb", "WANDB_SILENT": "true",
                        "WANDB_CACHE_DIR": tmp_path / "cache", "WANDB_DATA_DIR": tmp_path / "data",
                        "WANDB_CONFIG_DIR": tmp_path / "config", "WANDB_ARTIFACT_DIR": tmp_path / "artifacts",
                        "WANDB_PROJECT": "evotune-test"}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    (tmp_path / "wandb").mkdir()
    run = tmp_path / "run"
    run_tiny(tiny_model_dir, run, ["wandb"])

    ids = read_logger_ids(run)["wandb"]
    assert ids["project"] == "evotune-test" and ids["mode"] == "offline"
    files = glob.glob(str(tmp_path / "wandb" / "wandb" / f"offline-run-*-{ids['id']}" / f"run-{ids['id']}.wandb"))
    assert len(files) == 1
    rows, config = wandb_history(files[0])
    assert config["population_size"] == 4 and config["task"] == "arithmetic"
    metrics = [row for row in rows if "reward_mean" in row or "eval/reward" in row]
    assert [row["iteration"] for row in metrics] == [0, 1, 2]
    assert TRAIN_KEYS <= set(metrics[1]) and EVAL_KEYS <= set(metrics[0]) and EVAL_KEYS <= set(metrics[2])
    tables = [row for row in rows if row.get("samples/_type") == "table-file"]
    assert [(row["iteration"], row["samples/nrows"], row["samples/ncols"]) for row in tables] == [(0, 4, 4), (1, 4, 4),
                                                                                                  (2, 4, 4)]
    table = json.loads(Path(files[0]).parent.joinpath("files", tables[-1]["samples/path"]).read_text())
    assert table["columns"] == ["iteration", "prompt", "completion", "reward"]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert table["data"] == [[s["iteration"], s["prompt"], s["completion"], s["reward"]] for s in samples[-4:]]
    assert [row.get("iteration") for row in rows if row.get("curves/_type") == "image-file"] == [2]

    # --resume continues the same W&B run (its id is kept in DIR/loggers.json)
    Trainer(tiny_config(tiny_model_dir, task="arithmetic", iterations=3, eval_every=1, checkpoint_every=1,
                        report_to=["wandb"]), run, resume=True).train()
    assert read_logger_ids(run)["wandb"]["id"] == ids["id"]
    resumed = glob.glob(str(tmp_path / "wandb" / "wandb" / f"offline-run-*-{ids['id']}" / "run-*.wandb"))
    assert len(resumed) == 2
    rows, _ = wandb_history(next(path for path in resumed if path != files[0]))
    assert [row["iteration"] for row in rows if "reward_mean" in row] == [3]


# ---- Trackio, local store ------------------------------------------------------------------------------


@requires_trackio
def test_trackio_local_run_logs_metrics_config_samples_and_curves(tiny_model_dir, tmp_path, monkeypatch):
    store = tmp_path / "trackio"
    monkeypatch.setenv("TRACKIO_DIR", str(store))  # read when trackio is first imported...
    monkeypatch.setenv("TRACKIO_PROJECT", "evotune-test")
    import trackio  # noqa: F401

    for name, module in list(sys.modules.items()):  # ...so also pointed there if it was imported before
        if name == "trackio" or name.startswith("trackio."):
            if hasattr(module, "TRACKIO_DIR"):
                monkeypatch.setattr(module, "TRACKIO_DIR", store)
            if hasattr(module, "MEDIA_DIR"):
                monkeypatch.setattr(module, "MEDIA_DIR", store / "media")
    from trackio.sqlite_storage import SQLiteStorage

    run = tmp_path / "trackio_run"
    run_tiny(tiny_model_dir, run, ["trackio"])

    assert SQLiteStorage.get_project_db_path("evotune-test").parent == store
    assert read_logger_ids(run)["trackio"] == {"project": "evotune-test", "name": "trackio_run"}
    config = SQLiteStorage.get_run_config("evotune-test", "trackio_run")
    assert config["population_size"] == 4 and config["report_to"] == ["trackio"]
    logs = SQLiteStorage.get_logs("evotune-test", "trackio_run")
    metrics = {}
    for entry in logs:
        metrics.setdefault(entry["step"], set()).update(entry)
    assert TRAIN_KEYS <= metrics[1] and EVAL_KEYS <= metrics[0] and EVAL_KEYS <= metrics[2]
    tables = [entry for entry in logs if "samples" in entry]
    assert [entry["step"] for entry in tables] == [0, 1, 2]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert tables[-1]["samples"]["_type"] == "trackio.table"
    assert tables[-1]["samples"]["_value"] == samples[-4:]
    images = [entry for entry in logs if "curves" in entry]
    assert [entry["step"] for entry in images] == [2] and images[0]["curves"]["_type"] == "trackio.image"
    assert list((store / "media").rglob("*.png"))


def test_report_to_choices_are_the_loggers():
    from typing import get_args

    from evotune.config import Logger
    from evotune.tracking.loggers import LOGGERS

    assert set(get_args(Logger)) == set(LOGGERS)
