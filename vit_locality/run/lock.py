"""One run per run directory at a time: `with RunLock(run_dir): ...` around everything a cell does there.

The lock is filelock's `flock` on `<run_dir>/.lock` (the kernel drops it when the holder dies); the holder writes
who it is for the refusal. Where the file system has no `flock`, filelock's soft lock is used: a marker of this
host whose process has ended, or whose PID was reused since (`reused_pid_marker`), is taken over; another host's is
refused with the way out."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType

from filelock import BaseFileLock, SoftFileLock, Timeout, UnixFileLock

from vit_locality.errors import VitLocalityError

LOCK_FILE = ".lock"
FLOCK_UNSUPPORTED = {errno.ENOLCK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
RECORD_LIMIT = 4096  # bytes of a holder record read back; a record is about a hundred


class RunLocked(VitLocalityError):
    """Another process is running in the run directory; the message names it (PID, host) and the directory."""

    exit_code = 2


@dataclass(frozen=True)
class LockHolder:
    """Who holds a run directory, as recorded in its lock file."""

    pid: int
    host: str
    started: str
    command: str = ""  # the command (train.py's id) whose cell holds it; cells of one command wait for each other

    @classmethod
    def this_process(cls, command: str = "") -> LockHolder:
        now = datetime.now().astimezone().isoformat(timespec="seconds")
        return cls(os.getpid(), socket.gethostname(), now, command)

    @classmethod
    def read(cls, path: Path) -> LockHolder | None:
        """The holder recorded at `path`: this module's record, or the PID and host lines of filelock's soft marker;
        None where there is none (released, not yet written, or unreadable)."""
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            text = os.read(descriptor, RECORD_LIMIT).decode(errors="replace")
            since = datetime.fromtimestamp(os.fstat(descriptor).st_mtime).astimezone().isoformat(timespec="seconds")
        finally:
            os.close(descriptor)
        try:
            fields = json.loads(text)
            return cls(int(fields["pid"]), str(fields["host"]), str(fields["started"]), str(fields.get("command", "")))
        except (ValueError, KeyError, TypeError):
            pass
        lines = text.splitlines()
        if len(lines) >= 2 and lines[0].isdigit():
            return cls(int(lines[0]), lines[1].split("?pidns-")[0], since)  # without the PID namespace filelock appends
        return None

    def to_text(self) -> str:
        return json.dumps(asdict(self)) + "\n"

    def describe(self) -> str:
        return f"PID {self.pid} on {self.host} (since {self.started})"


def has_flock(directory: Path) -> bool:
    """Whether the file system of `directory` supports `flock` (network file systems without lock support answer
    ENOLCK), tried on an unnamed file so no lock file of the wrong kind is left behind."""
    with tempfile.TemporaryFile(dir=directory) as probe:
        try:
            fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in FLOCK_UNSUPPORTED:
                return False
            raise
    return True


class RunLock:
    """An exclusive hold on a run directory for the duration of a `with` block; RunLocked if another process has it.

    Not re-entrant: a second RunLock on the same directory, in this process or any other, is refused, except that a
    cell of the same `command` waits: two cells of one sweep that are one computation (settings that cannot act or
    only measure) share a directory, and the second, under a parallel launcher, measures what the first trained."""

    def __init__(self, run_dir: Path, command: str = "") -> None:
        self.run_dir = Path(run_dir)
        self.command = command
        self.path = self.run_dir / LOCK_FILE
        self._lock: BaseFileLock | None = None
        self._descriptor: int | None = None  # the flock'ed file, lent by filelock while held

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self) -> None:
        if self._lock is not None:
            raise RuntimeError(f"{self.path} is held by this RunLock already")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if has_flock(self.run_dir):
            lock: BaseFileLock = UnixFileLock(self.path, timeout=0, thread_local=False, on_acquired=self._record)
        else:
            lock = SoftFileLock(self.path, timeout=0, thread_local=False)
            remove_reused_pid_marker(self.path)
        try:
            lock.acquire()
        except Timeout:
            holder = LockHolder.read(self.path)
            if not (self.command and holder is not None and holder.command == self.command):
                raise self._refusal(soft=isinstance(lock, SoftFileLock)) from None
            lock.acquire(timeout=-1, poll_interval=0.5)  # a cell of this command: its run ends, then this one
        self._lock = lock

    def release(self) -> None:
        """Empty and remove the lock file, then drop the lock. Unlocking explicitly (filelock does) matters: worker
        processes forked during the run share the open file, and closing it here alone would leave them the lock."""
        lock, self._lock = self._lock, None
        descriptor, self._descriptor = self._descriptor, None
        if lock is None:
            return
        try:
            if descriptor is not None:
                os.ftruncate(descriptor, 0)  # one that opened the file already reads no holder
                with contextlib.suppress(FileNotFoundError):  # removed already
                    if os.path.samestat(os.fstat(descriptor), os.stat(self.path)):  # not a successor's file
                        self.path.unlink(missing_ok=True)
        finally:
            lock.release()

    def _record(self, descriptor: int) -> None:
        """Write the holder into the freshly locked file, for the refusal of the next one."""
        self._descriptor = descriptor
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, LockHolder.this_process(self.command).to_text().encode(), 0)
        os.fsync(descriptor)  # other hosts read it through the file server

    def _refusal(self, soft: bool) -> RunLocked:
        holder = LockHolder.read(self.path)
        who = holder.describe() if holder else "another process (not yet recorded)"
        unprovable = soft and (holder is None or holder.host != socket.gethostname())
        hint = f"; if it is no longer running, delete {self.path}" if unprovable else ""
        return RunLocked(
            f"run directory {self.run_dir} is in use by {who}: wait for that run to end or stop it, "
            f"or choose another sweep_name{hint}"
        )


def process_start(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), from /proc; None where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, IndexError, StopIteration):
        return None
    return int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start, in clock ticks


def reused_pid_marker(path: Path, slack_s: float = 2.0) -> os.stat_result | None:
    """The soft-lock marker at `path` (its stat) when it names a live process of this host that started after the
    marker was last written: that PID was reused by another process, and the writer is gone. None otherwise."""
    try:
        marker = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    holder = LockHolder.read(path)
    if holder is None or holder.host != socket.gethostname():
        return None
    started = process_start(holder.pid)
    return marker if started is not None and started > marker.st_mtime + slack_s else None


def remove_reused_pid_marker(path: Path) -> None:
    """Remove a marker `reused_pid_marker` finds stale, unless the file was replaced meanwhile (a new holder's)."""
    marker = reused_pid_marker(path)
    if marker is None:
        return
    with contextlib.suppress(FileNotFoundError):
        if os.path.samestat(marker, os.stat(path, follow_symlinks=False)):
            path.unlink()
