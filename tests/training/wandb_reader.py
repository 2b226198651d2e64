"""Read the records of an offline W&B run file (`run-*.wandb`): a LevelDB-style log of protobuf Records
(7-byte file header, 32 KiB blocks, each chunk = crc32 (4) + length (2) + type (1) + data)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[pb.Record]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    out, pos, pending = [], HEADER, b""
    while pos + HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:  # block trailer padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            rec = pb.Record()
            rec.ParseFromString(pending)
            out.append(rec)
    return out


def history(path: Path) -> list[dict]:
    """Every logged history row as {key: value}."""
    rows = []
    for rec in records(path):
        if rec.WhichOneof("record_type") == "history":
            rows.append({(it.key or "/".join(it.nested_key)): json.loads(it.value_json)
                         for it in rec.history.item})
    return rows


def config_keys(path: Path) -> set[str]:
    keys = set()
    for rec in records(path):
        if rec.WhichOneof("record_type") == "config":
            keys |= {it.key or "/".join(it.nested_key) for it in rec.config.update}
    return keys
