"""One run per run directory: a second holder is refused with the first one named, in this process or another; a
holder that died frees the directory, with flock and without it."""

from __future__ import annotations

import errno
import fcntl
import multiprocessing
import os
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest
from helpers import REPO, Spawner

from vit_locality.errors import ConfigError, exit_code_of, first_line
from vit_locality.run.lock import LOCK_FILE, LockHolder, RunLock, RunLocked

CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO)}

# In a child process: try the lock on argv[1] once; print "refused" if another process holds it.
TRY_LOCK = """
import sys
from vit_locality.run.lock import RunLock, RunLocked
try:
    RunLock(sys.argv[1]).acquire()
except RunLocked:
    print("refused")
"""

# In a child process: hold the lock on argv[1], say so, then wait to be killed.
HOLD_LOCK = """
import sys, time
from vit_locality.run.lock import RunLock
with RunLock(sys.argv[1]):
    print("holding", flush=True)
    time.sleep(120)
"""


def holder_record(run_dir) -> LockHolder | None:
    """The recorded holder; None where the lock file is empty or gone (released)."""
    return LockHolder.read(run_dir / LOCK_FILE)


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
    assert not (tmp_path / LOCK_FILE).exists()  # a finished run leaves no empty .lock behind
    with pytest.raises(RuntimeError, match="the run failed"), RunLock(tmp_path):
        raise RuntimeError("the run failed")
    assert not (tmp_path / LOCK_FILE).exists()
    with RunLock(tmp_path):  # free again
        pass


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_the_lock_file_is_readable_as_the_umask_allows(tmp_path, umask) -> None:
    previous = os.umask(umask)
    try:
        with RunLock(tmp_path / "run"):
            mode = stat.S_IMODE((tmp_path / "run" / LOCK_FILE).stat().st_mode)
    finally:
        os.umask(previous)
    assert mode == 0o666 & ~umask


def test_a_holder_in_another_process_is_refused_until_it_is_killed(tmp_path, spawns: Spawner) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path)], env=CHILD_ENV, stdout=subprocess.PIPE, text=True
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


def test_a_forked_worker_that_ends_leaves_the_lock_with_its_parent(tmp_path, spawns: Spawner) -> None:
    """Data workers forked during a run share the open lock file; their exit must not drop the parent's lock."""
    with RunLock(tmp_path):
        worker = multiprocessing.get_context("fork").Process(target=sys.exit)
        worker.start()
        worker.join()
        tried = subprocess.run(
            [sys.executable, "-c", TRY_LOCK, str(tmp_path)], env=CHILD_ENV, capture_output=True, text=True
        )
    assert worker.exitcode == 0 and tried.stdout.strip() == "refused", tried.stderr[-1500:]


