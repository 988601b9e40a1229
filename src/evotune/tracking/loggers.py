"""Where a run's numbers go besides metrics.jsonl: TensorBoard, Weights & Biases, Trackio.

`report_to` takes TRL's names (`tensorboard`, `wandb`, `trackio`). Each destination is one small class
with the same five methods, and `tracking.MetricsLogger` fans every record out to the ones configured:

    log_metrics(step, {"reward_mean": ..., "eval/accuracy": ...})   # one iteration (or SFT step)
    log_config({...})                                               # the resolved config
    log_samples(step, [{"iteration", "prompt", "completion", "reward"}, ...])  # held-out completions
    log_image("curves", path, step)                                 # the final learning curves
    close()

wandb and trackio are optional (`pip install 'evotune[wandb]'` / `'evotune[trackio]'`) and imported only
here, in their own class. Both follow their own environment variables: W&B's `WANDB_MODE=offline` keeps a
run on disk (`wandb sync` uploads it later), `WANDB_PROJECT` / `WANDB_ENTITY` / `WANDB_DIR` choose where it
goes (default: project `evotune`, files under the run directory's `wandb/`); Trackio writes its local
SQLite store (`TRACKIO_DIR`, default `~/.cache/huggingface/trackio`; see it with `trackio show`) unless
`TRACKIO_SPACE_ID` names a Space, and `TRACKIO_PROJECT` picks the project (default `evotune`). The run is
named after the run directory; a resumed run continues the same W&B run (its id is kept in
`DIR/loggers.json`) and the same Trackio run.
"""

from __future__ import annotations

import json
import os
import secrets
import string
from pathlib import Path
from typing import Any

from ..errors import ConfigError

LOGGERS = ("tensorboard", "wandb", "trackio")  # config.Logger's choices
LOGGER_IDS_FILE = "loggers.json"  # where a run's W&B id is kept for --resume
SAMPLE_COLUMNS = ("iteration", "prompt", "completion", "reward")


class RunLogger:
    """One destination. `step` is the record's x-axis (the ES iteration, or the SFT optimizer step)."""

    name = ""

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        """Scalars of one step (numbers only; the step itself is not among them)."""

    def log_config(self, config: dict[str, Any]) -> None:
        """The run's resolved config."""

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Held-out prompts with their completions and rewards, as a table."""

    def log_image(self, name: str, path: str | Path, step: int | None = None) -> None:
        """A PNG written by the run (e.g. curves.png)."""

    def close(self) -> None:
        """Flush and end the run."""


def _missing(package: str, extra: str) -> ConfigError:
    return ConfigError(f"`report_to` includes {package} but the `{package}` package is not installed; "
                       f"pip install 'evotune[{extra}]', or remove {package} from `report_to`.")


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numeric entries (strict JSON has already made NaN None)."""
    return {key: value for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    columns = [column for column in SAMPLE_COLUMNS if any(column in row for row in rows)]
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    return columns


def _cell(value: Any) -> str:
    """A markdown table cell: pipes escaped, newlines as <br>."""
    text = "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    return text.replace("|", "\\|").replace("\r\n", "\n").replace("\n", "<br>")


def samples_markdown(rows: list[dict[str, Any]]) -> str:
    """Sample rows as one markdown table (TensorBoard's text plugin renders it)."""
    columns = _columns(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(column)) for column in columns) + " |" for row in rows]
    return "\n".join(lines)


