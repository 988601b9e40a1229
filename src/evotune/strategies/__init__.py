"""Search strategies: ask() candidates, tell() rewards (higher is better)."""

from .base import Candidate, Strategy, Update
from .cma import CMAES
from .openes import OpenES
from .optimizers import OPTIMIZERS, SGD, Adam
from .shaping import SHAPINGS, centered_rank, z_score

STRATEGIES = {"openes": OpenES, "cma": CMAES}

__all__ = ["Adam", "CMAES", "Candidate", "OPTIMIZERS", "OpenES", "SGD", "SHAPINGS", "STRATEGIES", "Strategy",
           "Update", "centered_rank", "z_score"]