@pytest.fixture
def no_flock(monkeypatch):
    """A file system without flock (NFS without lock support answers ENOLCK)."""

    def unsupported(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", unsupported)


def killed_holder(run_dir) -> tuple[int, list[str]]:
    """A holder without flock that was killed while holding: its PID and the lines of the marker it left."""
    child = subprocess.Popen(
        [sys.executable, "-c", NO_FLOCK + HOLD_LOCK, str(run_dir)], env=CHILD_ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "holding"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    return child.pid, (run_dir / LOCK_FILE).read_text().splitlines()


# Prepended to a child's program: flock answers ENOLCK there too.
NO_FLOCK = """
import errno, fcntl
def unsupported(descriptor, operation):
    raise OSError(errno.ENOLCK, "No locks available")
fcntl.flock = unsupported
"""


def test_without_flock_a_killed_holder_is_taken_over(tmp_path, no_flock, spawns: Spawner) -> None:
    pid, marker = killed_holder(tmp_path)
    assert marker[:2] == [str(pid), socket.gethostname()]  # filelock's marker: PID, host, process start
    with RunLock(tmp_path):
        assert LockHolder.read(tmp_path / LOCK_FILE).pid == os.getpid()
    assert not (tmp_path / LOCK_FILE).exists()


def test_without_flock_a_pid_reused_by_an_unrelated_process_is_taken_over(tmp_path, no_flock, spawns: Spawner) -> None:
    """The killed holder's PID now belongs to another live process (here: our parent, started at another time):
    the recorded process start tells the two apart, and the lock is taken over instead of refused naming it."""
    _, marker = killed_holder(tmp_path)
    reused = os.getppid()
    (tmp_path / LOCK_FILE).write_text("\n".join([str(reused), *marker[1:]]) + "\n")
    with RunLock(tmp_path):
        assert LockHolder.read(tmp_path / LOCK_FILE).pid == os.getpid()


def _two_line_marker(tmp_path, pid: int, written_ago_s: float) -> None:
    """A soft-lock marker with PID and host only (older filelock versions: no process start), written `written_ago_s`
    seconds ago."""
    path = tmp_path / LOCK_FILE
    path.write_text(f"{pid}\n{socket.gethostname()}\n")
    stamp = time.time() - written_ago_s
    os.utime(path, (stamp, stamp))


@pytest.mark.parametrize("written_ago_s, taken_over", [(60.0, True), (-60.0, False)], ids=["reused", "holder"])
def test_without_flock_a_marker_without_start_time_is_judged_by_the_pids_start(
    tmp_path, no_flock, spawns: Spawner, written_ago_s: float, taken_over: bool
) -> None:
    """The adversary's case: the marker's PID now belongs to a `sleep` started after the marker was written, so its
    writer is gone and the lock is taken over. A process that started before its marker (a marker written a minute
    from now) may be its writer: refused."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        _two_line_marker(tmp_path, sleeper.pid, written_ago_s)
        if taken_over:
            with RunLock(tmp_path):
                assert LockHolder.read(tmp_path / LOCK_FILE).pid == os.getpid()
        else:
            with pytest.raises(RunLocked, match=f"in use by PID {sleeper.pid} on {socket.gethostname()}"):
                RunLock(tmp_path).acquire()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_without_flock_a_live_holder_is_refused(tmp_path, no_flock, spawns: Spawner) -> None:
    with RunLock(tmp_path), pytest.raises(RunLocked, match=f"in use by PID {os.getpid()} on {socket.gethostname()} "):
        RunLock(tmp_path).acquire()
    child = subprocess.Popen(
        [sys.executable, "-c", NO_FLOCK + HOLD_LOCK, str(tmp_path)], env=CHILD_ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "holding"
        with pytest.raises(RunLocked) as refusal:
            RunLock(tmp_path).acquire()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert f"in use by PID {child.pid} on {socket.gethostname()} (since " in str(refusal.value)
    assert "delete" not in str(refusal.value)  # its process can be checked from here


def test_without_flock_a_holder_on_another_host_is_refused_with_the_way_out(
    tmp_path, no_flock, spawns: Spawner
) -> None:
    pid, marker = killed_holder(tmp_path)
    (tmp_path / LOCK_FILE).write_text("\n".join([str(pid), "elsewhere", *marker[2:]]) + "\n")
    with pytest.raises(RunLocked) as refusal:
        RunLock(tmp_path).acquire()
    assert f"in use by PID {pid} on elsewhere" in str(refusal.value)
    assert str(refusal.value).endswith(f"if it is no longer running, delete {tmp_path / LOCK_FILE}")


def test_train_py_refuses_a_locked_run_directory_with_status_2_and_one_line(tmp_path, spawns: Spawner) -> None:
    """The entry point takes the status from RunLocked itself: 2, with the refusal as its one line."""
    from helpers import QUICK

    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run_dir)], env=CHILD_ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        proc = spawns.run_train([*QUICK, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()
    assert proc.returncode == 2, proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output
    (line,) = [line for line in output.splitlines() if "in use by" in line]
    assert f"run directory {run_dir} is in use by PID {holder.pid} on {socket.gethostname()}" in line


# In a child process: take and release the lock on argv[1] again and again; while holding it, claim a marker file
# that only one holder at a time can create. Two holders at once (two lock files) make the claim fail.
CONTEND = """
import os, sys, time
from vit_locality.run.lock import RunLock, RunLocked
run_dir, taken, deadline = sys.argv[1], 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        with RunLock(run_dir):
            marker = os.open(os.path.join(run_dir, "holder"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(marker)
            os.unlink(os.path.join(run_dir, "holder"))
            taken += 1
    except RunLocked:
        pass
print(taken, flush=True)
"""


def test_contenders_that_remove_the_lock_file_never_hold_it_together(tmp_path, spawns: Spawner) -> None:
    """Release removes `.lock` while holding it; a contender that opened the removed file must not run beside one
    that created the next file."""
    contenders = [
        subprocess.Popen(
            [sys.executable, "-c", CONTEND, str(tmp_path), "4"],
            env=CHILD_ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    outcomes = [contender.communicate(timeout=60) for contender in contenders]
    assert all(contender.returncode == 0 for contender in contenders), [err[-1500:] for _, err in outcomes]
    assert all(int(out) > 0 for out, _ in outcomes)  # each one held it, one at a time
    assert not (tmp_path / LOCK_FILE).exists()
