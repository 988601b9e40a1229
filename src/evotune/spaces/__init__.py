"""Search spaces: how a candidate becomes weights (and back, exactly)."""

from .base import Space
from .full import FullParameterSpace, select_parameters
from .lora import LoRASpace, init_lora_adapter
from .lowrank import LowRankSpace
from .noise import NOISE_KINDS, derive_seed, noise
from .svd_lora import SVDLoRASpace
from .vector import VectorSpace

SPACES = {"full": FullParameterSpace, "lora": LoRASpace, "svd_lora": SVDLoRASpace, "lowrank": LowRankSpace}

__all__ = ["FullParameterSpace", "LoRASpace", "LowRankSpace", "NOISE_KINDS", "SPACES", "SVDLoRASpace", "Space",
           "VectorSpace", "derive_seed", "init_lora_adapter", "noise", "select_parameters"]
