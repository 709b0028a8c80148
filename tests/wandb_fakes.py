"""Reading what W&B wrote offline: the records of a `.wandb` transaction log (LevelDB-style 32 KiB blocks)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> list[Any]:
    """Every record of a `.wandb` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def of_kind(records: list[Any], kind: str) -> list[Any]:
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]
