"""Tiny Hugging Face model folders built locally with transformers and tokenizers (nothing downloaded): a
GPT-2 with a byte-level BPE tokenizer, a BERT with WordPiece, a T5 with Unigram, trained on a small corpus."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "import os\nprint(os.path.join('a', 'b'))\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
] * 20


def corpus_file(folder: Path) -> Path:
    """The corpus as one text file (data=text data.files=...)."""
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "corpus.txt"
    file.write_text("\n".join(CORPUS * 3), encoding="utf-8")
    return file


def labelled_file(folder: Path) -> Path:
    """Classification JSONL: is the line a function definition or not (data=classification)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    lines = [ln.strip() for doc in CORPUS[:4] for ln in doc.splitlines() if ln.strip()]
    defs = [ln for ln in lines if ln.startswith("def")]
    # balanced
    rows = [{"text": ln, "label": "def" if ln in defs else "other"} for ln in lines + defs * 4] * 10
    file = folder / "labels.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return file


def pairs_file(folder: Path) -> Path:
    """Seq2seq TSV: copy each line (data=pairs)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [ln.strip() for doc in CORPUS[:4] for ln in doc.splitlines() if ln.strip()]
    file = folder / "pairs.tsv"
    file.write_text("".join(f"{ln}\t{ln}\n" for ln in lines) * 10, encoding="utf-8")
    return file


def gpt2_folder(folder: Path, vocab: int = 320, positions: int = 64) -> Path:
    """GPT2LMHeadModel (2 layers, d 32) + GPT2TokenizerFast with a byte-level BPE trained on CORPUS."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")
    eos = tok.token_to_id("<|endoftext|>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=positions, n_embd=32,
                                       n_layer=2, n_head=4, bos_token_id=eos, eos_token_id=eos))
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def bert_folder(folder: Path, vocab: int = 200, positions: int = 64) -> Path:
    """BertForMaskedLM (2 layers, d 32) + a WordPiece tokenizer with [CLS] x [SEP] framing."""
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=vocab, special_tokens=specials,
                                                              show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       pair="[CLS] $A [SEP] $B [SEP]",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=64,
                                       max_position_embeddings=positions,
                                       pad_token_id=tok.token_to_id("[PAD]")))
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def t5_folder(folder: Path, vocab: int = 200) -> Path:
    """T5ForConditionalGeneration (2+2 layers, d 32) + a Unigram tokenizer (pad 0, </s> 1, unk 2), x </s>."""
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    specials = ["<pad>", "</s>", "<unk>"]
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(vocab_size=vocab, special_tokens=specials,
                                                            unk_token="<unk>", show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", tok.token_to_id("</s>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>")
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(vocab_size=tok.get_vocab_size(), d_model=32, d_kv=8, d_ff=64,
                                                num_layers=2, num_heads=4, pad_token_id=0, eos_token_id=1,
                                                decoder_start_token_id=0))
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
