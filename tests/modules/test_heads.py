"""The output heads (zoo.modules.heads): every registered head on an encoder and a decoder trains a step;
pooling, the classifier's pieces and the QA loss against hand-worked values; the state-dict names and the
defaults other code (HF conversion) relies on."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.modules.head_settings import HEAD
from zoo.modules.heads import HEADS, POOLINGS, pool_first, pool_last

TINY = dict(vocab_size=40, d_model=16, n_heads=2, n_layers=2, max_seq_len=16, dropout=0.0)
def tiny(arch: str, head: str, keys: dict | None = None, **knobs):
    """A tiny model with `model.head={name: head, **keys}` (3 labels on a head that reads num_labels)."""
    labels = {"num_labels": 3} if "num_labels" in HEAD.keys(head) else {}
    return zoo.build(dict(TINY, arch=arch, head={"name": head, **labels, **(keys or {})}, **knobs))


def random_targets(model, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Targets of the shape and range the head declares (class ids, or positions within the sequence)."""
    head, gen = type(model.head), torch.Generator().manual_seed(0)
    high = head.label_classes(model.config) or ids.shape[1]
    return {name: torch.randint(0, high, head.target_shape(tuple(ids.shape)), generator=gen)
            for name in head.targets}


# every head, and each head that reads model.head.pooler once more with a pooler
HEAD_VARIANTS = [(h, None) for h in HEADS.names()] + [(h, "relu") for h in HEADS.names()
                                                      if "pooler" in HEAD.keys(h)]


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
@pytest.mark.parametrize(("head", "pooler"), HEAD_VARIANTS)
def test_every_head_trains_a_step(arch, head, pooler):
    """Forward, loss (or a sum of the hidden states for head=none), backward: finite, every parameter gets
    a gradient."""
    model = tiny(arch, head, {"pooler": pooler} if pooler else {}).train()
    ids = torch.randint(3, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    targets = random_targets(model, ids)
    out = model(ids, attention_mask=mask, **targets)
    if targets:
        loss = out.loss
    else:
        assert out.loss is None and out.logits is None
        loss = out.hidden_states.sum() + (out.pooler_output.sum() if out.pooler_output is not None else 0)
    assert torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder_decoder"])
def test_output_hidden_states_are_the_embeddings_then_every_layer(arch):
    """n_layers + 1 tensors; the first is the embedding output, the last the returned hidden states."""
    model = tiny(arch, "none").eval()
    ids = torch.randint(3, 40, (2, 6))
    args = (ids, ids) if arch == "encoder_decoder" else (ids,)
    out = model(*args, output_hidden_states=True)
    assert len(out.all_hidden_states) == TINY["n_layers"] + 1
    assert out.all_hidden_states[-1] is out.last_hidden_state
    embed = model.tgt_embed if arch == "encoder_decoder" else model.embed
    torch.testing.assert_close(out.all_hidden_states[0], embed(ids, torch.arange(6).expand(2, 6), None))
    if arch == "encoder_decoder":
        assert len(out.encoder_all_hidden_states) == TINY["n_layers"] + 1
        assert out.encoder_all_hidden_states[-1] is out.encoder_hidden_states
    assert model(*args).all_hidden_states is None  # only when asked


# ------------------------------------------------------------------------------------------ pooling

# (B, T, C): row b, position t is recognisable
X = torch.arange(2 * 4 * 3, dtype=torch.float).reshape(2, 4, 3)


def test_pool_first_is_position_zero():
    assert torch.equal(pool_first(X, None, None, 0), X[:, 0])


@pytest.mark.parametrize(("ids", "mask", "pad_id", "positions"), [
    ([[5, 6, 0, 0], [5, 6, 7, 8]], None, 0, [1, 3]),  # right padding, no mask: rightmost id != pad
    ([[5, 0, 6, 0], [0, 0, 0, 0]], None, 0, [2, 0]),  # a pad inside; a row of pads pools 0 (argmax of zeros)
    ([[5, 6, 0, 0], [5, 6, 7, 8]], None, None, [3, 3]),  # no pad id: the last position
    ([[5, 6, 7, 0], [9, 9, 9, 9]], [[1, 1, 0, 0], [0, 0, 1, 1]], 0, [1, 3]),  # the mask wins; left padding
])
def test_pool_last_is_the_last_real_token(ids, mask, pad_id, positions):
    got = pool_last(X, torch.tensor(ids), None if mask is None else torch.tensor(mask), pad_id)
    assert torch.equal(got, X[torch.arange(2), torch.tensor(positions)])


@pytest.mark.parametrize(("mask", "means"), [
    (None, [X[0].mean(0), X[1].mean(0)]),  # no mask: every position
    ([[1, 1, 0, 0], [1, 1, 1, 1]], [(X[0, 0] + X[0, 1]) / 2, X[1].mean(0)]),  # right padding
    ([[0, 0, 0, 1], [0, 0, 0, 0]], [X[0, 3], torch.zeros(3)]),  # left padding; no real token: zeros
])
def test_pool_mean_is_the_mean_of_the_real_tokens(mask, means):
    """ModernBERT's classifier_pooling=mean: sum(x * mask) / sum(mask); pad ids are not read."""
    ids = torch.zeros(2, 4, dtype=torch.long)  # all pad ids: the mask alone decides
    got = POOLINGS.get("mean")(X, ids, None if mask is None else torch.tensor(mask), 0)
    torch.testing.assert_close(got, torch.stack(means))


# ------------------------------------------------------------------------------- heads by hand

def dense_head(x: torch.Tensor, head) -> torch.Tensor:
    """ModernBERT's prediction head by hand: LayerNorm(gelu(dense(x))), the norm without bias (bias=False)."""
    d, n = head.transform, head.transform_norm
    assert d.bias is None and n.bias is None
    return F.layer_norm(F.gelu(F.linear(x, d.weight)), (x.shape[-1],), n.weight, eps=1e-5)


@pytest.mark.parametrize("head", ["classifier", "token_classifier", "qa"])
def test_head_dense_is_dense_activation_norm_before_the_projection(head):
    """model.head.dense: ModernBERT's dense + activation + LayerNorm, on the mean-pooled vector (classifier,
    pool=mean, no pooler) or at every position (token_classifier, qa)."""
    pooled = {"pool": "mean", "pooler": "none"} if head == "classifier" else {}
    model = tiny("encoder", head, {"dense": True, **pooled}, bias=False, activation="geglu",
                 norm_eps=1e-5).eval()
    ids, mask = torch.randint(3, 40, (2, 5)), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    out = model(ids, attention_mask=mask)
    h, c = out.hidden_states, model.head.proj
    if head == "classifier":
        m = mask[..., None].float()
        h = (h * m).sum(1) / m.sum(1)
    torch.testing.assert_close(out.logits, F.linear(dense_head(h, model.head), c.weight, c.bias))


def test_encoder_classifier_is_tanh_pooler_then_projection():
    model = tiny("encoder", "classifier").eval()
    ids = torch.randint(3, 40, (3, 5))
    out = model(ids)
    h, p, c = out.hidden_states, model.head.pool, model.head.proj
    torch.testing.assert_close(out.logits,
                               F.linear(torch.tanh(F.linear(h[:, 0], p.weight, p.bias)), c.weight, c.bias))


def test_decoder_classifier_projects_the_last_real_token_without_bias():
    model = tiny("decoder", "classifier").eval()
    ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    mask = (ids != 0).long()
    out = model(ids, attention_mask=mask)
    assert model.head.pool is None and model.head.proj.bias is None
    torch.testing.assert_close(out.logits, out.hidden_states[[0, 1], [2, 4]] @ model.head.proj.weight.T)


def test_relu_pooler_and_projection_bias_knobs():
    """DistilBERT's classifier: relu pooler; a decoder classifier may ask for a bias."""
    model = tiny("encoder", "classifier", {"pooler": "relu"}).eval()
    out = model(torch.randint(3, 40, (2, 5)))
    h, p, c = out.hidden_states, model.head.pool, model.head.proj
    torch.testing.assert_close(out.logits,
                               F.linear(F.relu(F.linear(h[:, 0], p.weight, p.bias)), c.weight, c.bias))
    assert tiny("decoder", "classifier", {"proj_bias": True}).head.proj.bias is not None
    assert tiny("encoder", "qa", {"proj_bias": False}).head.proj.bias is None


def test_qa_loss_by_hand():
    """Mean of the start and end cross-entropies; a position >= T is not counted (transformers clamps it to T
    and ignores T)."""
    model = tiny("encoder", "qa").eval()
    ids = torch.randint(3, 40, (3, 6))
    start, end = torch.tensor([0, 2, 6]), torch.tensor([1, 9, 5])
    out = model(ids, start_positions=start, end_positions=end)
    s, e = out.start_logits.log_softmax(-1), out.end_logits.log_softmax(-1)
    start_ce = -(s[0, 0] + s[1, 2]) / 2  # row 2's start (6 = T) not counted
    end_ce = -(e[0, 1] + e[2, 5]) / 2  # row 1's end (9 > T) not counted
    torch.testing.assert_close(out.loss, (start_ce + end_ce) / 2)
    torch.testing.assert_close(out.logits[..., 0], out.start_logits)
    with pytest.raises(ValueError, match=r"start_positions hold -1; a position is a token index >= 0"):
        model(ids, start_positions=torch.tensor([-1, 0, 0]), end_positions=end)


def test_token_classifier_loss_by_hand():
    model = tiny("decoder", "token_classifier").eval()
    ids = torch.randint(3, 40, (1, 4))
    labels = torch.tensor([[2, -100, 0, -100]])
    out = model(ids, labels=labels)
    lp = out.logits.log_softmax(-1)
    torch.testing.assert_close(out.loss, -(lp[0, 0, 2] + lp[0, 2, 0]) / 2)  # no shift, -100 not counted


def test_classifier_all_ignored_labels_give_zero_not_nan():
    model = tiny("encoder", "classifier").eval()
    out = model(torch.randint(3, 40, (2, 4)), labels=torch.tensor([-100, -100]))
    assert out.loss.item() == 0.0 and not math.isnan(out.loss.item())


# ------------------------------------------------------------------------------- targets refused

@pytest.mark.parametrize(("head", "kwargs", "message"), [
    ("none", {"labels": torch.zeros(2, 4, dtype=torch.long)},
     r"labels is not a target of model.head=none; it takes no"),
    ("qa", {"labels": torch.zeros(2, dtype=torch.long)}, r"labels is not a target of model.head=qa; it takes "
                                                            r"start_positions, end_positions"),
    ("qa", {"start_positions": torch.zeros(2, dtype=torch.long)},
     r"needs start_positions and end_positions together"),
    ("classifier", {"start_positions": torch.zeros(2, dtype=torch.long)}, r"it takes labels"),
    ("token_classifier", {"labels": torch.zeros(2, dtype=torch.long)},
     r"labels must be an integer tensor of shape "
               r"\(2, 4\)"),
    ("token_classifier", {"labels": torch.full((2, 4), 3)},
     r"labels hold values in \[3, 3\]; allowed are \[0, 3\)"),
])
def test_wrong_targets_are_refused_naming_what_the_head_takes(head, kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny("encoder", head)(torch.randint(3, 40, (2, 4)), **kwargs)


@pytest.mark.parametrize("head", sorted(set(HEADS.names()) - {"lm"}))
def test_decoding_needs_the_vocabulary_head(head):
    with pytest.raises(ValueError,
                       match=rf"logits_to_keep=1 keeps vocabulary logits .*model.head={head} has none"):
        tiny("decoder", head)(torch.randint(3, 40, (1, 4)), logits_to_keep=1)


# ------------------------------------------------------------------------- names and defaults (a contract)

@pytest.mark.parametrize(("arch", "head", "keys", "names"), [
    ("encoder", "none", {}, set()),
    ("decoder", "none", {}, set()),
    ("encoder", "none", {"pooler": "tanh"}, {"head.pool.weight", "head.pool.bias"}),
    ("encoder", "classifier", {},
     {"head.pool.weight", "head.pool.bias", "head.proj.weight", "head.proj.bias"}),
    ("encoder", "classifier", {"pooler": "none"}, {"head.proj.weight", "head.proj.bias"}),
    ("decoder", "classifier", {}, {"head.proj.weight"}),
    ("decoder", "classifier", {"pooler": "tanh", "proj_bias": True},
     {"head.pool.weight", "head.pool.bias", "head.proj.weight", "head.proj.bias"}),
    ("encoder", "token_classifier", {}, {"head.proj.weight", "head.proj.bias"}),
    ("decoder", "token_classifier", {"proj_bias": False}, {"head.proj.weight"}),
    ("encoder", "qa", {}, {"head.proj.weight", "head.proj.bias"}),
    *((("encoder", h, {"dense": True, **pool},
        {"head.transform.weight", "head.transform_norm.weight", "head.proj.weight", "head.proj.bias"}))
      for h, pool in (("classifier", {"pooler": "none"}), ("token_classifier", {}), ("qa", {}))),
    ("decoder", "qa", {}, {"head.proj.weight", "head.proj.bias"}),
])
def test_head_tensor_names(arch, head, keys, names):
    model = tiny(arch, head, keys, **({"bias": False} if keys.get("dense") else {}))
    assert {k for k in model.state_dict() if k.startswith("head.")} == names


@pytest.mark.parametrize(("arch", "pooling"), [("encoder", "first"), ("decoder", "last")])
def test_pooling_defaults_follow_the_stack(arch, pooling):
    assert tiny(arch, "classifier").head.pooling == pooling
    assert tiny(arch, "classifier", {"pool": "first"}).head.pooling == "first"
