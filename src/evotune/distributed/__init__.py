"""Population evaluation: in process now; the Ray actor pool lives in its own module."""

from .batched import BatchedEvaluator
from .local import LocalEvaluator

__all__ = ["BatchedEvaluator", "LocalEvaluator"]
