"""Search spaces: how a candidate becomes weights (and back, exactly)."""

from .base import Space
from .full import FullParameterSpace, select_parameters
from .noise import NOISE_KINDS, derive_seed, noise
from .vector import VectorSpace

SPACES = {"full": FullParameterSpace}

__all__ = ["FullParameterSpace", "NOISE_KINDS", "SPACES", "Space", "VectorSpace", "derive_seed", "noise",
           "select_parameters"]
