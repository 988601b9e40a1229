"""Search strategies: ask() candidates, tell() rewards (higher is better)."""

from .base import Candidate, Strategy, Update
from .openes import OpenES
from .optimizers import OPTIMIZERS, SGD, Adam
from .shaping import SHAPINGS, centered_rank, z_score

STRATEGIES = {"openes": OpenES}

__all__ = ["Adam", "Candidate", "OPTIMIZERS", "OpenES", "SGD", "SHAPINGS", "STRATEGIES", "Strategy",
           "Update", "centered_rank", "z_score"]
