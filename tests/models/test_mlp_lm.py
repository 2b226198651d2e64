"""arch mlp_lm (Bengio et al. 2003) against a hand-written loop over positions: concatenate the embeddings of
the last k tokens (zeros before the start), tanh MLP, vocabulary projection."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import zoo

CFG = dict(arch="mlp_lm", vocab_size=37, d_model=6, n_heads=1, context_size=3, d_ff=11, activation="tanh",
           positional="none", norm="none", max_seq_len=16, tie_embeddings=False, head=dict(bias=True))


def reference_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Position by position, as the paper writes it: x = [C(w_{t-k+1}), ..., C(w_t)], y = U tanh(H x + d)."""
    k, emb = model.config.context_size, model.embed.tokens.weight
    rows = []
    for b in range(ids.shape[0]):
        out = []
        for t in range(ids.shape[1]):
            slots = [emb[ids[b, s]] if s >= 0 else torch.zeros(emb.shape[1]) for s in range(t - k + 1, t + 1)]
            h = torch.tanh(model.hidden(torch.cat(slots)))
            out.append(model.head(model.out(h)[None, None])[0, 0])
        rows.append(torch.stack(out))
    return torch.stack(rows)


def test_logits_and_loss_match_the_paper_written_out():
    torch.manual_seed(0)
    model = zoo.build(CFG).eval()
    for p in model.parameters():  # biases are zero at init: make them count
        torch.nn.init.normal_(p, 0, 0.3)
    ids = torch.randint(0, 37, (2, 7))
    out = model(ids, labels=ids)
    ref = reference_logits(model, ids)
    torch.testing.assert_close(out.logits, ref, atol=1e-5, rtol=1e-5)
    expected = F.cross_entropy(ref[:, :-1].reshape(-1, 37), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected, atol=1e-6, rtol=1e-6)


def test_padding_reads_as_before_the_start_and_generation_crops_to_the_window():
    torch.manual_seed(1)
    model = zoo.build(CFG).eval()
    ids = torch.randint(0, 37, (1, 5))
    padded = torch.cat([torch.zeros(1, 2, dtype=torch.long), ids], dim=1)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
    torch.testing.assert_close(model(padded, attention_mask=mask).logits[:, 2:], model(ids).logits)
    greedy = model.generate(ids, max_new_tokens=6)[0].tolist()
    seq = ids[0].tolist()
    for _ in range(6):  # the model reads only its last k tokens, so re-running the whole sequence agrees
        seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    assert greedy == seq


@pytest.mark.parametrize("bad, match", [
    (dict(context_size=0), "context_size"),
    (dict(positional="learned"), "positional"),
    (dict(activation="swiglu"), "gated"),
])
def test_bad_config_names_the_key(bad, match):
    with pytest.raises(ValueError, match=match):
        zoo.build({**CFG, **bad})
