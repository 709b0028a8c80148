"""How a data worker starts: signals left to the main process, the start method named explicitly, and no more workers
than the cores the process may use."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading

from lightning.fabric.utilities.seed import pl_worker_init_function

# Python's default start method on this platform ('fork' on Linux up to 3.13), named explicitly: a process started by
# a launcher with its own process class (joblib's loky workers) has that class as its default, and the DataLoader's
# plain workers cannot be started through it ("'Process' object has no attribute 'env'").
WORKER_START_METHOD = multiprocessing.get_all_start_methods()[0]

log = logging.getLogger("vit_locality")
_CAPPED: set[tuple[int, int]] = set()  # (asked, cores) already said in this process


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask: a SLURM allocation, `taskset`, a container's cpuset),
    which is what torch's DataLoader compares its workers with."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity masks (macOS)
        return os.cpu_count() or 1


def usable_workers(asked: int) -> int:
    """`data.num_workers`, capped at the cores this process may use: more workers than cores only wait for each
    other (the data do not depend on the count), and torch warns twice a run. Said once per process, in one line."""
    cores = usable_cores()
    if asked <= cores:
        return asked
    if (asked, cores) not in _CAPPED:
        _CAPPED.add((asked, cores))
        log.info("data.num_workers=%d: %d data workers, the cores this process may use", asked, cores)
    return cores


def init_data_worker(worker_id: int) -> None:
    """Leave SIGTERM, SIGINT and SIGUSR2 to the main process, which turns them into an interrupted checkpoint and then
    shuts the workers down (vit_locality.run.interrupts says who owns each). `timeout`, `kill -- -PGID`, `scancel`,
    Ctrl-C and SLURM's time-limit warning signal the whole process group (or job): a worker that died of it first, or
    ran the handler it inherited (submitit's requeue), would end the cell as "DataLoader worker ... exited
    unexpectedly" with no checkpoint. SIGCONT goes back to its default (submitit's handler only logs it).

    A worker still ends with its main process: on SIGKILL its watchdog notices the parent gone, and a SIGTERM from
    the parent itself (what multiprocessing sends daemonic workers as the interpreter exits) ends it, as torch's own
    worker handler does; ignored, the exit would wait for the worker forever. Telling the sender apart needs
    `sigwaitinfo` (Linux, not macOS); without it SIGTERM stays torch's.
    Lightning's worker seeding (`seed_everything(workers=True)`) is kept; training draws do not depend on it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    signal.signal(signal.SIGCONT, signal.SIG_DFL)
    if hasattr(signal, "sigwaitinfo"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # for a thread that would not block it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # inherited by every thread started from here on
        parent = os.getppid()
        threading.Thread(target=_exit_on_sigterm_from, args=(parent,), name="parent-sigterm", daemon=True).start()
    if os.environ.get("PL_SEED_WORKERS") == "1":
        pl_worker_init_function(worker_id)


def _exit_on_sigterm_from(parent: int) -> None:
    """Take every SIGTERM (blocked, so none is delivered otherwise) and exit on the one its sender is `parent`."""
    while signal.sigwaitinfo({signal.SIGTERM}).si_pid != parent:
        pass
    os._exit(0)
