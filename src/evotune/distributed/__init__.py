"""Population evaluation: in process now; the Ray actor pool lives in its own module."""

from .local import LocalEvaluator

__all__ = ["LocalEvaluator"]
