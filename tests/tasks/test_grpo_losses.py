"""The GRPO loss registry against worked references on fixed rollouts (given log-probs, old log-probs,
reference log-probs, advantages and masks): each loss type by hand, the clip, the k3 KL, group-relative
advantages, and, with one optimisation step per batch (ratio 1), the gradient of REINFORCE with a baseline."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.tasks.grpo_losses import (
    GRPO_LOSSES,
    LossSettings,
    Rollouts,
    group_advantages,
    grpo_loss,
    loss_metrics,
    per_token_loss,
    token_logps,
)

D = torch.float64
# two completions of 3 and 1 tokens (right-padded to 3)
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=D)
LOGPS = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -9.0, -9.0]], dtype=D)
OLD = torch.tensor([[-1.0, -2.5, -0.4], [-0.4, -9.0, -9.0]], dtype=D)
ADV = torch.tensor([1.0, -2.0], dtype=D)


def by_hand_per_token(eps_low=0.2, eps_high=0.2) -> list[list[float]]:
    """-min(r A, clip(r) A) per token, written out from the numbers above."""
    rows = []
    for i in range(2):
        row = []
        for t in range(3):
            r = math.exp(LOGPS[i, t] - OLD[i, t])
            a = float(ADV[i])
            row.append(-min(r * a, min(max(r, 1 - eps_low), 1 + eps_high) * a))
        rows.append(row)
    return rows


def test_every_loss_type_is_worked_here():
    assert GRPO_LOSSES.names() == ["dapo", "dr_grpo", "grpo"]


def test_clipped_per_token_term_by_hand():
    """Token (0, 1): ratio e^0.5 = 1.65 > 1.2 with A = 1: clipped to 1.2 -> -1.2. Token (1, 0): ratio
    e^0.3 = 1.35 with A = -2: the unclipped -2 * 1.35 is the min -> 2.70. Token (0, 2): e^-0.1 = 0.905."""
    per_token = per_token_loss(Rollouts(LOGPS, MASK, ADV, old_logps=OLD), LossSettings())
    torch.testing.assert_close(per_token, torch.tensor(by_hand_per_token(), dtype=D))
    assert float(per_token[0, 1]) == pytest.approx(-1.2)
    assert float(per_token[1, 0]) == pytest.approx(2 * math.exp(0.3))


def test_epsilon_high_clips_above_only():
    per_token = per_token_loss(Rollouts(LOGPS, MASK, ADV, old_logps=OLD), LossSettings(epsilon_high=0.28))
    torch.testing.assert_close(per_token, torch.tensor(by_hand_per_token(0.2, 0.28), dtype=D))
    assert float(per_token[0, 1]) == pytest.approx(-1.28)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_each_loss_type_reduces_by_hand(loss_type):
    """grpo: mean over completions of each one's token mean; dapo: sum over all 4 tokens / 4; dr_grpo:
    sum / (2 completions x max_completion_length 5)."""
    t = by_hand_per_token()
    row0, row1 = sum(t[0]), t[1][0]
    expected = {"grpo": (row0 / 3 + row1 / 1) / 2, "dapo": (row0 + row1) / 4, "dr_grpo": (row0 + row1) / 10}
    settings = LossSettings(loss_type=loss_type, max_completion_length=5)
    loss = grpo_loss(Rollouts(LOGPS, MASK, ADV, old_logps=OLD), settings)
    assert float(loss) == pytest.approx(expected[loss_type], rel=1e-12)


def test_dapo_divides_by_the_generation_batch_tokens_when_given():
    """A micro-batch of a larger generation batch: the token mean is over the whole batch's tokens (trl's
    num_items_in_batch), so micro-batch losses add up to the whole batch's."""
    r = Rollouts(LOGPS, MASK, ADV, old_logps=OLD)
    whole = grpo_loss(r, LossSettings())
    halves = [grpo_loss(Rollouts(LOGPS[i:i + 1], MASK[i:i + 1], ADV[i:i + 1], old_logps=OLD[i:i + 1],
                                 tokens=4.0), LossSettings()) for i in range(2)]
    assert float(sum(halves)) == pytest.approx(float(whole), rel=1e-12)


def test_kl_term_is_trls_k3_estimator_by_hand():
    ref = torch.tensor([[-1.5, -2.0, -0.1], [-0.1, -1.0, -1.0]], dtype=D)
    beta = 0.04
    r = Rollouts(LOGPS, MASK, ADV, old_logps=OLD, ref_logps=ref)
    delta = ref - LOGPS
    k3 = [[math.exp(float(d)) - float(d) - 1 for d in row] for row in delta]
    settings = LossSettings(beta=beta, use_bias_correction_kl=False)
    expected = torch.tensor(by_hand_per_token(), dtype=D) + beta * torch.tensor(k3, dtype=D)
    torch.testing.assert_close(per_token_loss(r, settings), expected)
    assert k3[0][1] == 0.0 and k3[0][0] > 0 and k3[0][2] > 0  # equal log-probs: no divergence
    metrics = loss_metrics(r, settings)
    assert float(metrics["kl"]) == pytest.approx((k3[0][0] + k3[0][1] + k3[0][2] + k3[1][0]) / 4)


