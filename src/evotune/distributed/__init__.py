"""Population evaluation: in process (one candidate or many per generate), or on a Ray actor pool.

The Ray pool lives in the `ray` package, the only place that imports ray; import it from there.
"""

from .base import Evaluator, Replica
from .batched import BatchedEvaluator
from .local import LocalEvaluator

__all__ = ["BatchedEvaluator", "Evaluator", "LocalEvaluator", "Replica"]
