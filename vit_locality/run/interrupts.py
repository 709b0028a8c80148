"""Who handles which signal while a cell runs: one owner each, so that a stop is always recorded and resumable.

- SIGTERM (`timeout`, `kill -- -PGID`, `scancel`, SLURM preemption and `scontrol requeue`): this module's gate.
  Inside `Trainer.fit`, Lightning's own handler turns it into a checkpoint at the next step (`interrupted.ckpt`);
  outside fit (building the data, between fit and test, during test) Python's default action would end the process
  without a record, so `sigterm_raises()` makes SIGTERM raise Lightning's `SIGTERMException` there, and stays quiet
  during fit, where Lightning calls it after its own handler (it chains the handler it found).
- SIGUSR2 (SLURM's warning before the time limit, `--signal=USR2@signal_delay_s`, which submitit asks for): the
  same gate, the same path as SIGTERM: the batch in progress finishes, `interrupted.ckpt` is written and the cell is
  recorded interrupted. Only then does the handler that was installed before the cell (submitit's) run, once, in
  the main process: it requeues the job (at most `max_num_timeout` times), and the requeued job resumes from that
  checkpoint. Lightning's own SLURM auto-requeue is switched off where the Trainer is built (builders.py).
- SIGINT (Ctrl-C) raises KeyboardInterrupt wherever it lands, possibly between a batch's optimizer step and the end
  of that batch: a checkpoint of that state cannot resume exactly. So during fit the first Ctrl-C is handed to the
  SIGTERM handler in place (Lightning's: stop after the current batch, with `interrupted.ckpt`), remembered as SIGINT
  (exit 130); a second one raises KeyboardInterrupt at once, and the next run resumes from the last epoch's end.
- Data workers ignore all three (vit_locality.data.workers.init_data_worker): SLURM and `kill -- -PGID` signal every
  process of the job, and a worker that died of it would fail the cell. A worker forked before it reset its
  handlers runs the gate's, which does nothing outside the process that installed it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger("vit_locality")
TIME_LIMIT_SIGNAL = signal.SIGUSR2
Handler = Callable[[int, FrameType | None], Any] | int | None


class SigtermGate:
    """The installed handler: raises unless `deferred` (set while Lightning's fit loop owns the signal).
    `sigint_received`: a Ctrl-C was turned into that stop, so the cell reports SIGINT, not SIGTERM.
    `time_limit`: SIGUSR2 was, so the cell reports the time limit and `requeue_after_time_limit` hands it on to
    `on_time_limit_before`, the SIGUSR2 handler found when the gate was installed (submitit's under SLURM)."""

    def __init__(self) -> None:
        self.deferred = False
        self.sigint_received = False
        self.time_limit = False
        self.on_time_limit_before: Handler = None
        self.pid = os.getpid()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.deferred and os.getpid() == self.pid:
            raise SIGTERMException()

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """The first Ctrl-C during fit stops at the next batch boundary, as SIGTERM does; any other raises now."""
        if os.getpid() != self.pid:
            return
        if self.sigint_received or self.time_limit:
            raise KeyboardInterrupt
        self.sigint_received = True  # before the handler runs, so its log line names SIGINT (SignalName)
        if not self._stop_at_next_batch(frame):
            self.sigint_received = False
            raise KeyboardInterrupt

    def on_time_limit(self, signum: int, frame: FrameType | None) -> None:
        """SIGUSR2: stop as SIGTERM does (at the next batch boundary during fit, at once elsewhere), once."""
        if os.getpid() != self.pid or self.time_limit or self.sigint_received:
            return
        self.time_limit = True
        if not self._stop_at_next_batch(frame):
            raise SIGTERMException()

    def _stop_at_next_batch(self, frame: FrameType | None) -> bool:
        """During fit, hand the stop to the SIGTERM handler in place (Lightning's); False where there is none."""
        handler = signal.getsignal(signal.SIGTERM)
        if not self.deferred or not callable(handler) or handler is self:
            return False
        handler(signal.SIGTERM, frame)
        return True

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """While fitting: Lightning checkpoints at the next step and raises SIGTERMException itself."""
        self.deferred = True
        try:
            yield
        finally:
            self.deferred = False


LIGHTNING_SIGNAL_LOG = "lightning.pytorch.trainer.connectors.signal_connector"


class SignalName(logging.Filter):
    """Lightning's handler logs "Received SIGTERM: 15" for every stop handed to it: a Ctrl-C or the time limit is
    named as what it was."""

    def __init__(self, gate: SigtermGate) -> None:
        super().__init__()
        self.gate = gate

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "Received SIGTERM" in text and (self.gate.sigint_received or self.gate.time_limit):
            what = "SIGINT (Ctrl-C)" if self.gate.sigint_received else "SIGUSR2 (the time limit)"
            prefix = text.split("Received SIGTERM")[0]
            record.msg, record.args = f"{prefix}Received {what}: stopping after this batch", ()
        return True


@contextmanager
def sigterm_raises() -> Iterator[SigtermGate]:
    """Install the gate, for SIGTERM, SIGINT and SIGUSR2 (SIGCONT: its default), for the duration of a cell (main
    thread only; elsewhere signals cannot be handled)."""
    gate = SigtermGate()
    if threading.current_thread() is not threading.main_thread():
        yield gate
        return
    previous = signal.signal(signal.SIGTERM, gate)
    previous_sigint = signal.signal(signal.SIGINT, gate.on_sigint)
    gate.on_time_limit_before = signal.signal(TIME_LIMIT_SIGNAL, gate.on_time_limit)
    previous_sigcont = signal.signal(signal.SIGCONT, signal.SIG_DFL)  # SLURM sends it with each signal: nothing to do
    naming = SignalName(gate)
    logging.getLogger(LIGHTNING_SIGNAL_LOG).addFilter(naming)
    try:
        yield gate
    finally:
        logging.getLogger(LIGHTNING_SIGNAL_LOG).removeFilter(naming)
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_sigint)
        signal.signal(TIME_LIMIT_SIGNAL, gate.on_time_limit_before)
        signal.signal(signal.SIGCONT, previous_sigcont)


def requeue_after_time_limit(gate: SigtermGate, cell: str) -> None:
    """After a cell stopped by SIGUSR2 was recorded, run the SIGUSR2 handler that was there before it, once: under
    submitit that requeues the job and exits. When it refuses (`max_num_timeout` used up), say why and return, as
    without one: the cell's interruption then ends the process (exit 140) with its line "run the same command to
    resume", recorded `interrupted`, not `failed`. Call it with the gate uninstalled."""
    handler = gate.on_time_limit_before
    if not gate.time_limit or not callable(handler):
        return
    log.info("%s: stopped for the time limit and checkpointed; handing over to submitit to requeue the job", cell)
    try:
        handler(TIME_LIMIT_SIGNAL, None)
    except Exception as error:
        log.error(
            "%s: submitit did not requeue the job after the time limit (%s)",
            cell,
            str(error).strip().rstrip("."),
        )
