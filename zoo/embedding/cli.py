"""`python -m zoo.embedding folder=DIR input=texts.txt output=emb.npy [pooling= normalize= max_length=
batch_size= dtype= device=]`: one embedding per line of `input` (row i is line i + 1, blank lines included),
written as a float32 (N, d) array (`.npy`) or tensor (`.pt`). Every argument is checked before the model is
read; a bad one is a single `error:` line and exit status 2."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from zoo.apps import PATH, cli_key, parse_key_values
from zoo.atomic import atomic_file
from zoo.embedding.api import load_embedder
from zoo.embedding.pooling import POOLINGS
from zoo.outputs import Output

OUTPUTS = (".npy", ".pt")


@dataclass
class EmbedArgs:
    """Every key the command line takes; pooling / normalize / max_length: None keeps the folder's own."""

    folder: str | None = cli_key(rule=PATH)  # a Hugging Face or sentence-transformers model folder
    input: str | None = cli_key(rule=PATH)  # a UTF-8 text file, one text per line
    output: str | None = cli_key(rule=PATH)  # .npy or .pt
    pooling: str | None = None  # mean | cls | last | max
    normalize: bool | None = None
    max_length: int | None = None
    batch_size: int = 32
    dtype: str | None = None  # from_pretrained's dtype: null (float32), auto, float16, bfloat16
    device: str = "cpu"


def parse_args(argv: Sequence[str]) -> EmbedArgs:
    """`key=value` strings -> typed EmbedArgs: paths as typed, whatever they hold (`null` unsets pooling and
    dtype); the others read as Hydra reads a value; unknown keys named (zoo.apps.parse_key_values)."""
    return parse_key_values(argv, EmbedArgs, nullable=("pooling", "dtype"))


def read_texts(path: Path) -> list[str]:
    """One text per line; a missing, unreadable or empty file is one error naming it."""
    if not path.is_file():
        raise ValueError(f"input={str(path)!r} is not a file; give a UTF-8 text file with one text per line.")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"input={str(path)!r} is not UTF-8 text (byte {e.start}).") from None
    if not any(line.strip() for line in lines):
        raise ValueError(f"input={str(path)!r} holds no text ({len(lines)} line(s), all empty).")
    return lines


def wrote_embeddings(path: Path) -> bool:
    """Whether `path` holds what this command writes: a float32 (N, d) array (`.npy`)
    or tensor (`.pt`), mapped, not read."""
    try:
        if path.suffix == ".npy":
            found = np.load(path, mmap_mode="r", allow_pickle=False)
            return isinstance(found, np.ndarray) and found.ndim == 2 and found.dtype == np.float32
        found = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # not an array file, or one numpy / torch refuses: not this command's output
        return False
    return isinstance(found, torch.Tensor) and found.dim() == 2 and found.dtype == torch.float32


EMBEDDINGS_OUTPUT = Output("output", "an embeddings file", folder=False, ours=wrote_embeddings,
                           example="emb.npy")


def check(args: EmbedArgs) -> tuple[Path, list[str], Path]:
    """(folder, texts, output) once every argument is known good; nothing is read from the folder yet."""
    for key in ("folder", "input", "output"):
        if getattr(args, key) is None:
            raise ValueError(f"{key}= is required: python -m zoo.embedding folder=DIR input=texts.txt "
                             "output=emb.npy")
    folder, output = Path(args.folder), Path(args.output)
    if not folder.is_dir():
        raise ValueError(f"folder={args.folder!r} is not a folder; give a Hugging Face model folder "
                         "(config.json, weights, tokenizer.json), a sentence-transformers one included.")
    if output.suffix not in OUTPUTS:
        raise ValueError(f"output={args.output!r} must end in {' or '.join(OUTPUTS)}.")
    EMBEDDINGS_OUTPUT.check(output)  # a new file or this command's earlier output, before the model is read
    if args.pooling is not None:
        POOLINGS.get(args.pooling)  # an unknown name: the registry's error (a close match, the allowed names)
    if args.batch_size < 1 or (args.max_length is not None and args.max_length < 1):
        raise ValueError(f"batch_size={args.batch_size} and max_length={args.max_length} must be >= 1.")
    return folder, read_texts(Path(args.input)), output


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    folder, texts, output = check(args)
    embedder = load_embedder(folder, pooling=args.pooling, normalize=args.normalize,
                             max_length=args.max_length, dtype=args.dtype)
    embedder.model.to(args.device)
    tokenized = embedder.tokenize(texts)
    vectors = embedder.embed_ids(tokenized.ids, args.batch_size)  # (N, d) float32
    with atomic_file(output) as f:
        if output.suffix == ".npy":
            np.save(f, vectors.numpy())
        else:
            torch.save(vectors, f)
    s = embedder.settings
    cut = f"; {tokenized.cut} text(s) cut at {embedder.max_length} tokens" if tokenized.cut else ""
    print(f"wrote {output}: {vectors.shape[0]} x {vectors.shape[1]} float32 (pooling {s.pooling}, "
          f"normalize {str(s.normalize).lower()}, max_length {embedder.max_length}{cut})", file=sys.stderr)
    return 0
