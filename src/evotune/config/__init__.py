"""Typed configuration: the run's dataclasses (`train`), their field helper (`fields`), cross-field checks
(`checks`), reading config files (`files`) and the `eval` command's options (`eval_options`).

`from evotune.config import TrainConfig, load_config` is the documented path; it re-exports `train`.
"""

from .train import *  # noqa: F401,F403  (the documented names: TrainConfig, RunConfig, load_config, ...)
from .train import __all__  # noqa: F401
