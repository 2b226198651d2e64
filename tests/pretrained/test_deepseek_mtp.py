"""DeepSeek-V3's multi-token-prediction layer in a Hugging Face folder, as the Hub's files ship it: after
the last layer, `model.layers.<n>.*` holds a V3 decoder layer plus enorm, hnorm, eh_proj, shared_head.norm
and copies of the token table (embed_tokens) and head (shared_head.head). zoo loads it as model.mtp (the
weights decide: transformers writes num_nextn_predict_layers 1 into every folder), or leaves it out with a
warning under mtp=None; its logits equal a reference built from transformers' own modules (the layer run as
a one-layer DeepseekV3Model on eh_proj's output, its final norm being shared_head.norm); export writes the
layer back as it was read."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

import zoo
from tests.pretrained.decoder_checks import right_padded_logits_match
from tests.pretrained.helpers import perturbed, right_padded, saved
from tests.pretrained.test_deepseek import V3, tiny

D = V3["hidden_size"]


def _mtp_folder(tmp_path, *, copies=True):
    """A tiny V3 (3 layers) saved by transformers, its file given an MTP layer at index 3; and the reference
    pieces: the main model, the MTP layer as a one-layer transformers model and (enorm, hnorm, eh_proj)."""
    hf = tiny("v3_low_rank_q")
    n = hf.config.num_hidden_layers
    block = perturbed(DeepseekV3ForCausalLM(DeepseekV3Config(**{**V3, "num_hidden_layers": 1,
                                                                "first_k_dense_replace": 0})), seed=7)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        block.model.layers[0].mlp.gate.weight.normal_(0, 1.0, generator=gen)  # routing far from ties
        block.model.layers[0].mlp.gate.e_score_correction_bias.copy_(torch.randn(8, generator=gen) * 0.3)
        block.lm_head.weight.copy_(hf.lm_head.weight)  # the head is shared
    own = {"enorm.weight": 1 + 0.2 * torch.randn(D, generator=gen),
           "hnorm.weight": 1 + 0.2 * torch.randn(D, generator=gen),
           "eh_proj.weight": 0.2 * torch.randn(D, 2 * D, generator=gen)}
    path = saved(hf, tmp_path)
    weights = load_file(path / "model.safetensors")
    layer = {k.replace("model.layers.0.", f"model.layers.{n}."): v
             for k, v in load_file(saved(block, tmp_path, "block") / "model.safetensors").items()
             if k.startswith("model.layers.0.")}
    layer.update({f"model.layers.{n}.{k}": v for k, v in own.items()})
    layer[f"model.layers.{n}.shared_head.norm.weight"] = block.model.norm.weight.detach().clone()
    if copies:
        layer[f"model.layers.{n}.embed_tokens.weight"] = weights["model.embed_tokens.weight"].clone()
        layer[f"model.layers.{n}.shared_head.head.weight"] = weights["lm_head.weight"].clone()
    save_file({**weights, **layer}, path / "model.safetensors", metadata={"format": "pt"})
    assert json.loads((path / "config.json").read_text())["num_nextn_predict_layers"] == 1
    return path, hf, block, own


def _rms(x, weight):
    return F.rms_norm(x, (x.shape[-1],), weight, DeepseekV3Config().rms_norm_eps)


def _reference_mtp_logits(hf, block, own, ids, mask):
    """Position t (< T - 1): eh_proj([enorm(embedding of token t + 1) | hnorm(h_t)]) through the layer, its
    norm and the shared head; h is transformers' final (normed) hidden state."""
    h = hf.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, C)
    embedded = hf.model.embed_tokens(ids[:, 1:])
    x = torch.cat([_rms(embedded, own["enorm.weight"]), _rms(h[:, :-1], own["hnorm.weight"])], -1)
    return block(inputs_embeds=x @ own["eh_proj.weight"].T, attention_mask=mask[:, :-1]).logits


def test_the_mtp_layer_loads_and_predicts_as_the_reference(tmp_path):
    path, hf, block, own = _mtp_folder(tmp_path)
    model = zoo.from_pretrained(path)
    assert model.config.mtp.depth == 1 and len(model.decoder_stack.layers) == 3
    right_padded_logits_match(hf, model)  # the main model is as before
    ids, mask = right_padded(3, 10, 99, [10, 8, 4])
    with torch.no_grad():
        ours = model.head(model(ids, attention_mask=mask, output_mtp=True).mtp_hidden_states[0])[:, :-1]
        ref = _reference_mtp_logits(hf, block, own, ids, mask)
    counted = mask[:, 1:].bool()  # position t reads token t + 1
    assert ref[counted].abs().max() > 0.5 and (ours[counted] - ref[counted]).abs().max() < 1e-4


def test_mtp_none_leaves_the_layer_out_with_a_warning(tmp_path):
    path, hf, _, _ = _mtp_folder(tmp_path)
    with pytest.warns(UserWarning, match=r"model.layers.3.eh_proj.*left out: model.mtp is null"):
        model = zoo.from_pretrained(path, mtp=None)
    assert model.config.mtp is None and not hasattr(model.mtp, "layers")
    right_padded_logits_match(hf, model)


def test_a_transformers_folder_without_the_layer_loads_without_mtp(tmp_path):
    hf = tiny("v3_low_rank_q")
    model = zoo.from_pretrained(saved(hf, tmp_path))  # config.json says num_nextn_predict_layers 1
    assert model.config.mtp is None


def test_export_writes_the_layer_back_as_read(tmp_path):
    path, _, _, _ = _mtp_folder(tmp_path)
    model = zoo.from_pretrained(path)
    out = zoo.save_pretrained(model, tmp_path / "export")
    before, after = load_file(path / "model.safetensors"), load_file(out / "model.safetensors")
    mtp = sorted(k for k in before if k.startswith("model.layers.3."))
    assert len(mtp) > 20 and sorted(k for k in after if k.startswith("model.layers.3.")) == mtp
    for k in mtp:
        torch.testing.assert_close(after[k], before[k], rtol=0, atol=0)
    assert json.loads((out / "config.json").read_text())["num_nextn_predict_layers"] == 1
    again = zoo.from_pretrained(out)
    ids = torch.randint(3, 99, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        a, b = (m(ids, output_mtp=True).mtp_hidden_states[0] for m in (model, again))
    torch.testing.assert_close(a, b)


def test_a_copy_of_the_token_table_that_differs_is_refused(tmp_path):
    path, _, _, _ = _mtp_folder(tmp_path)
    weights = load_file(path / "model.safetensors")
    weights["model.layers.3.embed_tokens.weight"] += 1.0
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model.layers.3.embed_tokens.weight in .* differs from the model's "
                                         r"own token table.*from_pretrained\(..., mtp=None\)"):
        zoo.from_pretrained(path)
    assert zoo.from_pretrained(path, mtp=None).config.mtp is None  # with a warning


def test_a_count_the_weights_do_not_hold_is_named(tmp_path):
    path, _, _, _ = _mtp_folder(tmp_path, copies=False)
    written = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**written, "num_nextn_predict_layers": 2}))
    with pytest.raises(ValueError, match=r"config.json num_nextn_predict_layers=2 \(model.mtp.depth\) "
                                         r"disagrees with the weights: they hold multi-token-prediction "
                                         r"layers \[3\] after layers 0-2"):
        zoo.from_pretrained(path)
