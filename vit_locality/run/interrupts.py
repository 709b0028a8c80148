"""SIGTERM at any point of a cell becomes an interruption the cell runner records, not a silent death.

`timeout`, `kill -- -PGID`, `scancel` and SLURM preemption send SIGTERM. Inside `Trainer.fit`, Lightning's own
handler turns it into a checkpoint at the next step (`interrupted.ckpt`); outside fit (building the data, between
fit and test, during test) Python's default action would end the process without a record. While a cell runs,
`sigterm_raises()` makes SIGTERM raise Lightning's `SIGTERMException` there, and stays quiet during fit, where
Lightning calls it after its own handler (it chains the handler it found).

Ctrl-C (SIGINT) raises KeyboardInterrupt wherever it lands, possibly between a batch's optimizer step and the end
of that batch: a checkpoint of that state cannot resume exactly. So during fit the first Ctrl-C is handed to the
SIGTERM handler in place (Lightning's: stop after the current batch, with `interrupted.ckpt`), remembered as SIGINT
(exit 130); a second one raises KeyboardInterrupt at once, and the next run resumes from the last epoch's end.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from lightning.pytorch.utilities.exceptions import SIGTERMException


class SigtermGate:
    """The installed handler: raises unless `deferred` (set while Lightning's fit loop owns the signal).
    `sigint_received`: a Ctrl-C was turned into that stop, so the cell reports SIGINT, not SIGTERM."""

    def __init__(self) -> None:
        self.deferred = False
        self.sigint_received = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.deferred:
            raise SIGTERMException()

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """The first Ctrl-C during fit stops at the next batch boundary, as SIGTERM does; any other raises now."""
        handler = signal.getsignal(signal.SIGTERM)
        if not self.deferred or self.sigint_received or not callable(handler) or handler is self:
            raise KeyboardInterrupt
        self.sigint_received = True
        handler(signal.SIGTERM, frame)

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """While fitting: Lightning checkpoints at the next step and raises SIGTERMException itself."""
        self.deferred = True
        try:
            yield
        finally:
            self.deferred = False


@contextmanager
def sigterm_raises() -> Iterator[SigtermGate]:
    """Install the gate, for SIGTERM and SIGINT, for the duration of a cell (main thread only; elsewhere signals
    cannot be handled)."""
    gate = SigtermGate()
    if threading.current_thread() is not threading.main_thread():
        yield gate
        return
    previous = signal.signal(signal.SIGTERM, gate)
    previous_sigint = signal.signal(signal.SIGINT, gate.on_sigint)
    try:
        yield gate
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_sigint)
