"""GRPO math as plain functions on tensors, with SkyRL's semantics.

- ``group_advantages``: rewards of ``n_samples_per_prompt`` rollouts of the same maze are
  normalized within their group: ``(r - mean) / (std + eps)`` (``grpo_norm_by_std``).
- ``ppo_clip_loss``: PPO-clip with ``token_mean`` reduction over generated tokens only;
  observation (prompt) tokens carry ``mask == 0`` and contribute nothing.
- ``kl_k3``: the low-variance KL estimate against the reference policy (adapter disabled).
"""

from __future__ import annotations

import torch

ADVANTAGE_EPS = 1e-6  # SkyRL's epsilon in compute_grpo_outcome_advantage


def group_advantages(rewards: torch.Tensor, group_size: int, *, norm_by_std: bool = True) -> torch.Tensor:
    """Advantages of ``rewards`` laid out as consecutive groups of ``group_size`` rollouts.

    A group whose rewards are all equal gets zero advantage (it carries no learning signal).
    """
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards must be 1-D with a multiple of {group_size} entries, got {tuple(rewards.shape)}"
        )
    grouped = rewards.float().view(-1, group_size)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if norm_by_std:
        centered = centered / (grouped.std(dim=1, keepdim=True) + ADVANTAGE_EPS)
    return centered.view(-1)


def informative_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Boolean per group: True where rewards differ within the group."""
    grouped = rewards.view(-1, group_size)
    return grouped.max(dim=1).values != grouped.min(dim=1).values


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probability of each ``tokens[b, t]`` under ``logits[b, t]`` (already shifted)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean of ``values`` over positions where ``mask`` is 1."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_clip_low: float = 0.2,
    eps_clip_high: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip policy loss, token-mean over ``mask``; returns ``(loss, metrics)``.

    ``advantages`` has the shape of ``logprobs`` (each token carries its episode's advantage).
    """
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - eps_clip_low, 1.0 + eps_clip_high)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_frac = masked_mean((clipped > unclipped).float(), mask).item()
        approx_kl = masked_mean(old_logprobs - logprobs, mask).item()
    return loss, {"policy/clip_ratio": clip_frac, "policy/approx_kl": approx_kl}


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-mean k3 estimate of KL(policy || reference): ``exp(d) - d - 1`` with ``d = ref - logp``."""
    delta = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return masked_mean(torch.exp(delta) - delta - 1.0, mask)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    *,
    eps_clip_low: float,
    eps_clip_high: float,
    denominator: float,
    ref_logprobs: torch.Tensor | None = None,
    kl_loss_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One micro-batch's share of its mini-batch's loss: PPO-clip (plus ``kl_loss_coef`` x k3 KL when
    ``ref_logprobs`` is given), token-mean over ``weights``, scaled by ``weights.sum() / denominator``.

    ``advantages`` holds one value per sequence (each token carries it); ``weights`` counts each
    generated token (a merged sample's count times its mask). The shares of a mini-batch's
    micro-batches add up to its token-mean loss when ``denominator`` is its total weight.
    """
    loss, metrics = ppo_clip_loss(
        logprobs,
        old_logprobs,
        advantages[:, None].expand_as(logprobs),
        weights,
        eps_clip_low=eps_clip_low,
        eps_clip_high=eps_clip_high,
    )
    metrics["policy/loss"] = loss.item()
    if ref_logprobs is not None:
        kl = kl_k3(logprobs, ref_logprobs, weights)
        metrics["policy/kl"] = kl.item()
        loss = loss + kl_loss_coef * kl
    share = float(weights.sum()) / denominator
    return loss * share, {k: v * share for k, v in metrics.items()}
