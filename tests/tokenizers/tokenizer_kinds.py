"""``tokenizer.json`` kinds as shipped, built locally (nothing downloaded): each tokenizer is trained with the
`tokenizers` library on a small multilingual corpus, given the pipeline its family ships (normalizer,
pre-tokenizer, model options, decoder, template) and saved by ``transformers.PreTrainedTokenizerFast(...)
.save_pretrained`` (transformers 5.x writes ``tokenizer.json`` + ``tokenizer_config.json``), with the config
keys the real folders carry (``clean_up_tokenization_spaces``, ``add_bos_token``...).

- bert_wordpiece: WordPiece, BertNormalizer (lower-case, accents stripped), BertPreTokenizer, ``[CLS] $A
  [SEP]``.
- gpt2_bytelevel: byte-level BPE without prefix space; ``<|endoftext|>`` = bos = eos = unk, the last id.
- bytelevel_prefix_space: byte-level BPE with ``add_prefix_space`` (pre-tokenizer and config), ``<s> $A
  </s>``.
- t5_unigram: Unigram, WhitespaceSplit + Metaspace, ``$A </s>``, ``<extra_id_*>`` sentinels.
- llama_bpe: Llama 2's file: BPE with ``byte_fallback`` and <0x00>..<0xFF> at ids 3-258, normalizer
  Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, ``<s> $A``, ``add_bos_token`` in the config.
- llama_add_eos: the same file with ``add_eos_token: true`` in the config (the file's template wins).
- llama_metaspace: the later Llama/Mistral file: the same model behind a Metaspace pre-tokenizer
  (``prepend_scheme="first"``, no split) and no normalizer.
- added_tokens: byte-level BPE with added special (``<|im_start|>``, ``<|im_end|>``) and non-special tokens.
- stored_padding: a sentence-transformers MiniLM-like WordPiece file that stores padding to 128 and
  truncation at 128 (transformers ignores both unless a call asks).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

# ---------------------------------------------------------------------------------------------- corpus

LATIN = ("the zebra runs quickly under a blue river and eats seven apples café naïve résumé crème brûlée "
         "façade jalapeño über straße déjà vu don't it's we're they've I'm").split()
KOREAN = "나는 사과를 먹었다 학생 이다 강 위에 작은 큰 동물원 얼룩말".split()
CHINESE = "我们 在 动物园 看到 了 斑马 和 狮子 今天 天气 很 好".split()
EMOJI = ["🦓", "🦁", "🧪", "🇰🇷", "👩‍👩‍👧", "❤️"]
CODE = [
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += x[i];\n}\n",
    "if x == None:  # check\n        raise ValueError(f\"bad {x!r}\")\n",
    "SELECT name, count(*) FROM zoo WHERE kind = 'zebra';\n",
]


def corpus(n: int = 600, seed: int = 0) -> list[str]:
    """``n`` generated lines mixing accented Latin, Korean, Chinese, emoji and code (deterministic)."""
    rng = random.Random(seed)
    pool = LATIN * 3 + KOREAN + CHINESE + EMOJI
    lines = []
    for i in range(n):
        if i % 10 == 0:
            lines.append(rng.choice(CODE))
            continue
        words = [rng.choice(pool) for _ in range(rng.randint(3, 14))]
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ",", ""]))
    return lines


# ---------------------------------------------------------------------------------------------- builders


def _bert_like() -> tuple[Tokenizer, dict]:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(corpus(), trainers.WordPieceTrainer(
        vocab_size=500, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    named = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
             "mask_token": "[MASK]"}
    return tok, {**named, "do_lower_case": True, "clean_up_tokenization_spaces": True}


def bert_wordpiece() -> tuple[Tokenizer, dict]:
    return _bert_like()


def stored_padding() -> tuple[Tokenizer, dict]:
    tok, config = _bert_like()
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=128)
    tok.enable_truncation(max_length=128)
    return tok, {**config, "model_max_length": 512}


def _byte_level_bpe(specials: list[str], add_prefix_space: bool = False, vocab_size: int = 500) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def gpt2_bytelevel() -> tuple[Tokenizer, dict]:
    tok = _byte_level_bpe([])
    tok.add_special_tokens(["<|endoftext|>"])  # after training: the last id, like GPT-2's 50256
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    end = "<|endoftext|>"
    # gpt2 ships clean_up_tokenization_spaces=true; transformers does not apply it to a BPE model
    return tok, {"bos_token": end, "eos_token": end, "unk_token": end, "add_prefix_space": False,
                 "clean_up_tokenization_spaces": True}


def bytelevel_prefix_space() -> tuple[Tokenizer, dict]:
    tok = _byte_level_bpe(["<s>", "<pad>", "</s>", "<unk>"], add_prefix_space=True)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])  # as roberta/bart ship it
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=True)
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
                 "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>", "add_prefix_space": True}


def t5_unigram() -> tuple[Tokenizer, dict]:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Replace(Regex(" {2,}"), " ")  # t5's (after its sentencepiece charsmap)
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace(prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(prepend_scheme="always")
    tok.train_from_iterator(corpus(), trainers.UnigramTrainer(
        vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False))
    extra = [f"<extra_id_{i}>" for i in range(3)]
    tok.add_special_tokens(extra)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    return tok, {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                 "extra_special_tokens": extra}


BYTES = [f"<0x{b:02X}>" for b in range(256)]


def _llama_model() -> models.BPE:
    """A BPE with byte fallback in Llama's layout: <unk> <s> </s>, the 256 byte tokens, then the pieces
    (trained on words split at "▁", as sentencepiece does, so no piece spans two words)."""
    trained = Tokenizer(models.BPE())
    trained.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trained.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trained.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=450, show_progress=False))
    merges = json.loads(trained.to_str())["model"]["merges"]
    pieces = [t for t, _ in sorted(trained.get_vocab().items(), key=lambda kv: kv[1]) if t not in BYTES]
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *BYTES, *pieces])}
    return models.BPE(vocab=vocab,
                      merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges],
                      unk_token="<unk>", byte_fallback=True, fuse_unk=True)


def _llama_decoder() -> decoders.Decoder:
    return decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                              decoders.Strip(" ", 1, 0)])


def _llama_finish(tok: Tokenizer) -> tuple[Tokenizer, dict]:
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                       special_tokens=[("<s>", 1)])
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                 "add_eos_token": False, "clean_up_tokenization_spaces": False}


def llama_bpe() -> tuple[Tokenizer, dict]:
    tok = Tokenizer(_llama_model())
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = _llama_decoder()
    return _llama_finish(tok)


def llama_add_eos() -> tuple[Tokenizer, dict]:
    """Llama's file with ``add_eos_token: true`` in the config (as some fine-tunes ship): transformers 5 drops
    the config's flags when a ``tokenizer.json`` is there, so the file's ``<s> $A`` stays (4.x added
    ``</s>``)."""
    tok, config = llama_bpe()
    return tok, {**config, "add_eos_token": True}


def llama_metaspace() -> tuple[Tokenizer, dict]:
    tok = Tokenizer(_llama_model())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    tok.decoder = _llama_decoder()
    return _llama_finish(tok)


def added_tokens() -> tuple[Tokenizer, dict]:
    tok = _byte_level_bpe([])
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=False),
                    AddedToken("zookeeper", special=False, single_word=True),
                    AddedToken(" [note]", special=False, normalized=False, rstrip=True)])
    end = "<|endoftext|>"
    return tok, {"bos_token": end, "eos_token": end, "unk_token": end, "pad_token": end,
                 "extra_special_tokens": ["<|im_start|>", "<|im_end|>"]}


KINDS: dict[str, Callable[[], tuple[Tokenizer, dict]]] = {
    "bert_wordpiece": bert_wordpiece,
    "gpt2_bytelevel": gpt2_bytelevel,
    "bytelevel_prefix_space": bytelevel_prefix_space,
    "t5_unigram": t5_unigram,
    "llama_bpe": llama_bpe,
    "llama_add_eos": llama_add_eos,
    "llama_metaspace": llama_metaspace,
    "added_tokens": added_tokens,
    "stored_padding": stored_padding,
}


ROLE_KEYS = ("pad_token", "bos_token", "eos_token", "unk_token", "mask_token", "cls_token", "sep_token")


def save_folder(kind: str, folder: Path) -> Path:
    """Build tokenizer ``kind`` and save it as transformers saves a fast tokenizer, then write the family's
    config keys into ``tokenizer_config.json`` (read by transformers at load time, not when saving, so the
    file keeps its own template) and ``special_tokens_map.json`` as transformers 4.x wrote it."""
    from transformers import PreTrainedTokenizerFast

    tok, config = KINDS[kind]()
    named = {k: v for k, v in config.items() if k in ROLE_KEYS}
    extra = ({"extra_special_tokens": config["extra_special_tokens"]} if "extra_special_tokens" in config
             else {})
    PreTrainedTokenizerFast(tokenizer_object=tok, **named, **extra).save_pretrained(folder)
    path = folder / "tokenizer_config.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**saved, **config}, indent=2, ensure_ascii=False), encoding="utf-8")
    legacy = {**named, **({"additional_special_tokens": extra["extra_special_tokens"]} if extra else {})}
    (folder / "special_tokens_map.json").write_text(json.dumps(legacy, indent=2), encoding="utf-8")
    return folder
