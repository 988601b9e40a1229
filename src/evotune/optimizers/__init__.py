"""Update rules on the search mean, as chains of small transforms (scale by Adam, scale by the learning rate,
decoupled and anchored weight decay): a bottom leaf that the spaces and the vLLM worker use, and that imports
nothing of evotune."""

from .rules import OPTIMIZERS, SGD, Adam, Optimizer, make_optimizer
from .transforms import (
    TRANSFORMS,
    AnchorDecay,
    Chain,
    DecoupledWeightDecay,
    ScaleByAdam,
    ScaleByLearningRate,
    Transform,
)

__all__ = ["Adam", "AnchorDecay", "Chain", "DecoupledWeightDecay", "OPTIMIZERS", "Optimizer", "SGD",
           "ScaleByAdam", "ScaleByLearningRate", "TRANSFORMS", "Transform", "make_optimizer"]
