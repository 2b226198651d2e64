"""Hugging Face tokenizer folders built locally (nothing downloaded): tokenizers trained with the `tokenizers`
library on a small generated text, given the real families' special tokens and templates, and saved by their
transformers fast classes, so each folder looks like the one in a pretrained model folder.

- gpt2: byte-level BPE; `<|endoftext|>` is bos = eos = unk and the LAST id (50256 in GPT-2), no pad.
- bert: WordPiece, lower-casing; `[PAD]`=0 and `[UNK] [CLS] [SEP] [MASK]` at 100-103 as in bert-base;
  `[CLS] x [SEP]`.
- t5: Unigram with WhitespaceSplit + Metaspace; `<pad>`=0 `</s>`=1 `<unk>`=2, no bos; `x </s>`.
- roberta: byte-level BPE; `<s>`=0 `<pad>`=1 `</s>`=2 `<unk>`=3, `<mask>` last; `<s> x </s>` (also BART's
  layout).
"""

from __future__ import annotations

import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

WORDS = ("the a zebra lion runs eats apple river quickly model token data train small big red blue green "
         "under over sleeps jumps seven numbers of and to from is was hello world zoo").split()
KOREAN = "나는 사과를 먹었다 학생 이다 강 위에 작은 큰".split()
EMOJI = ["🦓", "🧪", "🇰🇷", "👩‍👩‍👧"]


def corpus(n: int = 400, seed: int = 0) -> list[str]:
    """`n` generated sentences mixing English, Korean and emoji (deterministic)."""
    rng = random.Random(seed)
    pool = list(WORDS) * 3 + KOREAN + EMOJI
    return [" ".join(rng.choice(pool) for _ in range(rng.randint(4, 12))) + rng.choice([".", "!", "?", ""])
            for _ in range(n)]


def _byte_level_bpe(vocab_size: int, specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


def make_gpt2(folder: Path) -> Path:
    from transformers import GPT2TokenizerFast

    tok = _byte_level_bpe(400, [])
    tok.add_special_tokens(["<|endoftext|>"])  # after training: the last id, like GPT-2's 50256
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    end = "<|endoftext|>"
    GPT2TokenizerFast(tokenizer_object=tok, bos_token=end, eos_token=end,
                      unk_token=end).save_pretrained(folder)
    return folder


def make_bert(folder: Path) -> Path:
    from transformers import BertTokenizerFast

    trained = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    trained.normalizer = normalizers.BertNormalizer(lowercase=True)
    trained.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trained.train_from_iterator(corpus(), trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[UNK]"],
                                                                    show_progress=False))
    learned = [t for t, _ in sorted(trained.get_vocab().items(), key=lambda kv: kv[1]) if t != "[UNK]"]
    order = ["[PAD]", *learned[:99], "[UNK]", "[CLS]", "[SEP]", "[MASK]", *learned[99:]]  # bert-base's ids
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(order)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = (trained.normalizer, trained.pre_tokenizer,
                                                      decoders.WordPiece())
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 101), ("[SEP]", 102)])
    BertTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    return folder


def make_t5(folder: Path) -> Path:
    from transformers import T5TokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Metaspace()])  # as t5-small's
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(corpus(), trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    T5TokenizerFast(tokenizer_object=tok, extra_ids=0).save_pretrained(folder)
    return folder


def make_roberta(folder: Path) -> Path:
    from transformers import RobertaTokenizerFast

    tok = _byte_level_bpe(400, ["<s>", "<pad>", "</s>", "<unk>"])
    tok.add_special_tokens(["<mask>"])  # the last id, as in roberta-base (50264)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=False)
    RobertaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                         cls_token="<s>", unk_token="<unk>", pad_token="<pad>",
                         mask_token="<mask>").save_pretrained(folder)
    return folder


MAKERS = {"gpt2": make_gpt2, "bert": make_bert, "t5": make_t5, "roberta": make_roberta}
