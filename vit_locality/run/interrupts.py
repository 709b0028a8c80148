"""One owner for each signal while a cell runs, so a stop is always recorded and resumable: SIGTERM, SIGUSR2
(SLURM's time limit, then submitit requeues) and a first Ctrl-C during fit stop after the current batch; outside fit
the gate raises Lightning's SIGTERMException. Table: docs/scaling_out.md."""

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
    """The installed handler: raises unless `deferred` (while Lightning's fit loop owns the signal). `sigint_received`
    and `time_limit` say which signal the stop was; `on_time_limit_before` is the SIGUSR2 handler it replaced."""

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
    """Lightning's "Received SIGTERM: 15", for a Ctrl-C or the time limit, names what it was."""

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
    """Install the gate for SIGTERM, SIGINT and SIGUSR2 for the duration of a cell (main thread only)."""
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
    """After a cell stopped by SIGUSR2 was recorded, run the SIGUSR2 handler found before (submitit's requeues)."""
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
