"""GRPO math checked against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from workload.local.grpo import (
    group_advantages,
    informative_groups,
    kl_k3,
    masked_mean,
    policy_loss,
    ppo_clip_loss,
    token_logprobs,
)


def test_advantages_are_normalized_within_each_group_only():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(rewards, 4)
    std = torch.tensor([1.0, 0.0, 0.0, 0.0]).std().item()
    assert adv[:4].tolist() == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], rel=1e-4)
    assert adv[4:].tolist() == [0.0, 0.0, 0.0, 0.0]  # all solved: no signal


def test_advantages_without_std_normalization_are_centered_rewards():
    adv = group_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2, norm_by_std=False)
    assert adv.tolist() == [0.5, -0.5, 0.0, 0.0]


def test_rewards_that_do_not_fill_whole_groups_are_refused():
    with pytest.raises(ValueError, match="multiple of 4"):
        group_advantages(torch.zeros(6), 4)


def test_informative_groups_flags_groups_with_differing_rewards():
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    assert informative_groups(rewards, 2).tolist() == [False, True, False]


def test_token_logprobs_match_log_softmax():
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]])
    got = token_logprobs(logits, torch.tensor([[1, 0]]))
    expected = [torch.log(torch.tensor(0.5)).item(), torch.log_softmax(torch.tensor([2.0, 0.0]), 0)[0].item()]
    assert got[0].tolist() == pytest.approx(expected)


def test_loss_ignores_masked_observation_tokens():
    logprobs = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    adv = torch.ones(1, 3)
    loss, _ = ppo_clip_loss(logprobs, logprobs.detach(), adv, mask)
    loss.backward()
    assert logprobs.grad[0, 0].item() == 0.0  # the observation token gets no gradient
    assert logprobs.grad[0, 1:].tolist() == pytest.approx([-0.5, -0.5])  # token mean over 2 tokens
    assert loss.item() == pytest.approx(-1.0)


def test_clipping_stops_the_gradient_beyond_the_trust_region():
    old = torch.log(torch.tensor([[0.5, 0.5]]))
    new = torch.log(torch.tensor([[0.9, 0.55]])).requires_grad_()
    loss, metrics = ppo_clip_loss(
        new, old, torch.ones(1, 2), torch.ones(1, 2), eps_clip_low=0.2, eps_clip_high=0.2
    )
    loss.backward()
    # ratio 1.8 is clipped at 1.2 for a positive advantage: no gradient; ratio 1.1 is not.
    assert new.grad[0, 0].item() == 0.0
    assert new.grad[0, 1].item() == pytest.approx(-0.5 * 1.1)
    assert metrics["policy/clip_ratio"] == pytest.approx(0.5)
    assert loss.item() == pytest.approx(-(1.2 + 1.1) / 2)


def test_negative_advantage_is_clipped_on_the_low_side():
    old = torch.log(torch.tensor([[0.5]]))
    new = torch.log(torch.tensor([[0.2]])).requires_grad_()
    loss, _ = ppo_clip_loss(new, old, -torch.ones(1, 1), torch.ones(1, 1), eps_clip_low=0.2)
    loss.backward()
    assert loss.item() == pytest.approx(0.8)
    assert new.grad.item() == 0.0


def test_kl_is_zero_for_equal_policies_and_positive_otherwise():
    lp = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    assert kl_k3(lp, lp, mask).item() == 0.0
    assert kl_k3(lp, lp - 0.5, mask).item() == pytest.approx(float(torch.exp(torch.tensor(-0.5)) + 0.5 - 1.0))


def test_masked_mean_of_an_empty_mask_is_zero_not_nan():
    assert masked_mean(torch.ones(3), torch.zeros(3)).item() == 0.0


# Two sequences at ratio 1 (old = current): advantages +1 and -2, the second a merged sample of count 2
# with one generated token. Token-mean: (-1 - 1 + 2 * 2) / (1 + 1 + 2) = 0.5.
LOGPROBS = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]])
WEIGHTS = torch.tensor([[1.0, 1.0], [2.0, 0.0]])
ADVANTAGES = torch.tensor([1.0, -2.0])
CLIP = {"eps_clip_low": 0.2, "eps_clip_high": 0.2}


def test_policy_loss_is_the_token_mean_with_each_sequence_carrying_its_advantage():
    loss, metrics = policy_loss(LOGPROBS, LOGPROBS, ADVANTAGES, WEIGHTS, denominator=4.0, **CLIP)
    assert loss.item() == pytest.approx(0.5)
    assert metrics["policy/loss"] == pytest.approx(0.5) and "policy/kl" not in metrics


def test_policy_loss_of_micro_batches_adds_up_to_the_mini_batch_loss():
    parts = [
        policy_loss(LOGPROBS[i : i + 1], LOGPROBS[i : i + 1], ADVANTAGES[i : i + 1], WEIGHTS[i : i + 1],
                    denominator=4.0, **CLIP)
        for i in range(2)
    ]
    # each part is its own token-mean (-1.0 and 2.0) times its share of the mini-batch's tokens (2 of 4)
    assert [loss.item() for loss, _ in parts] == pytest.approx([-0.5, 1.0])
    assert sum(loss.item() for loss, _ in parts) == pytest.approx(0.5)
    assert sum(metrics["policy/loss"] for _, metrics in parts) == pytest.approx(0.5)


def test_policy_loss_adds_the_weighted_kl_against_the_reference():
    coef = 0.25
    loss, metrics = policy_loss(LOGPROBS, LOGPROBS, ADVANTAGES, WEIGHTS, denominator=8.0, **CLIP,
                                ref_logprobs=LOGPROBS - 1.0, kl_loss_coef=coef)
    kl = float(torch.exp(torch.tensor(-1.0)))  # exp(d) - d - 1 at d = -1, on every weighted token
    assert metrics["policy/kl"] == pytest.approx(kl * 0.5)  # scaled by the share: 4 of 8 tokens
    assert loss.item() == pytest.approx((0.5 + coef * kl) * 0.5)
