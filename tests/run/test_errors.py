"""Every project error carries its exit status (vit_locality/errors.py): an entry point needs no table of its own."""

from __future__ import annotations

import pytest

from vit_locality.data.base import DataError
from vit_locality.errors import ConfigError, VitLocalityError, exit_code_of, first_line
from vit_locality.model.classifier import NonFiniteLossError
from vit_locality.run.cell import CellInterrupted
from vit_locality.run.checkpoints import DamagedCheckpoint, ForeignCheckpoint
from vit_locality.run.lock import RunLocked
from vit_locality.store.record import RecordError
from vit_locality.upstream import UpstreamChanged


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ConfigError("a bad setting"), 2),
        (DataError("cifar10: data_batch_1 not found"), 2),
        (RecordError("results.json is malformed"), 2),
        (RunLocked("run directory x is in use by PID 1"), 2),
        (ForeignCheckpoint("checkpoint x was written by config y"), 2),
        (DamagedCheckpoint("x/last.ckpt", "empty file"), 2),
        (NonFiniteLossError("the loss became nan"), 3),
        (UpstreamChanged("torchvision 9 has no _apply_op"), 1),
        (CellInterrupted("cell interrupted (SIGTERM)", 143), 143),
        (CellInterrupted("cell interrupted (SIGINT)", 130), 130),
        (RuntimeError("not ours"), 1),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_each_error_gives_its_exit_status(error: BaseException, status: int) -> None:
    assert exit_code_of(error) == status
    assert isinstance(error, VitLocalityError) or status == 1


def test_a_lock_or_a_foreign_checkpoint_is_no_bad_setting() -> None:
    """Status 2 comes from the class's exit_code, not from posing as a ConfigError."""
    assert not issubclass(RunLocked, ConfigError) and not issubclass(ForeignCheckpoint, ConfigError)


def test_first_line_names_foreign_errors_and_keeps_ours_as_written() -> None:
    assert first_line(RunLocked("run directory x is in use\nmore")) == "run directory x is in use"
    assert first_line(KeyError("state_dict")) == "KeyError: 'state_dict'"
