"""A BERT WordPiece tokenizer folder built locally from a word list (nothing downloaded), whose tokenizer.json
stores padding and truncation as sentence-transformers' MiniLM ships it. bench/bench_init_from.py and the
tests' "as shipped" folders (tests/pretrained/shipped.py) both write theirs with it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4


def wordpiece_folder(folder: Path, pieces: Sequence[str], stored_length: int = 128) -> Path:
    """Save a BertTokenizerFast over SPECIALS + `pieces` (ids in that order; `##x` pieces continue a word)
    with `[CLS] $A [SEP]` framing, lower-casing, and padding + truncation to `stored_length` stored in the
    file (zoo and transformers ignore both at call time)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {p: i for i, p in enumerate([*SPECIALS, *pieces])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.enable_truncation(stored_length)
    tok.enable_padding(length=stored_length, pad_id=vocab["[PAD]"], pad_token="[PAD]")
    transformers.BertTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]",
                                   mask_token="[MASK]").save_pretrained(folder)
    return folder
