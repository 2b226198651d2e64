"""Folders "as shipped", built locally with transformers and sentence-transformers (nothing downloaded): every
family x head (bare base model with tensor names without the prefix, masked / causal LM with the tied head
left out of the file, sequence / token classification with named labels, question answering), fp16 / bf16
weight files, sharded safetensors, a `pytorch_model.bin` only as transformers 4 wrote it (tied weights and
`position_ids` inside), and a sentence-transformers folder (`modules.json`, `1_Pooling/`, a tokenizer.json
that stores padding and truncation at 128) written by that package itself. `Shipped` builds each folder
once."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers

from bench.wordpiece import wordpiece_folder
from tests.pretrained.helpers import perturbed

# family -> (transformers config class, tiny config, class-name prefix)
FAMILIES = {
    "bert": ("BertConfig",
             dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                  vocab_size=99, max_position_embeddings=40, type_vocab_size=2), "Bert"),
    "roberta": ("RobertaConfig",
                dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                        vocab_size=99, max_position_embeddings=40, type_vocab_size=1,
                        layer_norm_eps=1e-5, pad_token_id=1), "Roberta"),
    "xlm-roberta": ("XLMRobertaConfig", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=48, vocab_size=99, max_position_embeddings=40,
                               type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1), "XLMRoberta"),
    "distilbert": ("DistilBertConfig", dict(dim=32, n_layers=2, n_heads=4, hidden_dim=48, vocab_size=99,
                              max_position_embeddings=40), "DistilBert"),
}
ENCODERS = tuple(FAMILIES)
# decoders: pad_token_id 0, bos 1, eos 2 (the test ids start at 3, so a classifier's last real token is the
# last non-pad one); GQA where the family has it; Gemma's
# and Qwen3's head_dim given (their defaults are 256 / 128)
_LLAMA = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=40, vocab_size=99, max_position_embeddings=40, pad_token_id=0, bos_token_id=1,
              eos_token_id=2)
DECODERS = {
    "gpt2": ("GPT2Config", dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=40, pad_token_id=0,
                                bos_token_id=1, eos_token_id=2), "GPT2"),
    "llama": ("LlamaConfig", _LLAMA, "Llama"),
    "mistral": ("MistralConfig", _LLAMA, "Mistral"),
    "qwen2": ("Qwen2Config", _LLAMA, "Qwen2"),
    "qwen3": ("Qwen3Config", dict(_LLAMA, head_dim=8), "Qwen3"),
    "phi3": ("Phi3Config", _LLAMA, "Phi3"),
    "olmo2": ("Olmo2Config", _LLAMA, "Olmo2"),
    "smollm3": ("SmolLM3Config", dict(_LLAMA, num_hidden_layers=4), "SmolLM3"),  # layer 3 without RoPE
    "gemma": ("GemmaConfig", dict(_LLAMA, head_dim=8), "Gemma"),
    "gemma2": ("Gemma2Config", dict(_LLAMA, head_dim=8), "Gemma2"),
    # the text classes (Gemma3ForCausalLM: tests/pretrained/test_gemma3.py)
    "gemma3_text": ("Gemma3TextConfig", dict(_LLAMA, head_dim=8), "Gemma3Text"),
    "gpt_neox": ("GPTNeoXConfig", {k: v for k, v in _LLAMA.items() if k != "num_key_value_heads"}, "GPTNeoX"),
    "opt": ("OPTConfig",
            dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=40, vocab_size=99,
                 max_position_embeddings=40, word_embed_proj_dim=32, pad_token_id=0, bos_token_id=1,
                 eos_token_id=2), "OPT"),
}
_SEQ2SEQ = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, vocab_size=99,
                max_position_embeddings=40, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                decoder_start_token_id=2)
SEQ2SEQ = {
    "bart": ("BartConfig", _SEQ2SEQ, "Bart"),
    "marian": ("MarianConfig", dict(_SEQ2SEQ, decoder_start_token_id=0, forced_eos_token_id=2), "Marian"),
    "t5": ("T5Config",
           dict(d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4, vocab_size=99, pad_token_id=0,
                eos_token_id=1, decoder_start_token_id=0), "T5"),
}
# encoders built apart from BERT's kind (no token types; heads_table.py: their cases, every head of CLASSES)
ROPE_ENCODERS = {
    "modernbert": ("ModernBertConfig", dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                            intermediate_size=48, vocab_size=99, max_position_embeddings=40,
                                            local_attention=8, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                            cls_token_id=1, sep_token_id=2), "ModernBert"),
}
FAMILIES.update({**DECODERS, **SEQ2SEQ, **ROPE_ENCODERS})
# zoo head -> the transformers class-name suffix a folder of that head names in `architectures`
CLASSES = {"none": "Model", "lm": "ForMaskedLM", "classifier": "ForSequenceClassification",
           "token_classifier": "ForTokenClassification", "qa": "ForQuestionAnswering"}
LABELS = ["negative", "neutral", "positive"]  # id2label of the sequence classifiers
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]  # id2label of the token classifiers
NAMED = {"classifier": LABELS, "token_classifier": TAGS}  # zoo head -> the label names its folders carry


def hf_model(family: str, suffix: str, seed: int = 0, **config) -> transformers.PreTrainedModel:
    """The family's transformers class `suffix` (ForMaskedLM, ...) from a tiny config, every parameter
    perturbed, eval mode; classifiers with named labels."""
    config_class, tiny, prefix = FAMILIES[family]
    names = NAMED.get(next((h for h, s in CLASSES.items() if s == suffix), ""))
    if names is not None:
        config = {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)},
                  **config}
    torch.manual_seed(seed)
    model = getattr(transformers, prefix + suffix)(getattr(transformers, config_class)(**tiny, **config))
    return perturbed(model, seed)


def save(model: transformers.PreTrainedModel, folder: Path, variant: str) -> Path:
    """`model` written as folders are shipped: `variant` is one of VARIANTS."""
    VARIANTS[variant](model, folder)
    return folder


def _bin_only(model: transformers.PreTrainedModel, folder: Path) -> None:
    """transformers 4's `safe_serialization=False`: the whole state dict pickled (a tied decoder stored as a
    second name of the token table) with the `position_ids` buffer that checkpoints before 4.31 kept."""
    model.config.architectures = [type(model).__name__]  # as save_pretrained records it
    model.config.save_pretrained(folder)
    state = dict(model.state_dict())
    base = f"{model.base_model_prefix}." if any(k.startswith(model.base_model_prefix + ".")
                                                for k in state) else ""
    state[f"{base}embeddings.position_ids"] = torch.arange(model.config.max_position_embeddings)[None]
    torch.save(state, folder / "pytorch_model.bin")


VARIANTS = {
    "safetensors": lambda m, f: m.save_pretrained(f),
    "fp16": lambda m, f: m.half().save_pretrained(f),
    "bf16": lambda m, f: m.bfloat16().save_pretrained(f),
    "sharded": lambda m, f: m.save_pretrained(f, max_shard_size="20KB"),
    "bin": _bin_only,
}


class Shipped:
    """Builds each folder once under `root`; the in-memory transformers model (fp32) stays the reference."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._models: dict[tuple[str, str], transformers.PreTrainedModel] = {}
        self._folders: dict[tuple[str, str, str], Path] = {}

    def model(self, family: str, suffix: str) -> transformers.PreTrainedModel:
        """The transformers model the folders of (family, suffix) are saved from, in fp32."""
        if (family, suffix) not in self._models:
            self._models[family, suffix] = hf_model(family, suffix)
        return self._models[family, suffix]

    def folder(self, family: str, suffix: str, variant: str = "safetensors") -> Path:
        key = (family, suffix, variant)
        if key not in self._folders:
            converts = variant in ("fp16", "bf16")  # these saves convert the model in place: save a copy
            model = hf_model(family, suffix) if converts else self.model(family, suffix)
            self._folders[key] = save(model, self.root / f"{family}-{suffix}-{variant}", variant)
        return self._folders[key]

    def sentence_transformers(self, pooling: str = "mean", normalize: bool = False) -> Path:
        name = "st" + ("" if pooling == "mean" else f"-{pooling}") + ("-normalize" if normalize else "")
        if name not in self._folders:
            self._folders[name] = sentence_transformers_folder(self.root / name, pooling, normalize)
        return self._folders[name]


