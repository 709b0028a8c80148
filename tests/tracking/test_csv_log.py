"""The CSV log of a run: a resumed attempt keeps the earlier rows once each, saves append instead of rewriting the
file, and a row cut short by a crash never breaks the next read."""

from __future__ import annotations

import csv
from pathlib import Path

from vit_locality.tracking.csv_log import ResumableCSVLogger, ResumableExperimentWriter


def _rows(log_dir: Path) -> list[dict[str, str]]:
    with (log_dir / "metrics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def _train_steps(writer: ResumableExperimentWriter, steps: range) -> None:
    for step in steps:
        writer.log_metrics({"train/loss": 1.0 / (step + 1), "epoch": step // 4}, step)


def test_a_resumed_log_keeps_the_earlier_rows_once(tmp_path: Path) -> None:
    """An attempt logs steps 0-5 (its checkpoint at step 4) and is interrupted; the next resumes at step 4 and logs
    steps 4-7 again: steps 4 and 5 are there once, with the new values, and epoch 1's row of step 3 is kept."""
    log_dir = tmp_path / "csv"
    first = ResumableExperimentWriter(str(log_dir))
    _train_steps(first, range(4))
    first.log_metrics({"val/acc1": 0.25, "epoch": 0}, 3)
    first.save()
    _train_steps(first, range(4, 6))
    first.save()
    second = ResumableCSVLogger(save_dir=str(tmp_path), name="", version="csv")
    for step in range(4, 8):
        second.log_metrics({"train/loss": 10.0 + step, "epoch": step // 4}, step)
    second.save()
    rows = _rows(log_dir)
    assert [row["step"] for row in rows if row["train/loss"]] == [str(step) for step in range(8)]
    assert [row["train/loss"] for row in rows[-4:]] == ["14.0", "15.0", "16.0", "17.0"]
    assert [(row["step"], row["val/acc1"]) for row in rows if row["val/acc1"]] == [("3", "0.25")]


def test_saves_append_and_rewrite_only_when_a_column_appears(tmp_path: Path) -> None:
    """Rewriting the file at every save made a 200-epoch cell's saves quadratic (49 ms the last one). An append
    keeps the file; a rewrite replaces it by another (a new inode: the old one still exists when it is made)."""
    path = tmp_path / "csv" / "metrics.csv"
    writer = ResumableExperimentWriter(str(path.parent))
    _train_steps(writer, range(4))
    writer.save()
    for epoch in range(1, 5):
        inode = path.stat().st_ino
        _train_steps(writer, range(4 * epoch, 4 * epoch + 4))
        writer.save()
        assert path.stat().st_ino == inode, f"save {epoch} rewrote the file"
    writer.log_metrics({"test/acc1": 0.5}, 20)
    writer.save()
    assert path.stat().st_ino != inode  # a new column: a new header, so a new file
    rows = _rows(path.parent)
    assert len(rows) == 21 and rows[-1]["test/acc1"] == "0.5" and rows[0]["test/acc1"] == ""


def test_a_row_cut_short_by_a_crash_is_left_out(tmp_path: Path) -> None:
    """A kill or a full disk mid-save leaves the last line without its newline: the resumed log drops it and
    writes whole rows after it, never glued onto it."""
    log_dir = tmp_path / "csv"
    log_dir.mkdir()
    (log_dir / "metrics.csv").write_text("epoch,step,train/loss\r\n0,0,1.0\r\n0,1,0.5\r\n0,2,0.3")
    writer = ResumableExperimentWriter(str(log_dir))
    assert [row["step"] for row in writer.rows] == ["0", "1"]
    _train_steps(writer, range(2, 4))
    writer.save()
    assert [(row["step"], row["train/loss"]) for row in _rows(log_dir)] == [
        ("0", "1.0"),
        ("1", "0.5"),
        ("2", str(1 / 3)),
        ("3", "0.25"),
    ]
