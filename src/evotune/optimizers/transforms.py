"""Optimizers as small composable transforms, in the manner of optax's chained GradientTransformation.

A transform turns the update of one named tensor into the next stage's update: scale by Adam, scale by the
learning rate, subtract decoupled weight decay. `Chain` runs them in order, owns the step counter, and holds the
one serialisable state of the whole optimizer (the counter as JSON, per-tensor moments as named tensors). ES works
tensor by tensor (a model's gradient estimate never exists whole), so a transform sees one tensor at a time:
`update(key, updates, mean, step)`, with `updates` a scratch buffer the transform may overwrite in place.

Anchored weight decay is a stage too, but one that touches no update: it declares the fraction by which the space
pulls its mean back toward its starting weights after the step (the space holds that base; optimizers/rules.py).

A chain describes itself as plain numbers (`describe`) and is rebuilt from them (`Chain.from_description`): that
is how the vLLM worker, in another process reached through msgpack, builds the very optimizer the driver's space
holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


class Transform:
    """One stage of a chain. Subclasses are dataclasses whose fields are their hyperparameters (plain numbers);
    per-tensor state, if any, lives in `tensors()` under keys unique within a chain."""

    kind: ClassVar[str]

    def update(self, key: str, updates: Any, mean: Any, step: int) -> Any:
        """The next stage's update for tensor `key`; may write into `updates`. step: 1 on the first step."""
        return updates

    def anchor_fraction(self) -> float:
        """The share of (mean - base) the space removes after each step (only AnchorDecay sets it)."""
        return 0.0

    def hyperparameters(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}  # type: ignore[arg-type]

    def tensors(self) -> dict[str, Any]:
        return {}

    def load_tensors(self, tensors: dict[str, Any]) -> None:
        """Inverse of tensors(); receives the chain's whole tensor dict and keeps the keys it owns."""


@dataclass
class ScaleByAdam(Transform):
    """Adam's bias-corrected ratio m_hat / (sqrt(v_hat) + epsilon), per tensor (Kingma & Ba, 2015). Keeps two fp32
    moments per weight: for full-parameter ES that is two extra copies of the trainable weights."""

    kind: ClassVar[str] = "scale_by_adam"
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    first_moment: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    second_moment: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def update(self, key: str, updates: Any, mean: Any, step: int) -> Any:
        if key not in self.first_moment:
            self.first_moment[key] = updates * 0.0
            self.second_moment[key] = updates * 0.0
        m = self.first_moment[key] = self.first_moment[key] * self.beta1 + updates * (1 - self.beta1)
        v = self.second_moment[key] = self.second_moment[key] * self.beta2 + updates * updates * (1 - self.beta2)
        m_hat = m / (1 - self.beta1**step)
        v_hat = v / (1 - self.beta2**step)
        return m_hat / (v_hat**0.5 + self.epsilon)  # a new tensor: later stages may write into it

    def tensors(self) -> dict[str, Any]:
        # the keys checkpoints have always used (first_moment/<tensor>), so older checkpoints load
        out = {f"first_moment/{k}": v for k, v in self.first_moment.items()}
        out.update({f"second_moment/{k}": v for k, v in self.second_moment.items()})
        return out

    def load_tensors(self, tensors: dict[str, Any]) -> None:
        self.first_moment, self.second_moment = {}, {}
        for key, value in tensors.items():
            kind, name = key.split("/", 1)
            if kind in ("first_moment", "second_moment"):
                getattr(self, kind)[name] = value


@dataclass
class ScaleByLearningRate(Transform):
    """updates <- learning_rate * updates (in place: a step allocates nothing)."""

    kind: ClassVar[str] = "scale_by_learning_rate"
    learning_rate: float

    def update(self, key: str, updates: Any, mean: Any, step: int) -> Any:
        updates *= self.learning_rate
        return updates


@dataclass
class DecoupledWeightDecay(Transform):
    """updates <- updates - rate * mean (Loshchilov & Hutter's decoupled decay; rate = learning_rate *
    weight_decay, so it follows the learning-rate stage, as AdamW's step does)."""

    kind: ClassVar[str] = "decoupled_weight_decay"
    rate: float

    def update(self, key: str, updates: Any, mean: Any, step: int) -> Any:
        updates -= mean * self.rate
        return updates


@dataclass
class AnchorDecay(Transform):
    """Anchored weight decay (Schweighofer et al., arXiv 2605.30148): after the step the space moves its mean the
    fraction `fraction` (= learning_rate * anchor_decay) of the way back to the weights it started from."""

    kind: ClassVar[str] = "anchor_decay"
    fraction: float

    def anchor_fraction(self) -> float:
        return self.fraction


TRANSFORMS: dict[str, type[Transform]] = {t.kind: t for t in (ScaleByAdam, ScaleByLearningRate,
                                                              DecoupledWeightDecay, AnchorDecay)}


class Chain:
    """Transforms applied in order to each tensor's gradient estimate; the step counter and all state in one
    place. A space calls begin_step() once per ES step, then step(key, gradient, mean) per tensor, and adds the
    returned delta to its mean (ascent: ES maximises reward)."""

    def __init__(self, *transforms: Transform, step_count: int = 0):
        self.transforms = list(transforms)
        self.step_count = step_count

    def begin_step(self) -> None:
        self.step_count += 1

    def step(self, key: str, gradient: Any, mean: Any) -> Any:
        """The delta for tensor `key`; `gradient` is a scratch buffer the caller does not reuse."""
        updates = gradient
        for transform in self.transforms:
            updates = transform.update(key, updates, mean, self.step_count)
        return updates

    def anchor_fraction(self) -> float:
        return sum(transform.anchor_fraction() for transform in self.transforms)

    def state_dict(self) -> dict:
        return {"step_count": self.step_count}

    def tensors(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for transform in self.transforms:
            out.update(transform.tensors())
        return out

    def load_state_dict(self, state: dict, tensors: dict[str, Any] | None = None) -> None:
        self.step_count = int(state["step_count"])
        for transform in self.transforms:
            transform.load_tensors(tensors or {})

    def describe(self) -> dict[str, Any]:
        """The chain as plain values (msgpack- and JSON-safe): its stages and their hyperparameters."""
        return {"transforms": [{"kind": t.kind, **t.hyperparameters()} for t in self.transforms]}

    @classmethod
    def from_description(cls, description: dict[str, Any]) -> Chain:
        """Inverse of describe() (state not included: it travels as the checkpoint's tensors)."""
        stages = []
        for entry in description["transforms"]:
            values = dict(entry)
            stages.append(TRANSFORMS[values.pop("kind")](**values))
        return cls(*stages)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.transforms))})"

