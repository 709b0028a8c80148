"""One run per run directory: a second holder is refused with the first one named, in this process or another; a
holder that died frees the directory, with flock and without it."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import stat
import subprocess
import sys

import pytest
from helpers import REPO

from vit_locality.errors import ConfigError, exit_code_of, first_line
from vit_locality.run.lock import LOCK_FILE, LockHolder, RunLock, RunLocked

# In a child process: hold the lock on argv[1], say so, then wait to be killed.
HOLD_LOCK = """
import sys, time
from vit_locality.run.lock import RunLock
with RunLock(sys.argv[1]):
    print("holding", flush=True)
    time.sleep(120)
"""


def holder_record(run_dir) -> LockHolder | None:
    return LockHolder.parse((run_dir / LOCK_FILE).read_text())


def test_a_second_lock_in_the_same_process_is_refused_naming_the_holder(tmp_path) -> None:
    with RunLock(tmp_path), pytest.raises(RunLocked) as refusal:
        RunLock(tmp_path).acquire()
    message = str(refusal.value)
    assert f"run directory {tmp_path} is in use by PID {os.getpid()} on {socket.gethostname()}" in message
    assert "\n" not in message and first_line(refusal.value) == message
    assert exit_code_of(refusal.value) == 2 and not isinstance(refusal.value, ConfigError)  # not a bad setting


def test_the_lock_is_released_on_exit_and_on_an_exception(tmp_path) -> None:
    with RunLock(tmp_path):
        assert holder_record(tmp_path).pid == os.getpid()
    assert holder_record(tmp_path) is None
    with pytest.raises(RuntimeError, match="the run failed"), RunLock(tmp_path):
        raise RuntimeError("the run failed")
    with RunLock(tmp_path):  # free again
        pass


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_the_lock_file_is_readable_as_the_umask_allows(tmp_path, umask) -> None:
    previous = os.umask(umask)
    try:
        with RunLock(tmp_path / "run"):
            pass
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "run" / LOCK_FILE).stat().st_mode) == 0o666 & ~umask


def test_a_holder_in_another_process_is_refused_until_it_is_killed(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "holding"
        with pytest.raises(RunLocked, match=f"in use by PID {child.pid} on {socket.gethostname()}"):
            RunLock(tmp_path).acquire()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert holder_record(tmp_path).pid == child.pid  # the dead holder's record is still there...
    with RunLock(tmp_path):  # ...but the kernel dropped its lock
        assert holder_record(tmp_path).pid == os.getpid()


@pytest.fixture
def no_flock(monkeypatch):
    """A file system without flock (NFS without lock support answers ENOLCK)."""

    def unsupported(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", unsupported)


def record_holder(run_dir, pid: int, host: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / LOCK_FILE).write_text(LockHolder(pid, host, "2024-01-01T00:00:00+00:00").to_text())


def ended_process_id() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_without_flock_a_dead_holder_on_this_host_is_taken_over(tmp_path, no_flock) -> None:
    record_holder(tmp_path, ended_process_id(), socket.gethostname())
    with RunLock(tmp_path):
        assert holder_record(tmp_path).pid == os.getpid()
    assert holder_record(tmp_path) is None


def test_without_flock_a_live_holder_is_refused(tmp_path, no_flock) -> None:
    with RunLock(tmp_path), pytest.raises(RunLocked, match=f"in use by PID {os.getpid()} "):
        RunLock(tmp_path).acquire()
    record_holder(tmp_path, os.getppid(), socket.gethostname())
    with pytest.raises(RunLocked, match=f"in use by PID {os.getppid()} "):
        RunLock(tmp_path).acquire()


def test_without_flock_a_holder_on_another_host_is_refused_with_the_way_out(tmp_path, no_flock) -> None:
    record_holder(tmp_path, ended_process_id(), "elsewhere")
    with pytest.raises(RunLocked) as refusal:
        RunLock(tmp_path).acquire()
    assert "on elsewhere" in str(refusal.value)
    assert str(refusal.value).endswith(f"if it is no longer running, delete {tmp_path / LOCK_FILE}")


def test_train_py_refuses_a_locked_run_directory_with_status_2_and_one_line(tmp_path) -> None:
    """The entry point takes the status from RunLocked itself: 2, with the refusal as its one line."""
    from helpers import QUICK, run_train

    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run_dir)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        proc = run_train([*QUICK, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    assert proc.returncode == 2, proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output
    (line,) = [line for line in output.splitlines() if "in use by" in line]
    assert f"run directory {run_dir} is in use by PID {holder.pid} on {socket.gethostname()}" in line
