"""Search strategies: ask() candidates, tell() rewards (higher is better)."""

from ..optimizers.rules import OPTIMIZERS, SGD, Adam, make_optimizer  # re-exported: the old home of the update rules
from ..types import Candidate, MeanUpdate, SeedUpdate, Update
from .base import Strategy
from .cma import CMAES
from .openes import OpenES
from .shaping import SHAPINGS, centered_rank, z_score

STRATEGIES = {"openes": OpenES, "cma": CMAES}

__all__ = ["Adam", "CMAES", "Candidate", "OPTIMIZERS", "MeanUpdate", "OpenES", "SGD", "SHAPINGS", "STRATEGIES",
           "SeedUpdate", "Strategy", "Update", "centered_rank", "make_optimizer", "z_score"]
