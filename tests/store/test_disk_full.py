"""A disk that fills during a run ends in one line: "no space left on device", the file and where it lies, whatever
the writer raised (torch's checkpoint writer raises a RuntimeError about its zip stream, naming neither)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import QUICK, TRAIN_THREADS, Spawner

from vit_locality.store import atomic
from vit_locality.store.atomic import DiskFull, disk_full_cause, replace_atomically

TORCH_ON_A_FULL_DISK = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1317504 vs 1317392")


def failing(error: BaseException):  # noqa: ANN201
    def write(stream: object) -> None:
        raise error

    return write


@pytest.mark.parametrize("free", [0, 10 << 30])
def test_a_failed_atomic_write_on_a_full_file_system_says_so(
    free: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(atomic, "free_bytes", lambda directory: free)
    target = tmp_path / "checkpoints" / "last.ckpt"
    expected = DiskFull if free == 0 else RuntimeError  # with space to spare the failure is what it is
    with pytest.raises(expected) as raised:
        replace_atomically(target, failing(TORCH_ON_A_FULL_DISK))
    if free == 0:
        assert str(raised.value).startswith(f"no space left on device: writing last.ckpt in {target.parent} (0.0 MiB")
    assert list(target.parent.iterdir()) == []  # no temporary file left


def test_an_enospc_write_is_a_full_disk_whatever_the_space_now(tmp_path: Path) -> None:
    with pytest.raises(DiskFull, match="no space left on device: writing results.json in "):
        replace_atomically(tmp_path / "results.json", failing(OSError(errno.ENOSPC, "No space left on device")))


def test_the_first_full_write_of_a_chain_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint's write failed first; the failed record written after it failed too: the checkpoint is named."""
    monkeypatch.setattr(atomic, "free_bytes", lambda directory: 0)
    try:
        try:
            replace_atomically(tmp_path / "last.ckpt", failing(TORCH_ON_A_FULL_DISK))
        except DiskFull:  # the cell records the failure, and that write fails too
            replace_atomically(tmp_path / "results.json", failing(OSError(errno.ENOSPC, "No space left on device")))
        pytest.fail("no DiskFull raised")
    except DiskFull as error:
        assert str(error).startswith("no space left on device: writing results.json")
        assert str(disk_full_cause(error, tmp_path)).startswith("no space left on device: writing last.ckpt")
    plain = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "csv" / "metrics.csv"))
    found = disk_full_cause(plain, tmp_path)
    assert found is not None and str(found).startswith(f"no space left on device: writing metrics.csv in {tmp_path}")
    assert disk_full_cause(ValueError("no"), tmp_path) is None
    unnamed = disk_full_cause(OSError(errno.ENOSPC, "full"), tmp_path)  # no file named: the run directory
    assert str(unnamed).startswith(f"no space left on device: writing into {tmp_path}")


SIMULATED = """
import errno, sys, torch
def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")
torch.save = no_space  # every checkpoint write meets a full disk
from vit_locality.train import cli
sys.argv = ["train.py", *sys.argv[1:]]
cli()
"""


def test_a_run_on_a_full_disk_ends_in_one_line_naming_it(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "run"
    args = [*QUICK, "stats.enabled=false", "startup.print_config=false", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": TRAIN_THREADS}
    done = subprocess.run(
        [sys.executable, "-c", SIMULATED, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stderr[-3000:]
    (line,) = [line for line in (done.stdout + done.stderr).splitlines() if "[ERROR]" in line]
    assert f"failed: no space left on device: writing last.ckpt in {run_dir / 'checkpoints'}" in line, line
    assert line.endswith("free some space there and run the same command to resume from the last checkpoint")
