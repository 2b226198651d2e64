"""A tokenizer as GGUF metadata (`tokenizer.ggml.*`), the way llama.cpp's converter writes a byte-level BPE:
the vocabulary in id order with each token's type, the merges, the special ids, whether BOS / EOS are added,
the chat template, and the name of the pre-tokenizer llama.cpp splits text with. The name is chosen only
where its regex is exactly the tokenizer's own (`PRE_TOKENIZERS`); anything llama.cpp cannot reproduce (a
WordPiece or word-level model, a normalizer, another split) is refused naming it, never approximated."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zoo.tokenizers.tokenizer import ZooTokenizer

# llama.cpp's token types (gguf.TokenType)
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
LLAMA3_SPLIT = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                r"|\s+(?!\S)|\s+")
QWEN2_SPLIT = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizer:
    """A llama.cpp pre-tokenizer name and the tokenizer.json split it reproduces: `split` None is GPT-2's
    byte-level regex (ByteLevel with use_regex); otherwise a Split on that exact regex before a ByteLevel
    without one. `ignore_merges`: llama.cpp looks a whole piece up in the vocabulary before merging."""

    name: str
    split: str | None
    ignore_merges: bool = False


PRE_TOKENIZERS = (PreTokenizer("gpt-2", None), PreTokenizer("llama-bpe", LLAMA3_SPLIT, ignore_merges=True),
                  PreTokenizer("qwen2", QWEN2_SPLIT))


@dataclass(frozen=True)
class GGUFVocab:
    """Everything `tokenizer.*` of a GGUF holds, ready for gguf.GGUFWriter."""

    pre: str
    tokens: list[str]
    types: list[int]
    merges: list[str]
    special_ids: dict[str, int]  # bos / eos / unk / pad -> id (absent roles left out)
    add_bos: bool
    add_eos: bool
    chat_template: str | list[dict[str, str]] | None


def gguf_vocab(tokenizer: ZooTokenizer, vocab_size: int) -> GGUFVocab:
    """`tokenizer` for a model of `vocab_size` rows (ids past the tokenizer's are written as unused
    `[PAD<i>]` tokens, as llama.cpp's converter does); ValueError naming what GGUF cannot carry."""
    data = json.loads(tokenizer.hf.to_str())
    pre = _pre_tokenizer(data, tokenizer.kind)
    vocab = data["model"]["vocab"]
    added = {t["id"]: t for t in data.get("added_tokens", [])}
    size = tokenizer.vocab_size
    if size > vocab_size:
        raise ValueError(f"the {tokenizer.kind} tokenizer has {size} tokens but the model only {vocab_size} "
                         "embedding rows; GGUF needs a token for every row and a row for every token.")
    by_id = {i: t for t, i in vocab.items()} | {i: t["content"] for i, t in added.items()}
    missing = [i for i in range(size) if i not in by_id]
    if missing:
        raise ValueError(f"the {tokenizer.kind} tokenizer has no token for ids {missing[:5]}; GGUF lists one "
                         "token per id.")
    tokens = [by_id[i] for i in range(size)] + [f"[PAD{i}]" for i in range(size, vocab_size)]
    types = [(CONTROL if added[i]["special"] else USER_DEFINED) if i in added else NORMAL
             for i in range(size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"].get("merges", [])]
    ids = {role: tokenizer.specials[role] for role in ("bos", "eos", "unk", "pad")}
    plain = tokenizer.hf.encode("a", add_special_tokens=False).ids
    framed = tokenizer.hf.encode("a", add_special_tokens=True).ids  # what the tokenizer adds around a text
    template = tokenizer.chat_template
    if isinstance(template, Mapping):  # named templates, as transformers / llama.cpp list them
        template = [{"name": name, "template": text} for name, text in template.items()]
    return GGUFVocab(
        pre=pre.name, tokens=tokens, types=types + [UNUSED] * (vocab_size - size), merges=merges,
        special_ids={role: i for role, i in ids.items() if i is not None},
        add_bos=len(framed) > len(plain) and framed[0] == ids["bos"],
        add_eos=len(framed) > len(plain) and framed[-1] == ids["eos"], chat_template=template)


def _pre_tokenizer(data: Mapping[str, Any], kind: str) -> PreTokenizer:
    """The llama.cpp pre-tokenizer whose split is exactly tokenizer.json `data`'s; ValueError naming the part
    (model, normalizer, pre-tokenizer, decoder) llama.cpp cannot reproduce."""
    model, where = data.get("model") or {}, f"the {kind} tokenizer"
    if model.get("type") != "BPE":
        raise ValueError(f"{where} is a {model.get('type')} model; GGUF export carries byte-level BPE "
                         "tokenizers only (tokenizer=bpe, or a Hugging Face BPE tokenizer.json).")
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"):
        if model.get(key):
            raise ValueError(f"{where}'s BPE has {key}={model.get(key)!r}, which llama.cpp's BPE has no "
                             "setting for.")
    if data.get("normalizer") is not None:
        raise ValueError(f"{where} normalizes text first ({data['normalizer'].get('type')}), which "
                         "llama.cpp's BPE does not do; GGUF cannot carry it.")
    if (data.get("decoder") or {}).get("type") != "ByteLevel":
        raise ValueError(f"{where} decodes with {(data.get('decoder') or {}).get('type')!r}, not ByteLevel; "
                         "GGUF export carries byte-level BPE tokenizers only.")
    found = _split_of(data.get("pre_tokenizer") or {})
    for pre in PRE_TOKENIZERS:
        if found == pre.split and bool(model.get("ignore_merges")) == pre.ignore_merges:
            return pre
    shown = json.dumps(data.get("pre_tokenizer"))[:200]
    raise ValueError(
        f"{where} splits text with a pre-tokenizer llama.cpp has no name for ({shown}, ignore_merges="
        f"{bool(model.get('ignore_merges'))}); GGUF export names one of "
        + ", ".join(f"{p.name} ({'GPT-2 byte-level regex' if p.split is None else 'its Split regex'}, "
                    f"ignore_merges={p.ignore_merges})" for p in PRE_TOKENIZERS)
        + ", and never substitutes another one (it would change the tokens).")


def _split_of(pre: Mapping[str, Any]) -> str | None | bool:
    """None for GPT-2's byte-level regex, the Split regex before a regex-less ByteLevel, else False."""
    def byte_level(p: Mapping[str, Any], regex: bool) -> bool:
        return (p.get("type") == "ByteLevel" and not p.get("add_prefix_space")
                and p.get("use_regex", True) is regex)

    if byte_level(pre, True):
        return None
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if steps and len(steps) == 2 and byte_level(steps[1], False):
        split = steps[0]
        regex = (split.get("pattern") or {}).get("Regex")
        if split.get("type") == "Split" and split.get("behavior") == "Isolated" and not split.get("invert"):
            return regex if regex is not None else False
    return False
