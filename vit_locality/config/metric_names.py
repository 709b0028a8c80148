"""What the per-epoch evaluation figures are called, so a figure measured on the test set is never called validation.

The paper's protocol trains on the whole training set, so by default the split evaluated every epoch is the test
set: its figures are `test_epoch/*` (`test_epoch/acc1`). Only with `data.val_size > 0` is there a held-out split of
the training set, evaluated as `val/*`. The final figures after fit are `test/*` either way.

Selecting (a search's objective, matched accuracy, a best checkpoint) must read a held-out split: a selection on a
test-set figure is refused in one line (`selection_problem`), never quietly held out.
"""

from __future__ import annotations

HELD_OUT = "val"  # the per-epoch figures of a held-out split of the training set (data.val_size > 0)
TEST_EPOCH = "test_epoch"  # the per-epoch figures of the test set (data.val_size = 0, the paper's protocol)
TEST = "test"  # the final figures after fit, on the test set
TEST_SET_PREFIXES = (TEST, TEST_EPOCH)


def eval_prefix(val_size: int) -> str:
    """The name of the per-epoch evaluation figures: `val` with a held-out split, `test_epoch` without."""
    return HELD_OUT if val_size and val_size > 0 else TEST_EPOCH


def selection_problem(metric: str, val_size: int) -> str | None:
    """Why selecting on `metric` would select on the test set (one line), or None when it reads a held-out split,
    the training set or the attention statistics."""
    prefix = metric.split("/", 1)[0] if "/" in metric else ""
    if prefix == HELD_OUT and not (val_size and val_size > 0):
        return f"optimized_metric={metric} needs data.val_size > 0: the evaluation split is the test set"
    if prefix in TEST_SET_PREFIXES:
        return f"optimized_metric={metric} is measured on the test set: select on val/* with data.val_size > 0"
    return None
