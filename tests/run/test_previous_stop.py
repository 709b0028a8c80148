"""A new attempt of a cell keeps, in its `running` record, why the cell's last attempt stopped: what a launcher
polling after the restart reads (tests/slurm/test_signal_owners.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vit_locality.run.cell import previous_stop

MINE, OTHER = "a" * 16, "b" * 16


def _record(run_dir: Path, **fields: object) -> Path:
    run_dir.mkdir(exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps(fields))
    return run_dir


@pytest.mark.parametrize(
    ("fields", "kept"),
    [
        ({"status": "interrupted", "error": "SIGTERM", "identity_hash": MINE}, {"previous_stop": "SIGTERM"}),
        (
            {"status": "failed", "error": "RuntimeError: boom", "identity_hash": MINE},
            {"previous_stop": "RuntimeError: boom"},
        ),
        ({"status": "interrupted", "error": "SIGTERM", "identity_hash": OTHER}, {}),  # another cell's attempt
        ({"status": "running", "identity_hash": MINE}, {}),  # killed without a word: nothing to keep
    ],
)
def test_the_last_attempts_stop_is_kept_for_the_same_cell_only(tmp_path: Path, fields: dict, kept: dict) -> None:
    assert previous_stop(_record(tmp_path / "run", **fields), MINE) == kept


def test_no_record_or_an_unreadable_one_keeps_nothing(tmp_path: Path) -> None:
    assert previous_stop(tmp_path, MINE) == {}
    (tmp_path / "results.json").write_text("{not json")
    assert previous_stop(tmp_path, MINE) == {}
