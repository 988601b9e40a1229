"""evotune: fine-tune and align LLMs with evolution strategies (forward passes only)."""

from .config import TrainConfig, load_config
from .errors import ConfigError, DataError, EvotuneError, ModelLoadError, RewardFunctionError

__version__ = "0.1.0"

__all__ = ["ConfigError", "DataError", "EvotuneError", "ModelLoadError", "RewardFunctionError", "TrainConfig",
           "Trainer", "load_config"]


def __getattr__(name: str):
    if name == "Trainer":  # keep `import evotune` light: torch/transformers load on first use
        from .trainer import Trainer

        return Trainer
    raise AttributeError(name)
