"""Update rules on the search mean (SGD, Adam, decoupled and anchored weight decay): a bottom leaf that the spaces
and the vLLM worker use, and that imports nothing of evotune."""

from .rules import OPTIMIZERS, SGD, Adam, Optimizer, make_optimizer

__all__ = ["Adam", "OPTIMIZERS", "Optimizer", "SGD", "make_optimizer"]
