"""The two optimizers the `optimizer` key names, as chains of transforms (optimizers/transforms.py).

They turn an ES gradient estimate into a step on the search mean, on named fp32 arrays (numpy or torch tensors,
anything with arithmetic), so the same code steps the 10-number mean of a toy problem and, tensor by tensor, the
weights of a model. Qiu et al. (2025) use plain SGD and list Adam and weight decay as future improvements.

The space that holds a mean owns its optimizer (the only place the per-weight Adam moments can live without
shipping weights around); strategies only say where to step, as seeds.

Anchored weight decay (Schweighofer et al., "Overcoming Forgetting in LLM Fine-Tuning with Evolution
Strategies", arXiv 2605.30148, AWD): after each step the mean moves the fraction
learning_rate * anchor_decay of the way back toward the weights it started from,
mean <- base + (1 - learning_rate * anchor_decay) * (mean + delta - base), as the paper's code does (decay
step alpha * lambda, applied after the update). The optimizer carries the setting, so every replica built
from the same config replays the same decay; the space holds the base and applies it (`anchor_fraction`).
"""

from __future__ import annotations

import math

from .transforms import AnchorDecay, Chain, DecoupledWeightDecay, ScaleByAdam, ScaleByLearningRate, Transform


def _tail(learning_rate: float, weight_decay: float, anchor_decay: float) -> list[Transform]:
    """The stages every optimizer ends with: the learning rate, then decoupled and anchored decay when set."""
    stages: list[Transform] = [ScaleByLearningRate(learning_rate)]
    if weight_decay:
        stages.append(DecoupledWeightDecay(learning_rate * weight_decay))
    if anchor_decay:
        stages.append(AnchorDecay(learning_rate * anchor_decay))
    return stages


class SGD(Chain):
    """delta = learning_rate * (gradient - weight_decay * mean), computed in place in the gradient buffer."""

    def __init__(self, learning_rate: float, weight_decay: float = 0.0, anchor_decay: float = 0.0,
                 step_count: int = 0):
        super().__init__(*_tail(learning_rate, weight_decay, anchor_decay), step_count=step_count)
        self.learning_rate, self.weight_decay, self.anchor_decay = learning_rate, weight_decay, anchor_decay


class Adam(Chain):
    """Adam (ascent) with decoupled weight decay, on the ES gradient estimate. Two fp32 moments per weight: for
    full-parameter ES that is two extra copies of the trainable weights, which is why it is off by default."""

    def __init__(self, learning_rate: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8,
                 weight_decay: float = 0.0, anchor_decay: float = 0.0, step_count: int = 0):
        self.adam = ScaleByAdam(beta1, beta2, epsilon)
        super().__init__(self.adam, *_tail(learning_rate, weight_decay, anchor_decay), step_count=step_count)
        self.learning_rate, self.weight_decay, self.anchor_decay = learning_rate, weight_decay, anchor_decay

    @property
    def first_moment(self) -> dict:
        return self.adam.first_moment

    @property
    def second_moment(self) -> dict:
        return self.adam.second_moment


OPTIMIZERS = {"sgd": SGD, "adam": Adam}
Optimizer = Chain  # what a space holds: SGD, Adam or any chain of transforms


def make_optimizer(name: str, learning_rate: float, weight_decay: float = 0.0, anchor_decay: float = 0.0) -> Chain:
    """The optimizer named by the `optimizer` key (`sgd` or `adam`) that moves a space's mean."""
    if name not in OPTIMIZERS:  # config validation reports this earlier; keep a guard for API users
        raise ValueError(f"unknown optimizer {name!r}; choose one of {sorted(OPTIMIZERS)}")
    if not math.isfinite(learning_rate):
        raise ValueError("learning_rate must be finite")
    if anchor_decay < 0 or not math.isfinite(anchor_decay) or learning_rate * anchor_decay > 1:  # config says more
        raise ValueError("anchor_decay must be >= 0 and finite, with learning_rate * anchor_decay at most 1")
    return OPTIMIZERS[name](learning_rate=learning_rate, weight_decay=weight_decay, anchor_decay=anchor_decay)