def _new_run_id() -> str:
    """8 lowercase letters and digits, W&B's own id format."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def read_logger_ids(output_dir: Path) -> dict[str, Any]:
    path = Path(output_dir) / LOGGER_IDS_FILE
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return values if isinstance(values, dict) else {}


def remember_logger_ids(output_dir: Path, name: str, values: dict[str, Any]) -> None:
    ids = read_logger_ids(output_dir)
    ids[name] = values
    (Path(output_dir) / LOGGER_IDS_FILE).write_text(json.dumps(ids, indent=2) + "\n")


class TensorBoardLogger(RunLogger):
    """Events under DIR/tensorboard: scalars, the config and samples as text, images."""

    name = "tensorboard"

    def __init__(self, output_dir: Path, run_name: str, resume_step: int | None = None,
                 config: dict[str, Any] | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ConfigError("`report_to` includes tensorboard but the `tensorboard` package is missing; "
                              "pip install tensorboard, or remove tensorboard from `report_to`.") from exc
        self.start = 0 if resume_step is None else resume_step
        self.writer = SummaryWriter(str(Path(output_dir) / "tensorboard"),
                                    purge_step=None if resume_step is None else resume_step + 1)
        if config:
            self.log_config(config)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in _numbers(metrics).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_config(self, config: dict[str, Any]) -> None:
        import yaml

        self.writer.add_text("config", "```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```", self.start)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.writer.add_text("samples", samples_markdown(rows), step)
            self.writer.flush()

    def log_image(self, name: str, path: str | Path, step: int | None = None) -> None:
        import numpy as np
        from PIL import Image

        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
        self.writer.add_image(name, pixels, step or 0, dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger(RunLogger):
    """A W&B run (online after `wandb login`, or WANDB_MODE=offline): history against `step_key`, the
    config, a `samples` table per evaluation, the curves as an image."""

    name = "wandb"

    def __init__(self, output_dir: Path, run_name: str, resume_step: int | None = None,
                 config: dict[str, Any] | None = None, step_key: str = "iteration"):
        try:
            import wandb
        except ImportError as exc:
            raise _missing("wandb", "wandb") from exc
        self.wandb = wandb
        self.step_key = step_key
        saved = read_logger_ids(output_dir).get(self.name, {}) if resume_step is not None else {}
        run_id = os.environ.get("WANDB_RUN_ID") or saved.get("id") or _new_run_id()
        project = os.environ.get("WANDB_PROJECT") or saved.get("project") or "evotune"
        directory = os.environ.get("WANDB_DIR") or str(output_dir)
        try:
            self.run = wandb.init(project=project, name=run_name, id=run_id, resume="allow", dir=directory,
                                  config=config or {}, reinit="create_new")
        except Exception as exc:  # wandb.errors.UsageError and friends: not logged in, no network, ...
            raise ConfigError(f"`report_to` includes wandb but wandb.init failed: {exc}. Log in with `wandb login`, "
                              "or set WANDB_MODE=offline to keep the run on disk (upload it later with "
                              "`wandb sync`).") from exc
        remember_logger_ids(output_dir, self.name, {"id": self.run.id, "project": project,
                                                    "mode": str(self.run.settings.mode)})
        self.run.define_metric(step_key)
        self.run.define_metric("*", step_metric=step_key)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({self.step_key: step, **_numbers(metrics)})

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        if rows:
            columns = _columns(rows)
            table = self.wandb.Table(columns=columns, data=[[row.get(column) for column in columns] for row in rows])
            self.run.log({self.step_key: step, "samples": table})

    def log_image(self, name: str, path: str | Path, step: int | None = None) -> None:
        entry: dict[str, Any] = {name: self.wandb.Image(str(path))}
        if step is not None:
            entry[self.step_key] = step
        self.run.log(entry)

    def close(self) -> None:
        self.run.finish()


class TrackioLogger(RunLogger):
    """A Trackio run (local SQLite store, or a Space with TRACKIO_SPACE_ID): metrics at `step`, the config,
    a `samples` table per evaluation, the curves as an image."""

    name = "trackio"

    def __init__(self, output_dir: Path, run_name: str, resume_step: int | None = None,
                 config: dict[str, Any] | None = None):
        try:
            import trackio
        except ImportError as exc:
            raise _missing("trackio", "trackio") from exc
        self.trackio = trackio
        project = os.environ.get("TRACKIO_PROJECT") or "evotune"
        self.run = trackio.init(project=project, name=run_name, config=dict(config or {}), embed=False,
                                resume="allow" if resume_step is not None else "never")
        remember_logger_ids(output_dir, self.name, {"project": project, "name": run_name})

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(_numbers(metrics), step=step)

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config)  # stored with the first logged step

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        if rows:
            columns = _columns(rows)
            table = self.trackio.Table(columns=columns, data=[[row.get(column) for column in columns] for row in rows])
            self.run.log({"samples": table}, step=step)

    def log_image(self, name: str, path: str | Path, step: int | None = None) -> None:
        self.run.log({name: self.trackio.Image(str(path))}, step=step)

    def close(self) -> None:
        current = getattr(getattr(self.trackio, "context_vars", None), "current_run", None)
        if current is not None and current.get() is self.run:
            self.trackio.finish()  # also clears trackio's current run, so its atexit hook does not finish it again
        else:
            self.run.finish()


def build_loggers(report_to: list[str], output_dir: Path, resume_step: int | None = None,
                  step_key: str = "iteration", config: dict[str, Any] | None = None) -> list[RunLogger]:
    """One logger per `report_to` entry, in order; the run is named after its directory."""
    unknown = [name for name in report_to if name not in LOGGERS]
    if unknown:
        raise ConfigError(f"`report_to` has {', '.join(map(repr, unknown))}; the loggers are {', '.join(LOGGERS)} "
                          "(metrics.jsonl is always written).")
    output_dir = Path(output_dir)
    run_name = output_dir.resolve().name
    loggers: list[RunLogger] = []
    try:
        for name in report_to:
            if name == "tensorboard":
                loggers.append(TensorBoardLogger(output_dir, run_name, resume_step, config))
            elif name == "wandb":
                loggers.append(WandbLogger(output_dir, run_name, resume_step, config, step_key))
            else:
                loggers.append(TrackioLogger(output_dir, run_name, resume_step, config))
    except BaseException:
        for logger in loggers:  # a later logger failed: end the ones already started
            logger.close()
        raise
    return loggers
