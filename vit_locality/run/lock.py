"""One run per run directory at a time: `with RunLock(run_dir): ...` around everything a cell does there.

Two commands on one directory (the same command started twice, or two configs that map to one directory) would
otherwise both run, and whichever wrote its record last would win. The lock is `fcntl.flock` on `<run_dir>/.lock`,
held for the whole run: the kernel drops it when the holder exits or is killed, so a crashed run never blocks the
next one. The file names the holder (PID, host, start time) for the refusal. Its holder removes it on release, while
still holding the lock; an acquirer that locked a file since removed (it opened the file before the removal) finds
that its file is no longer the one at `.lock` and starts again, so two holders never hold two different files.

Where flock is not available (network file systems without lock support answer ENOLCK), the holder's record is the
lock: a holder recorded on this host whose process is gone (or whose PID now belongs to a process started at another
time) is taken over; a live one, or one on another host (whose process cannot be checked from here), is refused.
That fallback is best effort: two processes that read an empty
record in the same instant can both proceed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType

from vit_locality.errors import VitLocalityError

log = logging.getLogger("vit_locality")

LOCK_FILE = ".lock"
FLOCK_UNSUPPORTED = {errno.ENOLCK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
RECORD_LIMIT = 4096  # bytes of a holder record read back; a record is about a hundred
ACQUIRE_ATTEMPTS = 100  # each retry means a holder released in between; this many in a row means something is amiss


class RunLocked(VitLocalityError):
    """Another process is running in the run directory; the message names it (PID, host) and the directory."""

    exit_code = 2


@dataclass(frozen=True)
class LockHolder:
    """Who holds a run directory, as recorded in its lock file."""

    pid: int
    host: str
    started: str
    process_start: int | None = None  # the kernel's start time of `pid` (clock ticks since boot); None: unknown

    @classmethod
    def this_process(cls) -> LockHolder:
        started = datetime.now().astimezone().isoformat(timespec="seconds")
        return cls(os.getpid(), socket.gethostname(), started, process_start_ticks(os.getpid()))

    @classmethod
    def parse(cls, text: str) -> LockHolder | None:
        """The recorded holder; None for an empty record (a released lock) or one cut short by a crash."""
        try:
            fields = json.loads(text)
            start = fields.get("process_start")
            return cls(
                int(fields["pid"]), str(fields["host"]), str(fields["started"]), None if start is None else int(start)
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def to_text(self) -> str:
        return json.dumps(asdict(self)) + "\n"

    def is_gone(self) -> bool:
        """Known to have ended: recorded on this host, and no process has its PID, or the process that has it now
        started at another time than the recorded one (the PID was reused). One on another host cannot be checked
        from here, so it counts as running."""
        if self.host != socket.gethostname():
            return False
        if not process_exists(self.pid):
            return True
        now = process_start_ticks(self.pid)
        return self.process_start is not None and now is not None and now != self.process_start

    def describe(self) -> str:
        return f"PID {self.pid} on {self.host} (since {self.started})"


def process_start_ticks(pid: int) -> int | None:
    """When process `pid` started (field 22 of /proc/<pid>/stat, clock ticks since boot); None where that cannot be
    read (no /proc, or the process is gone). With the PID it names one process, even after the PID is reused."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        after_name = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
        return int(after_name[19])  # fields 3.. follow the name; the start time is field 22
    except (OSError, ValueError, IndexError):
        return None


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class RunLock:
    """An exclusive hold on a run directory for the duration of a `with` block; RunLocked if another process has it.

    Not re-entrant: a second RunLock on the same directory, in this process or any other, is refused."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._descriptor: int | None = None
        self._flocked = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self) -> None:
        if self._descriptor is not None:
            raise RuntimeError(f"{self.path} is held by this RunLock already")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(ACQUIRE_ATTEMPTS):
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides who may read it
            try:
                self._flocked = self._try_flock(descriptor)
                if not self._flocked:
                    self._claim_record(descriptor)
                if not self._is_current_file(descriptor):  # its holder removed it after we opened it
                    self._unlock_and_close(descriptor)
                    continue
                write_holder(descriptor, LockHolder.this_process())
            except BaseException:
                os.close(descriptor)
                raise
            self._descriptor = descriptor
            return
        raise self._refusal(None, "; it changed hands too often to take")

    def release(self) -> None:
        """Remove the lock file, then drop the lock. Removing it while still holding the lock is what makes removal
        safe: whoever locks the removed file afterwards sees it is gone and starts again (`acquire`). Unlocking
        explicitly (not only closing) matters: worker processes forked during the run share the open file, and
        closing it here alone would leave the lock with them."""
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        try:
            os.ftruncate(descriptor, 0)  # an acquirer that opened the file already reads no holder
            if self._is_current_file(descriptor):
                self.path.unlink(missing_ok=True)
        finally:
            self._unlock_and_close(descriptor)

    def _is_current_file(self, descriptor: int) -> bool:
        """Whether `descriptor` is still the file at `self.path` (not one removed and perhaps replaced since)."""
        try:
            at_path = os.stat(self.path)
        except FileNotFoundError:
            return False
        opened = os.fstat(descriptor)
        return (opened.st_dev, opened.st_ino) == (at_path.st_dev, at_path.st_ino)

    def _unlock_and_close(self, descriptor: int) -> None:
        try:
            if self._flocked:
                fcntl.flock(descriptor, fcntl.LOCK_UN)
        finally:
            os.close(descriptor)

    def _try_flock(self, descriptor: int) -> bool:
        """True once the kernel lock is held; False where this file system has no flock; RunLocked if taken."""
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._refusal(read_holder(descriptor)) from None
        except OSError as error:
            if error.errno in FLOCK_UNSUPPORTED:
                log.debug("%s: no flock on this file system (%s); using the holder record alone", self.path, error)
                return False
            raise
        return True

    def _claim_record(self, descriptor: int) -> None:
        """Without flock: refuse a recorded holder that may be running; take over one known to have ended."""
        holder = read_holder(descriptor)
        if holder is None:
            return
        if holder.host != socket.gethostname():
            raise self._refusal(holder, f"; if it is no longer running, delete {self.path}")
        if not holder.is_gone():
            raise self._refusal(holder)
        log.warning("%s: taking over the lock of %s, which is no longer running", self.run_dir, holder.describe())

    def _refusal(self, holder: LockHolder | None, hint: str = "") -> RunLocked:
        who = holder.describe() if holder else "another process (not yet recorded)"
        return RunLocked(
            f"run directory {self.run_dir} is in use by {who}: wait for that run to end or stop it, "
            f"or choose another sweep_name{hint}"
        )


def read_holder(descriptor: int) -> LockHolder | None:
    return LockHolder.parse(os.pread(descriptor, RECORD_LIMIT, 0).decode(errors="replace"))


def write_holder(descriptor: int, holder: LockHolder) -> None:
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, holder.to_text().encode(), 0)
    os.fsync(descriptor)  # other hosts read it through the file server
