"""OPT: decoder, learned positions offset by 2, LayerNorm pre-norm (`do_layer_norm_before`) or post-norm,
ReLU, biases, tied head. A final LayerNorm exists only with pre-norm, unless `_remove_final_layer_norm`.
transformers reads OPT's positions from the mask (cumsum - 1); zoo's default 0..T-1 agrees at every real
token of an unpadded or right-padded batch, and left-padded batches pass position_ids = cumsum(mask) - 1.
Heads as the folder's class says: OPTModel (`decoder.*`), OPTForCausalLM, OPTForSequenceClassification
(`score`), OPTForQuestionAnswering (`qa_outputs`); transformers has no OPTForTokenClassification."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.modules.residual import uses_final_norm
from zoo.pretrained.config_map import PLAIN, Key
from zoo.pretrained.decoder_heads import LM, QA, SCORE
from zoo.pretrained.family import Checks, Family
from zoo.pretrained.heads import HeadLayout
from zoo.pretrained.tensor_map import within

# a fairseq-style layer (OPT, BART, Marian): zoo -> HF inside `layers.{i}.`
FAIRSEQ_LAYER = {
    "self_attn.qkv.{p}": ("self_attn.q_proj.{p}", "self_attn.k_proj.{p}", "self_attn.v_proj.{p}"),
    "self_attn.o.{p}": "self_attn.out_proj.{p}", "norm_self.{p}": "self_attn_layer_norm.{p}",
    "ffn.up.{p}": "fc1.{p}", "ffn.down.{p}": "fc2.{p}", "norm_ffn.{p}": "final_layer_norm.{p}",
}


class OPT(Family):
    model_type = "opt"
    class_prefix = "OPT"
    prefixes = ("model.decoder.", "decoder.")  # OPTForCausalLM; OPTModel (and the facebook/opt-* files)
    heads = {"none": HeadLayout("none", prefix="decoder."), "lm": LM, "classifier": SCORE, "qa": QA}
    tensors = {"embed.tokens.weight": "embed_tokens.weight",
               "embed.positional.table.weight": "embed_positions.weight",
               "decoder_stack.final_norm.{p}": "final_layer_norm.{p}",
               **within("decoder_stack.layers.{i}.", "layers.{i}.", FAIRSEQ_LAYER)}
    keys = (
        Key("vocab_size", "vocab_size"), Key("d_model", "hidden_size"), Key("n_layers", "num_hidden_layers"),
        Key("n_heads", "num_attention_heads"), Key("d_ff", "ffn_dim"),
        Key("activation", "activation_function", "relu", PLAIN),
        Key("norm_placement", "do_layer_norm_before", True, {True: "pre", False: "post"}),
        Key("max_seq_len", "max_position_embeddings", 2048), Key("dropout", "dropout", 0.1),
        Key("attn_dropout", "attention_dropout", 0.0), Key("tie_embeddings", "tie_word_embeddings", True),
        Key("pad_id", "pad_token_id", 1, token=True), Key("bos_id", "bos_token_id", 2, token=True),
        Key("eos_id", "eos_token_id", 2, token=True),
    )
    fixed = {"arch": "decoder", "norm": "layernorm", "norm_eps": 1e-5, "positional": "learned",
             "positional.offset": 2, "bias": True}  # OPTLearnedPositionalEmbedding reads row position + 2
    # enable_bias=False keeps the LayerNorm biases: no zoo knob
    requires = {"enable_bias": True, "layer_norm_elementwise_affine": True}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        d, pre = settings["d_model"], settings["norm_placement"] == "pre"
        proj = "word_embed_proj_dim (token width apart from hidden_size: project_in/project_out)"
        return ({"final_norm": pre and not hf.get("_remove_final_layer_norm", False)},
                {proj: (hf.get("word_embed_proj_dim") or d, d)})

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        pre = cfg.norm_placement == "pre"
        return {"word_embed_proj_dim": cfg.d_model,
                "_remove_final_layer_norm": pre and not uses_final_norm(cfg)}
