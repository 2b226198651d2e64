"""GPT-NeoX (Pythia): decoder, LayerNorm, parallel residual (x + attn(ln1(x)) + mlp(ln2(x))) or pre-norm,
partial rotary (rotate-half on the first `rotary_pct` of each head), biases everywhere, untied `embed_out`.
HF fuses q/k/v per head, rows ordered (head, q|k|v, feature); zoo's `qkv` rows are [q (H*D) | k | v]. Heads
as the folder's class says: GPTNeoXModel, GPTNeoXForCausalLM (`embed_out`), ...ForSequenceClassification
(`score`), ...ForTokenClassification (`classifier`), ...ForQuestionAnswering (`qa_outputs`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.config import ModelConfig
from zoo.pretrained.config_map import PLAIN, PLAIN_ROPE, Key, Rope
from zoo.pretrained.decoder_heads import BARE, QA, SCORE, CausalLMLayout, token_classifier
from zoo.pretrained.family import Checks, Family
from zoo.pretrained.tensor_map import Op, within

ROPE = Rope(PLAIN_ROPE, partial=("rotary_pct", 0.25), base="rotary_emb_base")  # 4.x keys; only unscaled RoPE


class GPTNeoX(Family):
    model_type = "gpt_neox"
    class_prefix = "GPTNeoX"
    prefixes = ("gpt_neox.",)
    heads = {"none": BARE, "lm": CausalLMLayout("lm", proj="~embed_out", alias="~lm_head"),  # lm_head: 5.x
             "classifier": SCORE, "token_classifier": token_classifier("~classifier"), "qa": QA}
    tensors = {"embed.tokens.weight": "embed_in.weight",
               "decoder_stack.final_norm.{p}": "final_layer_norm.{p}",
               **within("decoder_stack.layers.{i}.", "layers.{i}.", {
                   "self_attn.qkv.{p}": Op("heads", "attention.query_key_value.{p}"),
                   "self_attn.o.{p}": "attention.dense.{p}", "ffn.up.{p}": "mlp.dense_h_to_4h.{p}",
                   "ffn.down.{p}": "mlp.dense_4h_to_h.{p}", "norm_self.{p}": "input_layernorm.{p}",
                   "norm_ffn.{p}": "post_attention_layernorm.{p}"})}
    keys = (
        Key("vocab_size", "vocab_size"), Key("d_model", "hidden_size"), Key("n_layers", "num_hidden_layers"),
        Key("n_heads", "num_attention_heads"), Key("d_ff", "intermediate_size"),
        Key("activation", "hidden_act", "gelu", PLAIN), Key("norm_eps", "layer_norm_eps", 1e-5),
        Key("norm_placement", "use_parallel_residual", True, {True: "parallel", False: "pre"}),
        Key("max_seq_len", "max_position_embeddings", 2048), Key("dropout", "hidden_dropout", 0.0),
        Key("attn_dropout", "attention_dropout", 0.0), Key("tie_embeddings", "tie_word_embeddings", False),
        Key("eos_id", "eos_token_id", 0, token=True), Key("pad_id", "pad_token_id", "eos_id", token=True),
        Key("bos_id", "bos_token_id", "eos_id", token=True),
    )
    fixed = {"arch": "decoder", "norm": "layernorm", "positional": "rope", "positional.layout": "half",
             "bias": True}
    # attention_bias=False drops the attention biases but keeps the MLP and LayerNorm ones: no zoo knob
    requires = {"attention_bias": True}

    def more_from_hf(self, hf: Mapping[str, Any], settings: dict[str, Any]) -> tuple[dict[str, Any], Checks]:
        return ROPE.from_hf(hf)

    def more_to_hf(self, cfg: ModelConfig) -> dict[str, Any]:
        return ROPE.to_hf(cfg)
