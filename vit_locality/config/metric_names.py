"""What the per-epoch evaluation figures are called: `test_epoch/*` on the test set (the paper's protocol trains on
the whole training set), `val/*` only with a held-out split (`data.val_size > 0`), `test/*` after fit. A selection
(a search's objective) on a test-set figure is refused in one line."""

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
