"""A bounded read allocates what the file holds, never its size limit: a report over a sweep reads hundreds of small
CSVs, and a buffer of the limit each time fails under an address-space cap."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from vit_locality.store.file_read import (
    CHECKPOINT_SIZE_LIMIT,
    CSV_SIZE_LIMIT,
    UnreadableFile,
    read_csv_rows,
    read_regular_file,
)


def _peak_bytes(action) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_small_file_costs_about_its_size(tmp_path: Path) -> None:
    csv_path = tmp_path / "attention_stats.csv"
    csv_path.write_text("epoch,layer,head,mad\n" + "".join(f"{i},0,0,0.5\n" for i in range(800)))  # about 10 KB
    assert _peak_bytes(lambda: read_csv_rows(csv_path, CSV_SIZE_LIMIT)) < 1 << 20
    blob = tmp_path / "last.ckpt"
    blob.write_bytes(b"x" * 10_000)
    assert _peak_bytes(lambda: read_regular_file(blob, CHECKPOINT_SIZE_LIMIT)) < 1 << 20
    assert read_regular_file(blob, CHECKPOINT_SIZE_LIMIT) == b"x" * 10_000


def test_the_limit_still_holds(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    path.write_bytes(b"y" * 101)
    assert read_regular_file(path, 101) == b"y" * 101
    with pytest.raises(UnreadableFile, match="larger than"):
        read_regular_file(path, 100)
