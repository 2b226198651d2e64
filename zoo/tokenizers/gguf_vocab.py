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

from zoo.tokenizers.chat import DEFAULT_CHAT_TEMPLATE as DEFAULT
from zoo.tokenizers.tokenizer import ZooTokenizer

# llama.cpp's token types (gguf.TokenType)
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
GGUF_ROLES = {"bos": "bos", "eos": "eos", "unk": "unknown", "pad": "padding"}  # tokenizer.ggml.<x>_token_id
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


def tokenizer_from_gguf(meta: Mapping[str, Any], source: str) -> ZooTokenizer:
    """The tokenizer a GGUF's `tokenizer.*` metadata describes, rebuilt as a tokenizer.json: the BPE with its
    merges, CONTROL / USER_DEFINED tokens as added tokens, the named pre-tokenizer's split, ByteLevel bytes;
    unused `[PAD<i>]` rows past the vocabulary are left out. ValueError naming `source` for a tokenizer model
    or pre-tokenizer this module does not write."""
    from tokenizers import Tokenizer as HFTokenizer

    from zoo.tokenizers.specials import specials_from_roles
    from zoo.tokenizers.tokenizer import SPECIAL_TOKENS

    model, pre_name = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre")
    pre = next((p for p in PRE_TOKENIZERS if p.name == pre_name), None)
    if model != "gpt2" or pre is None:
        raise ValueError(f"{source}: zoo reads byte-level BPE GGUF tokenizers (tokenizer.ggml.model gpt2) "
                         f"with pre-tokenizer {', '.join(p.name for p in PRE_TOKENIZERS)}; this one is "
                         f"{model!r} / {pre_name!r}.")
    tokens, types = list(meta["tokenizer.ggml.tokens"]), list(meta["tokenizer.ggml.token_type"])
    while tokens and types[-1] == UNUSED:  # rows the model has past its tokenizer
        tokens.pop(), types.pop()
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": kind == CONTROL}
             for i, (t, kind) in enumerate(zip(tokens, types, strict=True))
             if kind in (CONTROL, USER_DEFINED)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": pre.split is None}
    regex = {"type": "Split", "pattern": {"Regex": pre.split}, "behavior": "Isolated", "invert": False}
    split = byte_level if pre.split is None else {"type": "Sequence", "pretokenizers": [regex, byte_level]}
    data = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": split, "post_processor": None, "decoder": dict(byte_level),
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": pre.ignore_merges, "vocab": {t: i for i, t in enumerate(tokens)},
                      "merges": [m.split(" ") for m in meta.get("tokenizer.ggml.merges", [])]}}
    hf = HFTokenizer.from_str(json.dumps(data))
    template = meta.get("tokenizer.chat_template")
    if tuple(tokens[:len(SPECIAL_TOKENS)]) == SPECIAL_TOKENS and template in (None, DEFAULT):
        return ZooTokenizer(hf, kind="bpe")  # zoo's own: its specials at 0-4 and the default template
    roles = {role: tokens[meta[f"tokenizer.ggml.{key}_token_id"]] for role, key in GGUF_ROLES.items()
             if f"tokenizer.ggml.{key}_token_id" in meta}
    return ZooTokenizer(hf, kind="hf", specials=specials_from_roles(hf, roles, [], source),
                        chat_template=template)
