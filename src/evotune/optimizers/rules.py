"""Optimizers that turn an ES gradient estimate into a step on the search mean.

They work on named fp32 arrays (numpy or torch tensors, anything with arithmetic),
so the same code steps the 10-number mean of a toy problem and, tensor by tensor,
the weights of a model. State is a dict of arrays keyed by name, saved with the run.
Qiu et al. (2025) use plain SGD and list Adam and weight decay as future improvements.

The space that holds a mean owns its optimizer (the only place the per-weight Adam moments
can live without shipping weights around); strategies only say where to step, as seeds.

Anchored weight decay (Schweighofer et al., "Overcoming Forgetting in LLM Fine-Tuning with Evolution
Strategies", arXiv 2605.30148, AWD): after each step the mean moves the fraction
learning_rate * anchor_decay of the way back toward the weights it started from,
mean <- base + (1 - learning_rate * anchor_decay) * (mean + delta - base), as the paper's code does (decay
step alpha * lambda, applied after the update). The optimizer carries the setting, so every replica built
from the same config replays the same decay; the space holds the base and applies it (`anchor_fraction`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SGD:
    """delta = learning_rate * (gradient - weight_decay * mean); computed in place in `gradient`
    (a scratch buffer the caller does not reuse), so a step allocates nothing."""

    learning_rate: float
    weight_decay: float = 0.0
    anchor_decay: float = 0.0
    step_count: int = 0

    def anchor_fraction(self) -> float:
        """The share of (mean - base) removed after each step (anchored weight decay; 0: off)."""
        return self.learning_rate * self.anchor_decay

    def begin_step(self) -> None:
        self.step_count += 1

    def step(self, name: str, gradient: Any, mean: Any) -> Any:
        gradient *= self.learning_rate
        if self.weight_decay:
            gradient -= mean * (self.learning_rate * self.weight_decay)
        return gradient

    def state_dict(self) -> dict:
        return {"step_count": self.step_count}

    def tensors(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict, tensors: dict[str, Any] | None = None) -> None:
        self.step_count = int(state["step_count"])


@dataclass
class Adam:
    """Adam (ascent) with decoupled weight decay, on the ES gradient estimate.

    Keeps two fp32 moments per parameter: for full-parameter ES that is two extra
    copies of the trainable weights, which is why it is off by default.
    """

    learning_rate: float
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    weight_decay: float = 0.0
    anchor_decay: float = 0.0
    step_count: int = 0
    first_moment: dict[str, Any] = field(default_factory=dict)
    second_moment: dict[str, Any] = field(default_factory=dict)

    def anchor_fraction(self) -> float:
        """The share of (mean - base) removed after each step (anchored weight decay; 0: off)."""
        return self.learning_rate * self.anchor_decay

    def begin_step(self) -> None:
        self.step_count += 1

    def step(self, name: str, gradient: Any, mean: Any) -> Any:
        if name not in self.first_moment:
            self.first_moment[name] = gradient * 0.0
            self.second_moment[name] = gradient * 0.0
        m = self.first_moment[name] = self.first_moment[name] * self.beta1 + gradient * (1 - self.beta1)
        v = self.second_moment[name] = self.second_moment[name] * self.beta2 + gradient * gradient * (1 - self.beta2)
        m_hat = m / (1 - self.beta1**self.step_count)
        v_hat = v / (1 - self.beta2**self.step_count)
        delta = m_hat / (v_hat**0.5 + self.epsilon) * self.learning_rate
        if self.weight_decay:
            delta = delta - mean * (self.learning_rate * self.weight_decay)
        return delta

    def state_dict(self) -> dict:
        return {"step_count": self.step_count}

    def tensors(self) -> dict[str, Any]:
        out = {f"first_moment/{k}": v for k, v in self.first_moment.items()}
        out.update({f"second_moment/{k}": v for k, v in self.second_moment.items()})
        return out

    def load_state_dict(self, state: dict, tensors: dict[str, Any] | None = None) -> None:
        self.step_count = int(state["step_count"])
        self.first_moment, self.second_moment = {}, {}
        for key, value in (tensors or {}).items():
            kind, name = key.split("/", 1)
            getattr(self, kind)[name] = value


OPTIMIZERS = {"sgd": SGD, "adam": Adam}
Optimizer = SGD | Adam


def make_optimizer(name: str, learning_rate: float, weight_decay: float = 0.0, anchor_decay: float = 0.0) -> Optimizer:
    """The optimizer named by the `optimizer` key (`sgd` or `adam`) that moves a space's mean."""
    if name not in OPTIMIZERS:  # config validation reports this earlier; keep a guard for API users
        raise ValueError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    if not math.isfinite(learning_rate):
        raise ValueError("learning_rate must be finite")
    if anchor_decay < 0 or not math.isfinite(anchor_decay) or learning_rate * anchor_decay > 1:  # config says more
        raise ValueError("anchor_decay must be >= 0 and finite, with learning_rate * anchor_decay at most 1")
    return OPTIMIZERS[name](learning_rate=learning_rate, weight_decay=weight_decay, anchor_decay=anchor_decay)
