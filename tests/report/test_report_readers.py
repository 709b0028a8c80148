"""Every file a reader opens goes through the one bounded, regular-file-only reader (store/file_read.py): a FIFO or a
link to /dev/zero in place of a run's attention statistics, CSV log, checkpoint or picture is skipped with one line
naming it and why, and the report renders everything else; nothing blocks, nothing reads without limit.

The sweep is written here (the report tests' records); the reports run as a user runs them, in a subprocess whose
timeout turns a hang into a failure and whose address-space cap turns an unbounded read into one."""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import Spawner
from record_fakes import write_run

from vit_locality.store.file_read import CSV_SIZE_LIMIT, UnreadableFile, read_csv_rows, read_regular_file

REPO = Path(__file__).resolve().parents[2]
MEMORY_CAP = 6 * 2**30  # far above what a report needs; an unbounded read of /dev/zero ends here
HANG = 240  # seconds: a report of four runs takes a few; a reader blocked on a FIFO never ends


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def report(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    cmd = [sys.executable, "-m", "vit_locality.report", *args]
    try:
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG, preexec_fn=_capped)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(args[:1])}` still running after {HANG} s: a reader blocked")


@pytest.fixture
def sweep(tmp_path: Path) -> dict[str, Path]:
    """Four Baseline runs: one intact, one whose attention statistics are a FIFO, one whose statistics are a link
    to /dev/zero, one whose CSV log, checkpoint and attention maps are a FIFO, a /dev/zero link and a FIFO."""
    root = tmp_path / "sweep"
    runs = {
        name: write_run(root, "cifar100", "Baseline", seed, 50.0 + seed, 0.3, 0.8, name=f"_{name}")
        for seed, name in enumerate(("others", "intact", "fifo", "zero"))  # the page shows seed 0's maps
    }
    for run in runs.values():  # matched accuracy reads a held-out split
        record = json.loads((run / "results.json").read_text())
        (run / "results.json").write_text(json.dumps({**record, "measured_on": {"eval_split": "val"}}))
    (runs["fifo"] / "attention_stats.csv").unlink()
    os.mkfifo(runs["fifo"] / "attention_stats.csv")
    (runs["zero"] / "attention_stats.csv").unlink()
    (runs["zero"] / "attention_stats.csv").symlink_to("/dev/zero")
    (runs["others"] / "csv").mkdir()
    os.mkfifo(runs["others"] / "csv" / "metrics.csv")
    (runs["others"] / "checkpoints").mkdir()
    (runs["others"] / "checkpoints" / "last.ckpt").symlink_to("/dev/zero")
    os.mkfifo(runs["others"] / "attention_central_maps.png")
    return {"root": root, **runs}


def test_figures_skip_a_fifo_and_a_dev_zero_link_and_render_the_rest(
    sweep: dict[str, Path], tmp_path: Path, spawns: Spawner
) -> None:
    out = tmp_path / "out"
    proc = report("figures", str(sweep["root"]), "--out", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    csv_name = "attention_stats.csv"
    assert (
        f"note: skipped {sweep['fifo'] / csv_name}: a FIFO, not a regular file; the run is left out of the emergence"
        " figure" in lines
    ), lines
    assert (
        f"note: skipped {sweep['zero'] / csv_name}: a character device, not a regular file; the run is left out of"
        " the emergence figure" in lines
    ), lines
    for kind in ("plane", "layers", "emergence"):
        assert (out / f"{kind}_cifar100_vit_paper.png").stat().st_size > 1000


def test_instruments_and_the_page_skip_a_log_a_checkpoint_and_a_picture(
    sweep: dict[str, Path], tmp_path: Path, spawns: Spawner
) -> None:
    others = sweep["others"]
    proc = report("all", str(sweep["root"]), "--out", str(tmp_path / "all"), "--box-images", "0")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert f"note: skipped {others / 'csv' / 'metrics.csv'}: a FIFO, not a regular file; no trajectory of the run" in (
        lines
    ), lines
    checkpoint = others / "checkpoints" / "last.ckpt"
    assert (
        f"note: skipped {checkpoint}: a character device, not a regular file; the run is left out of the position"
        " and box instruments" in lines
    ), lines
    proc = report("page", str(sweep["root"]), "--out", str(tmp_path / "page"), "--box-images", "0")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    page = (tmp_path / "page" / "sweep.html").read_text()
    maps = others / "attention_central_maps.png"
    assert f"skipped {maps}: a FIFO, not a regular file; its attention maps are not on the page" in page
    assert "footer" in page and page.count("<img ") >= 3  # the figures were rendered beside the skips


def test_the_reader_refuses_what_is_not_a_regular_file_at_once(tmp_path: Path) -> None:
    fifo, zero, huge, plain = (tmp_path / name for name in ("fifo", "zero", "huge", "plain.csv"))
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    with huge.open("wb") as handle:
        handle.truncate(CSV_SIZE_LIMIT + 1)  # sparse: costs no disk
    plain.write_text("epoch,mad\n0,0.5\n")
    with pytest.raises(UnreadableFile, match="^a FIFO, not a regular file$"):
        read_regular_file(fifo, 100)
    with pytest.raises(UnreadableFile, match="^a character device, not a regular file$"):
        read_regular_file(zero, 100)
    with pytest.raises(UnreadableFile, match="^larger than 256 MiB$") as error:
        read_csv_rows(huge)
    assert error.value.skipped("left out") == f"skipped {huge}: larger than 256 MiB; left out"
    with pytest.raises(IsADirectoryError):
        read_regular_file(tmp_path, 100)
    assert read_csv_rows(plain) == [{"epoch": "0", "mad": "0.5"}]
    with pytest.raises(UnreadableFile, match="^larger than 0 MiB$"):
        read_regular_file(plain, 4)


def test_a_resumed_csv_log_never_waits_on_a_fifo(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The training side: the CSV logger reads its earlier rows on a resume; a FIFO there is skipped, not awaited."""
    from vit_locality.tracking.csv_log import ResumableExperimentWriter

    log_dir = tmp_path / "csv"
    log_dir.mkdir()
    fifo = log_dir / "metrics.csv"
    os.mkfifo(fifo)
    made: list[ResumableExperimentWriter] = []
    with caplog.at_level(logging.WARNING, logger="vit_locality"):
        worker = threading.Thread(target=lambda: made.append(ResumableExperimentWriter(str(log_dir))), daemon=True)
        worker.start()
        worker.join(timeout=20)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=5)
        pytest.fail("the CSV logger waited on a FIFO named metrics.csv")
    assert made and made[0].rows == []
    assert f"skipped {fifo}: a FIFO, not a regular file; the log starts afresh" in caplog.messages


def test_what_is_not_a_regular_file_is_never_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The type is known before the open: a device is not even opened (opening one can act, a tape rewinds)."""
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *args: opened.append(str(path)) or real_open(path, *args))
    (tmp_path / "zero").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    for name in ("zero", "fifo"):
        with pytest.raises(UnreadableFile):
            read_regular_file(tmp_path / name, 100)
    assert opened == []


def test_a_fifo_swapped_in_after_the_check_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the check of the path and the open, the file may be replaced: what was opened is checked again."""
    fifo = tmp_path / "attention_stats.csv"
    os.mkfifo(fifo)
    regular = os.stat(__file__)
    monkeypatch.setattr(os, "stat", lambda path, *args, **kwargs: regular)  # the check saw a regular file
    with pytest.raises(UnreadableFile, match="^a FIFO, not a regular file$"):
        read_regular_file(fifo, 100)


class ReadSpy:
    """A file object that records the size of every read asked of it."""

    def __init__(self, file, reads: list[int]) -> None:
        self.file, self.reads = file, reads

    def read(self, size: int = -1) -> bytes:
        self.reads.append(size)
        return self.file.read(size)

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self) -> ReadSpy:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the reads the bounded reader asks for."""
    asked: list[int] = []
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda *args, **kwargs: ReadSpy(real_fdopen(*args, **kwargs), asked))
    return asked


def test_an_oversized_file_is_refused_before_any_byte_is_read(tmp_path: Path, reads: list[int]) -> None:
    """A checkpoint limit is gigabytes: a larger file must be refused on its size, not read up to the limit first."""
    huge = tmp_path / "last.ckpt"
    with huge.open("wb") as handle:
        handle.truncate(1001)
    with pytest.raises(UnreadableFile, match="^larger than 0 MiB$"):
        read_regular_file(huge, 1000)
    assert reads == []


def test_a_file_whose_size_is_not_known_is_read_no_further_than_the_limit(tmp_path: Path, reads: list[int]) -> None:
    """A regular file of the kernel's (st_size 0, content made on reading) linked in place of a log: the reader asks
    for one byte past the limit in all, never for everything."""
    link = tmp_path / "metrics.csv"
    link.symlink_to("/proc/self/status")
    assert os.stat(link).st_size == 0
    with pytest.raises(UnreadableFile, match="^larger than 0 MiB$"):
        read_regular_file(link, 100)
    assert sum(reads) == 101 and reads[0] == 1  # its size (0) and one byte, then in chunks up to the limit
