"""One run per run directory at a time (`with RunLock(run_dir): ...`), and the way out for a cell refused its run
directory. The lock is filelock's `flock` on `<run_dir>/.lock`; where the file system has none, filelock's soft lock,
whose marker is taken over once its process has ended on this host (`reused_pid_marker`)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import sys
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
        """The holder recorded at `path` (ours, or filelock's soft marker); None where there is none."""
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
    """Whether the file system of `directory` supports `flock`, tried on an unnamed file."""
    with tempfile.TemporaryFile(dir=directory) as probe:
        try:
            fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in FLOCK_UNSUPPORTED:
                return False
            raise
    return True


class RunLock:
    """An exclusive, not re-entrant hold on a run directory; RunLocked if another process has it, except that a cell
    of the same `command` waits (two cells of one sweep that are one computation share a directory)."""

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
        """Empty and remove the lock file, then unlock (forked workers share the open file: closing is not enough)."""
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
        """Write the holder into the freshly locked file, for the next one's refusal."""
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
    """The soft-lock marker's stat when it names a process of this host that started after the marker was written
    (the PID was reused, the writer is gone); None otherwise."""
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
    """Remove a marker `reused_pid_marker` finds stale, unless it was replaced meanwhile."""
    marker = reused_pid_marker(path)
    if marker is None:
        return
    with contextlib.suppress(FileNotFoundError):
        if os.path.samestat(marker, os.stat(path, follow_symlinks=False)):
            path.unlink()


def another_directory(run_dir: Path) -> str:
    """The override that gives this cell a run directory of its own, in words a user can type."""
    hydra_config = sys.modules.get("hydra.core.hydra_config")
    if hydra_config is None or not hydra_config.HydraConfig.initialized():  # not a Hydra job: no command to name
        return "move that directory away or run the cell with another output directory"
    from hydra.types import RunMode

    hydra_job = hydra_config.HydraConfig.get()
    sweep_set = any(o.startswith("hydra.sweep.dir=") for o in hydra_job.overrides.hydra)
    return f"move that directory away or {way_out(run_dir, hydra_job.mode == RunMode.MULTIRUN, sweep_set)}"


def way_out(run_dir: Path, multirun: bool, sweep_dir_set: bool) -> str:
    """Another `hydra.run.dir`, `hydra.sweep.dir` (where the command sets it) or `sweep_name`, as typed."""
    if not multirun:
        return f"add hydra.run.dir={Path(run_dir).parent / (Path(run_dir).name + '-2')}"
    if sweep_dir_set:
        return f"add hydra.sweep.dir={Path(run_dir).parent}-2"
    return "add sweep_name=<another name>"


# What Hydra writes into a run directory before the cell starts, and the lock the cell takes (released by now).
HYDRA_ONLY = {".hydra", "train.log", ".lock"}


def remove_refused_run_dir(run_dir: Path) -> bool:
    """Remove the run directory Hydra made for a refused command when it holds nothing but Hydra's own files."""
    run_dir = Path(run_dir)
    try:
        names = {path.name for path in run_dir.iterdir()}
    except OSError:
        return False
    if not names <= HYDRA_ONLY or not (run_dir / ".hydra").is_dir() or (run_dir / ".hydra").is_symlink():
        return False
    for handler in list(logging.getLogger().handlers):  # the job's log file, which Hydra opened inside
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir.resolve():
            logging.getLogger().removeHandler(handler)
            handler.close()
    shutil.rmtree(run_dir / ".hydra")
    for name in names - {".hydra"}:
        (run_dir / name).unlink(missing_ok=True)
    run_dir.rmdir()
    return True
