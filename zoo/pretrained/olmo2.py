"""OLMo 2: Llama's tensors and keys with the norms moved inside the residual branch, on each sub-layer's
output (`post_attention_layernorm` / `post_feedforward_layernorm` -> zoo `post_norm_self` / `post_norm_ffn`,
wiring `post_sublayer`; no `input_layernorm`), and an RMSNorm over the whole q and k projections before the
head split (model.mixer.qk_norm_scope: all). `attention_bias` biases q, k, v and o but not the MLP: zoo
cannot."""

from __future__ import annotations

from zoo.pretrained.decoder_heads import NO_QA
from zoo.pretrained.llama import DECODER, TENSORS, LlamaShaped
from zoo.pretrained.tensor_map import within


class Olmo2(LlamaShaped):
    model_type = "olmo2"
    class_prefix = "Olmo2"
    heads = {head: NO_QA[head] for head in ("none", "lm", "classifier")}  # no Olmo2ForTokenClassification
    tensors = {**TENSORS, **within("decoder_stack.layers.{i}.", "layers.{i}.", {
        "post_norm_self.weight": "post_attention_layernorm.weight",
        "post_norm_ffn.weight": "post_feedforward_layernorm.weight"})}
    fixed = {**DECODER, "norm_placement": "post_sublayer", "mixer.qk_norm": True,
             "mixer.qk_norm_scope": "all"}
    defaults = {"rms_norm_eps": 1e-5}
    requires = {"attention_bias": False}