# ------------------------------------------------------------------------------- sentence-transformers

WORDS = ("the a cat dog sat ran on under mat house big small red blue quickly slowly and or but not very "
         "sentence embedding model text short long one two three").split()
STORED_LENGTH = 128  # padding and truncation stored in the shipped tokenizer.json (as MiniLM's)


def wordpiece_tokenizer(folder: Path) -> Path:
    """A BERT-style WordPiece tokenizer over WORDS and single letters (`##x` continuing a word) whose
    tokenizer.json stores padding and truncation at 128."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return wordpiece_folder(folder, [*WORDS, *letters, *(f"##{c}" for c in letters)], STORED_LENGTH)


def sentence_transformers_folder(folder: Path, pooling: str = "mean", normalize: bool = False) -> Path:
    """A bare BertModel (pooler included, names without `bert.`) + `pooling` Pooling (+ Normalize), saved by
    sentence-transformers."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    base = folder.parent / f"{folder.name}-base"
    wordpiece_tokenizer(base)
    vocab = len(json.loads((base / "tokenizer.json").read_text())["model"]["vocab"])
    bert = perturbed(transformers.BertModel(transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, vocab_size=vocab,
        max_position_embeddings=STORED_LENGTH + 2, pad_token_id=0)))
    bert.save_pretrained(base)
    word = Transformer(str(base), max_seq_length=STORED_LENGTH)
    modules = [word, Pooling(word.get_embedding_dimension(), pooling), *([Normalize()] if normalize else [])]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder
