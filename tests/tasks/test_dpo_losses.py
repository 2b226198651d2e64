"""The DPO loss registry against worked references: closed forms with the policy equal to the reference,
torchtune's unit-test numbers, and trl's own DPOTrainer loss code (its `_compute_loss`, driven on given
per-token log-probs; trl is in the dev extra; written against trl 1.16's `_compute_loss`) for every loss
type, the RPO term and the reward metrics."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from zoo.tasks.dpo_losses import DPO_LOSSES, DPOSettings, PairLogps, dpo_loss, dpo_settings, reward_metrics


def pairs_of(chosen, rejected, ref_chosen, ref_rejected, tokens=None) -> PairLogps:
    t = [torch.tensor(x, dtype=torch.float64) for x in (chosen, rejected, ref_chosen, ref_rejected)]
    n = torch.ones_like(t[0]) if tokens is None else torch.tensor(tokens, dtype=torch.float64)
    return PairLogps(*t, chosen_tokens=n, rejected_tokens=n)


CLOSED_FORM = {"sigmoid": math.log(2), "hinge": 1.0, "ipo": (1 / (2 * 0.1)) ** 2, "robust": math.log(2)}


def test_every_loss_type_has_a_closed_form_here():
    assert set(CLOSED_FORM) == set(DPO_LOSSES.names())


@pytest.mark.parametrize("loss_type", sorted(CLOSED_FORM))
def test_policy_equal_to_reference_gives_the_closed_form(loss_type):
    """Zero margin: sigmoid ln 2, hinge 1, IPO (1/(2 beta))^2 = 25 at beta 0.1, robust ln 2 at any
    smoothing."""
    logps = [-3.0, -0.2, -17.5]
    pairs = pairs_of(logps, [-1.0, -9.0, -0.4], logps, [-1.0, -9.0, -0.4], tokens=[3, 1, 7])
    extra = {"label_smoothing": 0.2} if loss_type == "robust" else {}
    settings = DPOSettings(loss_type=loss_type, beta=0.1, **extra)
    per_pair = DPO_LOSSES.get(loss_type).per_pair(pairs, settings)
    torch.testing.assert_close(per_pair, torch.full((3,), CLOSED_FORM[loss_type], dtype=torch.float64))


def test_sigmoid_on_torchtune_unit_test_inputs():
    pairs = pairs_of([-0.5, -10, -1], [-0.1, -30, -21], [-0.5, -10.1, -0.1], [-0.1, -20.1, -0.1])
    per_pair = DPO_LOSSES.get("sigmoid").per_pair(pairs, DPOSettings(beta=0.1))
    torch.testing.assert_close(per_pair, torch.tensor([0.693147, 0.313262, 0.126928], dtype=torch.float64),
                               atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------ trl's own code
class _Accelerator:
    device = torch.device("cpu")

    @staticmethod
    def gather(x):
        return x

    gather_for_metrics = gather


def trl_loss(per_token: torch.Tensor, ref_per_token: torch.Tensor, completion: torch.Tensor,
             loss_types: list[str], loss_weights: list[float], beta: float, label_smoothing: float = 0.0):
    """trl's DPOTrainer._compute_loss run on a batch [chosen; rejected] whose model returns `per_token`
    (2B, T-1) log-probs (0 off the completion), reference log-probs precomputed: (loss, metrics)."""
    n = per_token.shape[0] // 2
    ref = ref_per_token.sum(1)
    zeros = torch.zeros_like(per_token)
    outputs = SimpleNamespace(log_probs=per_token, entropy=zeros, mean_logits=zeros,
                              is_top1=torch.zeros_like(per_token, dtype=torch.bool))
    model = lambda **kwargs: outputs  # noqa: E731  (the model's forward, as trl calls it)
    trainer = SimpleNamespace(
        model=SimpleNamespace(training=True), accelerator=_Accelerator(), aux_loss_enabled=False,
        ld_alpha=None, precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=loss_types,
        loss_weights=loss_weights, beta=beta, label_smoothing=label_smoothing, use_weighting=False,
        _metrics={"train": defaultdict(list)}, _total_train_tokens=0, _tp_size=1)
    inputs = {"input_ids": torch.zeros(completion.shape, dtype=torch.long),
              "attention_mask": torch.ones_like(completion), "completion_mask": completion,
              "ref_chosen_logps": ref[:n], "ref_rejected_logps": ref[n:]}
    from trl import DPOTrainer

    loss = DPOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)
    return loss, {k: v[-1] for k, v in trainer._metrics["train"].items()}


def random_batch(n: int, length: int, seed: int):
    """Per-token log-probs (2n, length - 1) of policy and reference, zero off each completion, and the
    completion mask (2n, length): a prompt of 1-3 tokens, then 1.. tokens of completion, then padding."""
    g = torch.Generator().manual_seed(seed)
    completion = torch.zeros(2 * n, length, dtype=torch.long)
    for row in range(2 * n):
        start = int(torch.randint(1, 4, (1,), generator=g))
        stop = int(torch.randint(start + 1, length + 1, (1,), generator=g))
        completion[row, start:stop] = 1
    shifted = completion[:, 1:].double()
    policy = -torch.rand(2 * n, length - 1, generator=g, dtype=torch.float64) * 4 * shifted
    ref = -torch.rand(2 * n, length - 1, generator=g, dtype=torch.float64) * 4 * shifted
    return policy, ref, completion


def zoo_pairs(policy, ref, completion) -> PairLogps:
    n = policy.shape[0] // 2
    s, r, tokens = policy.sum(1), ref.sum(1), completion[:, 1:].sum(1).double()
    return PairLogps(s[:n], s[n:], r[:n], r[n:], tokens[:n], tokens[n:])


@pytest.mark.parametrize("loss_type", sorted(CLOSED_FORM))
@pytest.mark.parametrize("sft_weight", [0.0, 0.7])
def test_equals_trl_dpo_trainer_loss_and_metrics(loss_type, sft_weight):
    seed = sorted(CLOSED_FORM).index(loss_type) + int(sft_weight * 10)
    policy, ref, completion = random_batch(5, 9, seed=seed)
    smoothing = 0.15 if loss_type == "robust" else 0.0
    types, weights = [loss_type], [1.0]
    if sft_weight:
        types, weights = [loss_type, "sft"], [1.0, sft_weight]
    expected, metrics = trl_loss(policy, ref, completion, types, weights, beta=0.3, label_smoothing=smoothing)
    settings = DPOSettings(loss_type=loss_type, beta=0.3, label_smoothing=smoothing, sft_weight=sft_weight)
    pairs = zoo_pairs(policy, ref, completion)
    torch.testing.assert_close(dpo_loss(pairs, settings), expected, atol=1e-10, rtol=0)
    ours = {k: float(v) for k, v in reward_metrics(pairs, 0.3).items()}
    assert set(ours) <= set(metrics)
    for name, value in ours.items():
        assert value == pytest.approx(metrics[name], abs=1e-10), name


# ----------------------------------------------------------------------------------------- settings
def test_settings_defaults_and_refusals():
    assert dpo_settings({}) == DPOSettings(loss_type="sigmoid", beta=0.1)
    with pytest.raises(ValueError, match=r"dpo.loss_type: Unknown DPO loss 'sigmod'.*Did you mean 'sigmoid'"):
        dpo_settings({"loss_type": "sigmod"})
    with pytest.raises(ValueError, match=r"dpo.beta"):
        dpo_settings({"beta": 0})
    with pytest.raises(ValueError, match=r"dpo.label_smoothing=0.1 has no effect with dpo.loss_type=sigmoid: "
                                         r"only dpo.loss_type=robust reads it"):
        dpo_settings({"label_smoothing": 0.1})
    with pytest.raises(ValueError, match=r"dpo.label_smoothing"):
        dpo_settings({"loss_type": "robust", "label_smoothing": 0.5})
    with pytest.raises(ValueError, match=r"dpo.betta"):
        dpo_settings({"betta": 0.1})
