"""GPT-2: decoder, learned positions, pre-LN, tanh-GELU, tied head. HF stores Conv1D weights as (in, out), the
transpose of nn.Linear's (out, in). Heads as the folder's class says: GPT2Model, GPT2LMHeadModel,
GPT2ForSequenceClassification (`score`), GPT2ForTokenClassification (`classifier`),
GPT2ForQuestionAnswering."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.config_map import PLAIN, Key
from zoo.pretrained.decoder_heads import BARE, LM, QA, SCORE, token_classifier
from zoo.pretrained.family import Checks, Family
from zoo.pretrained.tensor_map import Op, within


class GPT2(Family):
    model_type = "gpt2"
    class_prefix = "GPT2"
    lm_suffixes = ("LMHeadModel",)
    prefixes = ("transformer.",)
    heads = {"none": BARE, "lm": LM, "classifier": SCORE, "token_classifier": token_classifier("~classifier"),
             "qa": QA}
    not_loaded = {"GPT2DoubleHeadsModel": "its multiple-choice head is not a zoo head"}
    tensors = {"embed.tokens.weight": "wte.weight", "embed.positional.table.weight": "wpe.weight",
               "decoder_stack.final_norm.{p}": "ln_f.{p}", **within("decoder_stack.layers.{i}.", "h.{i}.", {
                   "self_attn.qkv.{p}": Op("t", "attn.c_attn.{p}"),
                   "self_attn.o.{p}": Op("t", "attn.c_proj.{p}"), "ffn.up.{p}": Op("t", "mlp.c_fc.{p}"),
                   "ffn.down.{p}": Op("t", "mlp.c_proj.{p}"), "norm_self.{p}": "ln_1.{p}",
                   "norm_ffn.{p}": "ln_2.{p}"})}
    keys = (
        Key("vocab_size", "vocab_size"), Key("d_model", "n_embd"), Key("n_layers", "n_layer"),
        Key("n_heads", "n_head"),
        Key("d_ff", "n_inner", None), Key("activation", "activation_function", "gelu_new", PLAIN),
        Key("norm_eps", "layer_norm_epsilon", 1e-5), Key("max_seq_len", "n_positions"),
        Key("dropout", "resid_pdrop", 0.1), Key("attn_dropout", "attn_pdrop", 0.1),
        Key("tie_embeddings", "tie_word_embeddings", True), Key("eos_id", "eos_token_id", 0, token=True),
        Key("pad_id", "pad_token_id", "eos_id", token=True),
        Key("bos_id", "bos_token_id", "eos_id", token=True),
    )
    fixed = {"arch": "decoder", "norm": "layernorm", "norm_placement": "pre", "positional": "learned",
             "bias": True}
    requires = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                "add_cross_attention": False}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        return {"d_ff": hf.get("n_inner") or 4 * settings["d_model"]}, {}

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return {"embd_pdrop": cfg.dropout}
