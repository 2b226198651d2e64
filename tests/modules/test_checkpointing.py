"""The memory levers give the plain computation's numbers: activation checkpointing the same gradients
(dropout included: the RNG is replayed) while really recomputing each layer, and the chunked cross-entropy
the same loss and gradients as cross-entropy over the full logits, without ever making a (B*T, V) tensor
(checked by recording every tensor an operator returns, forward and backward)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.models.tiny import tiny
from zoo.modules.block import Block
from zoo.modules.checkpointing import chunked_cross_entropy, set_activation_checkpointing
from zoo.modules.heads import lm_loss
from zoo.utils import IGNORE_INDEX


def _batch(model, b=2, t=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, model.config.vocab_size, (b, t), generator=gen)
    if model.is_encoder_decoder:
        return {"input_ids": ids, "decoder_input_ids": ids.flip(1), "labels": ids}
    return {"input_ids": ids, "labels": ids}


def _grads(model, batch, seed=0):
    model.zero_grad()
    torch.manual_seed(seed)  # the same dropout draws for both runs
    model(**batch).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("preset", ["gpt_nano", "llama_small", "bert_small", "transformer_tiny"])
def test_activation_checkpointing_gives_the_same_gradients_and_recomputes(preset):
    plain = tiny(preset, dropout=0.1).train()
    checkpointed = tiny(preset, dropout=0.1).train()
    checkpointed.load_state_dict(plain.state_dict())
    assert set_activation_checkpointing(checkpointed) >= 1
    calls = []
    for block in (m for m in checkpointed.modules() if isinstance(m, Block)):
        block.register_forward_pre_hook(lambda *_: calls.append(1))
    n_blocks = sum(isinstance(m, Block) for m in checkpointed.modules())
    batch = _batch(plain)
    expected, got = _grads(plain, batch), _grads(checkpointed, batch)
    assert len(calls) == 2 * n_blocks  # every layer ran again in backward
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=1e-6, msg=name)


def test_activation_checkpointing_leaves_inference_alone():
    model = tiny("gpt_nano").eval()
    set_activation_checkpointing(model)
    calls = []
    for block in (m for m in model.modules() if isinstance(m, Block)):
        block.register_forward_pre_hook(lambda *_: calls.append(1))
    ids = _batch(model)["input_ids"]
    model.generate(ids, max_new_tokens=2)  # KV cache, no grad: plain calls
    assert len(calls) == 2 * len(model.decoder_stack.layers)


def _head_setup(vocab=301, softcap=None):
    model = tiny("gpt_nano", vocab_size=vocab, head={"softcap": softcap}).train()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (3, 20), generator=gen)
    targets = torch.randint(5, vocab, (3, 20), generator=gen)
    targets[1, 6:] = IGNORE_INDEX  # padding is ignored by both
    return model, ids, targets


@pytest.mark.parametrize("chunk", [7, 60, 1000])
@pytest.mark.parametrize("softcap", [None, 5.0])
def test_chunked_cross_entropy_equals_the_full_loss_and_gradients(chunk, softcap):
    model, ids, targets = _head_setup(softcap=softcap)
    full = lm_loss(model(ids).logits, targets, shift=False)
    full.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    hidden = model(ids, skip_head=True).hidden_states
    chunked = chunked_cross_entropy(hidden, model.head, targets, chunk)
    chunked.backward()
    torch.testing.assert_close(chunked, full, rtol=0, atol=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], rtol=0, atol=1e-6, msg=name)


class _LargestVocabTensor(TorchDispatchMode):
    """Records the most rows of any operator output whose last dimension is the vocabulary size (rows: the
    product of the other dimensions), leaving out the (d_model, V) head weight, its transpose and gradient."""

    def __init__(self, vocab: int, d_model: int) -> None:
        super().__init__()
        self.vocab, self.d_model, self.rows = vocab, d_model, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[-1] == self.vocab:
                rows = t.numel() // self.vocab
                self.rows = max(self.rows, rows if rows != self.d_model else 0)
        return out


def test_chunked_cross_entropy_never_makes_the_full_logits():
    model, ids, targets = _head_setup(vocab=307)
    n = targets.numel()  # 60 positions
    with _LargestVocabTensor(307, model.config.d_model) as seen:
        hidden = model(ids, skip_head=True).hidden_states
        chunked_cross_entropy(hidden, model.head, targets, 8).backward()
    assert 0 < seen.rows <= 8 < n  # one chunk's logits at a time, in forward and in backward
    # the check does see the plain path's full logits
    with _LargestVocabTensor(307, model.config.d_model) as seen:
        lm_loss(model(ids).logits, targets, shift=False).backward()
    assert seen.rows == n


def test_chunked_cross_entropy_refuses_bad_arguments():
    model, ids, targets = _head_setup()
    hidden = model(ids, skip_head=True).hidden_states
    with pytest.raises(ValueError, match="chunk_size must be a positive integer, got 0"):
        chunked_cross_entropy(hidden, model.head, targets, 0)
    with pytest.raises(ValueError, match="must agree"):
        chunked_cross_entropy(hidden, model.head, targets[:, :5], 4)
    with pytest.raises(ValueError, match="skip_head=True returns no logits"):
        model(ids, labels=ids, skip_head=True)
