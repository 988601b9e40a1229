"""evotune: fine-tune and align LLMs with evolution strategies (forward passes only)."""

from . import _legacy_paths
from .config import TrainConfig, load_config
from .errors import ConfigError, DataError, EvotuneError, ModelLoadError, RewardFunctionError

__version__ = "0.1.0"

_legacy_paths.install()  # old module paths (evotune.checkpoint, ...) keep importing

__all__ = ["ConfigError", "DataError", "ESConfig", "ESTrainer", "EvotuneError", "ModelLoadError",
           "RewardFunctionError", "TrainConfig", "Trainer", "load_config"]


def __getattr__(name: str):
    # keep `import evotune` light: torch/transformers load on first use
    if name == "Trainer":
        from .trainer import Trainer

        return Trainer
    if name in ("ESTrainer", "ESConfig"):
        from . import es_trainer

        return getattr(es_trainer, name)
    raise AttributeError(name)
