"""Packed documents (document_ids): attention stays inside each document and positions restart, so every
document's logits and loss in a packed row equal those of the document run alone. Checked for every
registered positional scheme (and every RoPE frequency scaling), on the fused SDPA path and the explicit
path (need_weights), causal and bidirectional, with padding and with sliding-window layers."""

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.inspection import trace
from zoo.modules.mask import build_mask, check_documents, document_mask, document_positions
from zoo.modules.positional import POSITIONALS
from zoo.modules.positional_settings import ROPE_SCALING
from zoo.modules.rope_scaling import ROPE_SCALINGS

V = 37
LENGTHS = (5, 7, 4)  # three documents packed into one row of 16
SCALING_KEYS = dict(factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_len=8,  # longer than every document: LongRoPE's short factors throughout
                    short_factor=[1.0, 1.5, 2.0, 3.0], long_factor=[2.0, 3.0, 5.0, 8.0])
SCHEMES = [(name, "none") for name in POSITIONALS.names() if name != "rope"]
SCHEMES += [("rope", scaling) for scaling in ROPE_SCALINGS.names()]


def build(arch: str, positional: str, rope_scaling: str = "none", **extra) -> torch.nn.Module:
    if positional == "rope":  # the scaling with the keys it reads
        reads = ROPE_SCALING.docs()[rope_scaling]
        scaling = {"name": rope_scaling, **{k: v for k, v in SCALING_KEYS.items() if k in reads}}
        positional = {"name": "rope", "scaling": scaling}
    torch.manual_seed(0)
    model = zoo.build(dict(arch=arch, vocab_size=V, d_model=16, n_heads=2, n_layers=2, max_seq_len=24,
                           positional=positional, **extra))
    with torch.no_grad():  # learned tables start near zero: make positions matter
        for name, p in model.named_parameters():
            if "positional" in name:
                p.normal_(0, 1.0)
    return model.eval()


def packed_row(lengths=LENGTHS):
    """(1, T) ids of the documents back to back, (1, T) document ids, and each document alone (1, L_i)."""
    g = torch.Generator().manual_seed(1)
    docs = [torch.randint(5, V, (1, n), generator=g) for n in lengths]
    document_ids = torch.cat([torch.full((1, n), i) for i, n in enumerate(lengths)], dim=1)
    return torch.cat(docs, dim=1), document_ids, docs


def assert_documents_run_alone(model, need_weights: bool, lengths=LENGTHS) -> None:
    ids, document_ids, docs = packed_row(lengths)
    packed = model(ids, document_ids=document_ids, need_weights=need_weights).logits  # (1, T, V)
    start = 0
    for doc in docs:
        alone = model(doc, need_weights=need_weights).logits  # (1, L, V)
        torch.testing.assert_close(packed[:, start:start + doc.shape[1]], alone, atol=1e-5, rtol=0)
        start += doc.shape[1]


@pytest.mark.parametrize("need_weights", [False, True], ids=["sdpa", "explicit"])
@pytest.mark.parametrize(("positional", "rope_scaling"), SCHEMES)
def test_packed_lm_loss_equals_each_document_alone(positional, rope_scaling, need_weights):
    model = build("decoder", positional, rope_scaling)
    ids, document_ids, docs = packed_row()
    targets = torch.cat([torch.cat([d[:, 1:], torch.full((1, 1), -100)], dim=1) for d in docs], dim=1)
    out = model(ids, document_ids=document_ids, need_weights=need_weights)
    packed = F.cross_entropy(out.logits[0], targets[0], ignore_index=-100)
    alone = [model(d, labels=d, need_weights=need_weights).loss for d in docs]  # the model shifts labels
    weights = torch.tensor([d.shape[1] - 1 for d in docs], dtype=torch.float)
    reference = (torch.stack(alone) * weights).sum() / weights.sum()  # mean over every target of every doc
    assert abs(packed.item() - reference.item()) < 1e-5
    assert_documents_run_alone(model, need_weights)


@pytest.mark.parametrize("need_weights", [False, True], ids=["sdpa", "explicit"])
@pytest.mark.parametrize(("positional", "rope_scaling"), SCHEMES)
def test_packed_encoder_documents_equal_each_alone(positional, rope_scaling, need_weights):
    assert_documents_run_alone(build("encoder", positional, rope_scaling), need_weights)


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_sliding_window_layers_stay_inside_documents(arch):
    model = build(arch, "rope", mixer={"sliding_window": 3}, layer_pattern=["local", "global"])
    assert_documents_run_alone(model, need_weights=False)
    assert_documents_run_alone(model, need_weights=True)


def test_padded_packed_rows_match_documents_alone():
    """Two rows of packed documents, the shorter right-padded (pads their own document, as the collator
    does)."""
    model = build("decoder", "learned")
    ids, document_ids, docs = packed_row((5, 7, 4))
    short, short_docs, short_parts = packed_row((3, 6))
    pad = ids.shape[1] - short.shape[1]
    batch = torch.cat([ids, F.pad(short, (0, pad))], dim=0)  # (2, 16)
    documents = torch.cat([document_ids, F.pad(short_docs, (0, pad), value=2)], dim=0)
    mask = (torch.arange(ids.shape[1]) < torch.tensor([[ids.shape[1]], [short.shape[1]]])).long()
    logits = model(batch, attention_mask=mask, document_ids=documents).logits
    assert torch.isfinite(logits).all()
    start = 0
    for doc in short_parts:
        torch.testing.assert_close(logits[1:, start:start + doc.shape[1]], model(doc).logits, atol=1e-5,
                                   rtol=0)
        start += doc.shape[1]


def test_document_mask_and_positions_by_hand():
    documents = torch.tensor([[0, 0, 1, 1, 1, 2]])
    assert document_positions(documents).tolist() == [[0, 1, 0, 1, 2, 0]]
    causal = build_mask(None, causal=True, q_len=6, k_len=6, documents=documents).mask[0, 0].int()
    assert causal.tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [0, 0, 1, 0, 0, 0],
        [0, 0, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 1],
    ]
    both = document_mask(documents)[0, 0].int()
    assert both[3].tolist() == [0, 0, 1, 1, 1, 0] and both[0].tolist() == [1, 1, 0, 0, 0, 0]
    windowed = build_mask(None, causal=True, q_len=6, k_len=6, documents=documents, window=2).local.mask[0, 0]
    assert windowed[4].int().tolist() == [0, 0, 0, 1, 1, 0]  # itself and one key before, inside its document


def test_bad_document_ids_are_refused_with_the_place():
    with pytest.raises(ValueError, match=r"row 1 goes from 2 to 1 at position 3"):
        check_documents(torch.tensor([[0, 0, 1, 1], [0, 1, 2, 1]]), (2, 4))
    with pytest.raises(ValueError, match=r"shape \(1, 4\)"):
        check_documents(torch.zeros(1, 3, dtype=torch.long), (1, 4))
    model = build("decoder", "rope")
    cache = model.new_cache()
    model(torch.tensor([[5, 6]]), cache=cache)
    with pytest.raises(ValueError, match="cannot continue a cache"):
        model(torch.tensor([[7]]), cache=cache, document_ids=torch.tensor([[0]]))


def test_trace_shows_the_document_blocks():
    model = build("decoder", "alibi")
    ids, document_ids, _ = packed_row((2, 3))
    recorded = trace(model, ids, document_ids=document_ids)
    mask = recorded.get("mask", stream="decoder").tensor[0, 0]  # (T, T): -inf hidden, else the ALiBi bias
    visible = torch.isfinite(mask).int()
    assert visible.tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0],
                                [0, 0, 1, 1, 1]]
