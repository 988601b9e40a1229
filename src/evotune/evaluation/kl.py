"""The per-token KL estimate between a model and its reference on the model's own completions."""

from __future__ import annotations

import numpy as np
import torch


def k3_kl(policy_logprobs: list[torch.Tensor], reference_logprobs: list[torch.Tensor]) -> dict[str, float]:
    """KL(policy || reference) per token from policy samples: mean of (r - 1) - log r, r = p_ref / p_policy.

    k3 is unbiased and, unlike log(p_policy / p_ref), never negative per token (Schulman, 2020).
    """
    per_token = [torch.expm1(ref - pol) - (ref - pol) for pol, ref in zip(policy_logprobs, reference_logprobs)]
    tokens = torch.cat(per_token) if per_token else torch.zeros(0)
    per_sequence = [float(t.sum()) for t in per_token]
    return {"kl_per_token": float(tokens.mean()) if tokens.numel() else float("nan"),
            "kl_per_sequence": float(np.mean(per_sequence)) if per_sequence else float("nan"),
            "kl_tokens": int(tokens.numel())}
