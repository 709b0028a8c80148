"""How data workers start: signals left to the main process, an explicit start method, no more workers than cores."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading

from lightning.fabric.utilities.seed import pl_worker_init_function

# The platform's default start method, named: under a launcher with its own process class (joblib's loky) the default
# is that class, which cannot start the DataLoader's workers ("'Process' object has no attribute 'env'").
WORKER_START_METHOD = multiprocessing.get_all_start_methods()[0]

log = logging.getLogger("vit_locality")


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask), which torch's DataLoader compares its workers with."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity masks (macOS)
        return os.cpu_count() or 1


def usable_workers(asked: int, said: set[tuple[int, int]]) -> int:
    """`data.num_workers` capped at the usable cores (more only wait, and torch warns); said once per (asked,
    cores) pair in `said`, which its owner (the datamodule) keeps, so each of its loaders does not say it again."""
    cores = usable_cores()
    if asked <= cores:
        return asked
    if (asked, cores) not in said:
        said.add((asked, cores))
        log.info("data.num_workers=%d: %d data workers, the cores this process may use", asked, cores)
    return cores


def init_data_worker(worker_id: int) -> None:
    """Leave SIGTERM, SIGINT and SIGUSR2 to the main process, which checkpoints and stops the workers
    (vit_locality.run.interrupts); a SIGTERM from the parent itself still ends the worker (needs `sigwaitinfo`)."""
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
