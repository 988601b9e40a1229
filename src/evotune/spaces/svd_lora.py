"""Singular-value space of a LoRA adapter, after ESSA (Korotyshova, Shaposhnikov et al.,
"ESSA: Evolutionary Strategies for Scalable Alignment", arXiv 2507.04453).

Each LoRA factor is decomposed once, in float64:
    A = U_A diag(S_A) V_A^T   (A is (r, in)),    B = U_B diag(S_B) V_B^T   (B is (out, r)).
U, V and S are frozen; a candidate holds OFFSETS to the top k = floor(alpha * r) singular
values of every factor, so the adapter becomes A' = U_A diag(S_A + dA) V_A^T, likewise B'
(`offsets: absolute`), or A' = U_A diag(S_A * (1 + dA)) V_A^T (`offsets: relative`).

Why relative offsets: after SFT the factors' singular values differ by a factor of 30 or more
(A ~0.6, B 0.02-0.18 on our arithmetic adapters), so one absolute sigma is a large step for B and
a negligible one for A. Relative offsets make sigma the same fraction of every singular value,
whatever a factor's scale (the search is scale-free). A zero singular value stays zero, so relative
offsets need a trained adapter (not PEFT's zero B).

Why only singular values (ESSA's argument):
  * the search vector is tiny (2 * k per adapted module: 2,048 numbers for a 7B Llama at
    r = 8 on q/k/v/o), so CMA-ES, whose covariance is d x d, is feasible, and ES's noisy
    gradient estimate has far fewer directions to cover than full LoRA or full weights;
  * only seeds (OpenES) or these small vectors (CMA-ES) travel between workers, never weights;
  * everything is inference: the base weights are never differentiated or written, so they
    may be quantized (int8 / int4) while the fp32/fp64 adapter is rewritten per candidate.
The singular vectors must carry meaning (an SFT adapter, or PEFT's default start):
ESSA's Appendix E toy shows random singular vectors buy far less. A zero-initialized B (PEFT's
default) has all singular values 0; that is allowed: offsets then make B nonzero along
the frozen singular vectors the SVD returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ConfigError
from ..optimizers import Optimizer
from .lora import AdapterSpace, attach_adapter


@dataclass
class FactorSVD:
    """The frozen decomposition of one factor (float64, host) and how many values are searched."""

    u: torch.Tensor  # (m, p), p = min(m, n)
    s: torch.Tensor  # (p,)
    vh: torch.Tensor  # (p, n)
    k: int  # offsets on s[:k]
    relative: bool = False  # S * (1 + offsets) instead of S + offsets

    def weight(self, offsets: torch.Tensor) -> torch.Tensor:
        """U diag(S + [offsets, 0, ...]) V^T (relative: S * (1 + offsets)), (m, n) float64."""
        s = self.s.clone()
        if self.relative:
            s[:self.k] *= 1.0 + offsets.to(torch.float64)
        else:
            s[:self.k] += offsets.to(torch.float64)
        return (self.u * s) @ self.vh  # scaling U's columns == U @ diag(s)


def searched_count(alpha: float, rank: int) -> int:
    """floor(alpha * rank), robust to float error (0.29 * 100 is 28.999999999999996)."""
    return math.floor(alpha * rank + 1e-9)


class SVDLoRASpace(AdapterSpace):
    """Offsets to the top floor(alpha * r) singular values of every LoRA A and B.

    The vector is, for each module in sorted order, A's k offsets then B's k offsets;
    dimension = num_lora_modules * k * 2. The zero vector reproduces the original adapter.
    offsets: "absolute" (S + x) or "relative" (S * (1 + x); see the module docstring).
    """

    @classmethod
    def from_config(cls, config: Any, backend: Any, optimizer: Optimizer) -> SVDLoRASpace:
        """ESSA's space (registry entry `svd_lora`) over the run's adapter; `backend.model` becomes the PEFT model."""
        backend.model = attach_adapter(backend.model, config)
        return cls(backend.model, alpha=config.singular_value_fraction, noise_kind=config.noise, optimizer=optimizer,
                   offsets=config.svd_offsets)

    def __init__(self, model: torch.nn.Module, alpha: float = 1.0, noise_kind: str = "gaussian",
                 adapter: str = "default", optimizer: Optimizer | None = None, offsets: str = "absolute"):
        if not 0.0 < alpha <= 1.0:
            raise ConfigError(f"SVD-LoRA alpha={alpha} must be in (0, 1]: it is the fraction of each LoRA "
                              "factor's singular values that ES searches.")
        if offsets not in ("absolute", "relative"):
            raise ConfigError(f"`svd_offsets` is {offsets!r}; set absolute (S + x) or relative (S * (1 + x)).")
        super().__init__(model, adapter, noise_kind, optimizer)
        self.alpha = alpha
        ranks = [f.weight.shape[0] if f.factor == "A" else f.weight.shape[1] for f in self.factors]
        rank = min(ranks)
        if searched_count(alpha, rank) == 0:
            raise ConfigError(
                f"SVD-LoRA alpha={alpha} with LoRA rank {rank} searches floor({alpha} * {rank}) = 0 singular "
                f"values per factor: nothing to search (the ESSA paper's white cell). Use alpha >= 1/{rank} = "
                f"{1 / rank:g}, or a higher LoRA rank.")
        self.offsets = offsets
        self.svds = [self._decompose(f.weight, searched_count(alpha, r), offsets == "relative")
                     for f, r in zip(self.factors, ranks)]
        if offsets == "relative":
            flat = [f"{f.module}.{f.factor}" for f, svd in zip(self.factors, self.svds) if not svd.s[:svd.k].any()]
            if flat:
                raise ConfigError(
                    f"`svd_offsets: relative` scales singular values, but {len(flat)} LoRA factor(s) have none to "
                    f"scale (all zero, e.g. {flat[0]}: PEFT's fresh B = 0). Start from a trained adapter (`adapter: "
                    "DIR`, e.g. an `evotune sft` run's adapter/), or set `svd_offsets: absolute`.")
        self.k = min(svd.k for svd in self.svds)  # per factor; the same for every factor at a uniform rank
        self.blocks = [(f"svd/{f.module}/{f.factor}", (svd.k,)) for f, svd in zip(self.factors, self.svds)]
        # (d,) zero offsets; live weights := reconstruction at zero offset (equal to the original within 1e-6)
        self._begin(torch.zeros(sum(svd.k for svd in self.svds), dtype=torch.float32))

    @staticmethod
    def _decompose(weight: torch.Tensor, k: int, relative: bool = False) -> FactorSVD:
        u, s, vh = torch.linalg.svd(weight.detach().to("cpu", torch.float64), full_matrices=False)
        return FactorSVD(u, s, vh, min(k, s.numel()), relative)  # k <= p even if a factor's inner size is below r

    def _weights(self, vector: torch.Tensor) -> list[torch.Tensor]:
        offsets = torch.split(vector, [svd.k for svd in self.svds])
        return [svd.weight(offset) for svd, offset in zip(self.svds, offsets)]

    def searched_values(self, vector: torch.Tensor) -> torch.Tensor:
        """(d,) float64: the searched singular values S' at `vector` (S + x, or S * (1 + x)), factor by factor."""
        offsets = torch.split(vector.to(torch.float64), [svd.k for svd in self.svds])
        return torch.cat([svd.s[:svd.k] * (1.0 + offset) if svd.relative else svd.s[:svd.k] + offset
                          for svd, offset in zip(self.svds, offsets)])

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The offsets plus the frozen bases, so a resume rebuilds the same adapter even if the
        starting adapter (or the SVD's LAPACK build) differs on the resuming machine."""
        tensors = super().state_tensors()
        for factor, svd in zip(self.factors, self.svds):
            for part in ("u", "s", "vh"):
                tensors[f"basis/{factor.module}/{factor.factor}/{part}"] = getattr(svd, part).clone()
        return tensors

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        bases = {}  # validated in full before anything is replaced
        for index, (factor, svd) in enumerate(zip(self.factors, self.svds)):
            for part in ("u", "s", "vh"):
                key = f"basis/{factor.module}/{factor.factor}/{part}"
                if key in tensors:
                    if tensors[key].shape != getattr(svd, part).shape:
                        raise ConfigError(f"checkpoint's {key} has shape {tuple(tensors[key].shape)}, this adapter "
                                          f"needs {tuple(getattr(svd, part).shape)}: resume with the same config.")
                    bases[index, part] = tensors[key].to(torch.float64).clone()
        if "vector" in tensors:
            self._as_vector(tensors["vector"])  # raises on a wrong size before the bases change
        for (index, part), value in bases.items():
            setattr(self.svds[index], part, value)
        super().load_state_tensors(tensors)