def test_bias_corrected_kl_is_weighed_by_the_ratio_by_hand():
    """use_bias_correction_kl (trl's default): each token's KL times pi/pi_old (DeepSeek-V3.2)."""
    ref = torch.tensor([[-1.5, -2.0, -0.1], [-0.1, -1.0, -1.0]], dtype=D)
    r = Rollouts(LOGPS, MASK, ADV, old_logps=OLD, ref_logps=ref)
    k3 = [[math.exp(float(d)) - float(d) - 1 for d in row] for row in ref - LOGPS]
    ratio = torch.exp(LOGPS - OLD).tolist()
    corrected = torch.tensor([[k * q for k, q in zip(x, y, strict=True)]
                              for x, y in zip(k3, ratio, strict=True)], dtype=D)
    expected = torch.tensor(by_hand_per_token(), dtype=D) + 0.04 * corrected
    torch.testing.assert_close(per_token_loss(r, LossSettings(beta=0.04)), expected)


def test_beta_without_reference_logps_is_one_clear_error():
    with pytest.raises(ValueError, match="grpo.beta > 0 needs the reference"):
        grpo_loss(Rollouts(LOGPS, MASK, ADV), LossSettings(beta=0.1))


def test_clip_ratio_metrics_by_hand():
    """Clipped above with A > 0: token (0, 1) only (ratio 1.65); below with A < 0: none (row 1's ratio is
    1.35); 4 completion tokens."""
    metrics = loss_metrics(Rollouts(LOGPS, MASK, ADV, old_logps=OLD), LossSettings())
    assert float(metrics["clip_ratio/high_mean"]) == pytest.approx(1 / 4)
    assert float(metrics["clip_ratio/low_mean"]) == 0.0
    assert float(metrics["clip_ratio/region_mean"]) == pytest.approx(1 / 4)


def test_group_advantages_by_hand():
    """Two prompts x 3 generations: rewards [1, 0, 0] -> mean 1/3, std (Bessel) sqrt(1/3);
    [2, 2, 2] -> 0 (no signal, not NaN)."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0, 2.0, 2.0], dtype=D)
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    expected = [(2 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4), (-1 / 3) / (std + 1e-4), 0, 0, 0]
    torch.testing.assert_close(group_advantages(rewards, 3), torch.tensor(expected, dtype=D))
    torch.testing.assert_close(group_advantages(rewards, 3, "none"),
                               torch.tensor([2 / 3, -1 / 3, -1 / 3, 0, 0, 0], dtype=D))
    batch_std = float(rewards.std())
    torch.testing.assert_close(group_advantages(rewards, 3, "batch"),
                               torch.tensor([2 / 3, -1 / 3, -1 / 3, 0, 0, 0], dtype=D) / (batch_std + 1e-4))


def test_std_scaling_of_one_generation_is_one_clear_error():
    with pytest.raises(ValueError, match="num_generations=1.*scale_rewards=none"):
        group_advantages(torch.tensor([1.0, 0.0]), 1)
    torch.testing.assert_close(group_advantages(torch.tensor([1.0, 0.0]), 1, "none"), torch.zeros(2))


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_one_step_per_batch_is_reinforce_with_a_baseline(loss_type):
    """On the first optimisation step (old = the policy), the ratio is 1 and the loss's gradient is that of
    -sum_i A_i * w_i * sum_t log pi(o_it), REINFORCE with the group mean as baseline, weighed per token as
    the loss type weighs (grpo 1/(B |o_i|), dapo 1/sum|o|, dr_grpo 1/(B L))."""
    torch.manual_seed(0)
    logits = torch.randn(4, 3, 7, dtype=D, requires_grad=True)
    targets = torch.randint(0, 7, (4, 3))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=D)
    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.0], dtype=D), 2)
    settings = LossSettings(loss_type=loss_type, max_completion_length=3)

    logps = token_logps(logits, targets)
    r = Rollouts(logps, mask, advantages)
    torch.testing.assert_close(r.ratio, torch.ones_like(logps))
    loss = grpo_loss(r, settings)
    grad, = torch.autograd.grad(loss, logits)

    lengths = mask.sum(1, keepdim=True)
    weight = {"grpo": 1 / (4 * lengths), "dapo": 1 / mask.sum(), "dr_grpo": torch.full_like(lengths, 1 / 12)}
    surrogate = -(advantages.unsqueeze(1) * weight[loss_type] * token_logps(logits, targets) * mask).sum()
    expected, = torch.autograd.grad(surrogate, logits)
    torch.testing.assert_close(grad, expected)
    assert grad.abs().sum() > 0
