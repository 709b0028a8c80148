"""Each epoch's min early-layer MAD beside its validation top-1, to compare cells at equal accuracy. The statistics
count completed epochs (0: initial); a CSV log's `epoch` is Lightning's index (`0`: epoch 1) or our count (`1.0`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from vit_locality.store.file_read import read_csv_rows

VAL_METRIC = "val/acc1"  # held out of the training set (data.val_size > 0); test_epoch/acc1 is the test set's
METRICS_CSV = Path("csv") / "metrics.csv"
TEST_SET_REFUSAL = "matched accuracy needs data.val_size > 0: the evaluation split is the test set"


def val_accuracy_by_epoch(run_dir: Path) -> dict[int, float]:
    """Completed epochs -> validation top-1 from the run's CSV log (a later row wins); empty without one."""
    path = Path(run_dir) / METRICS_CSV
    if not path.exists() and not path.is_symlink():
        return {}
    found: dict[int, float] = {}
    for row in read_csv_rows(path):
        try:
            text, value = row["epoch"], float(row[VAL_METRIC])
            epoch = float(text)
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(value) and math.isfinite(epoch) and epoch == int(epoch):
            counted = "." in text  # the module's count from 1, not Lightning's 0-based index
            found[int(epoch) if counted else int(epoch) + 1] = value
    return found


@dataclass(frozen=True)
class Trajectory:
    """One run's (completed epoch, validation top-1, minimum early-layer MAD), in epoch order."""

    epochs: list[int]
    accuracy: list[float]
    min_mad: list[float]

    @classmethod
    def pair(cls, accuracy: dict[int, float], min_mad: dict[int, float]) -> Trajectory:
        """The epochs where both were measured (epoch 0, before any validation, drops out)."""
        epochs = sorted(set(accuracy) & set(min_mad))
        return cls(epochs, [accuracy[e] for e in epochs], [min_mad[e] for e in epochs])

    def mad_at_accuracy(self, level: float) -> float:
        """The min MAD where top-1 first reached `level`, linear in accuracy; NaN when the crossing went unseen."""
        for i, acc in enumerate(self.accuracy):
            if acc >= level:
                if i == 0:
                    return math.nan
                a0, a1 = self.accuracy[i - 1], acc
                m0, m1 = self.min_mad[i - 1], self.min_mad[i]
                return m1 if a1 == a0 else m0 + (m1 - m0) * (level - a0) / (a1 - a0)
        return math.nan

    @property
    def final(self) -> tuple[int, float, float] | None:
        """(epoch, top-1, min MAD) at the last epoch measured, or None for an empty trajectory."""
        return (self.epochs[-1], self.accuracy[-1], self.min_mad[-1]) if self.epochs else None


def matched_levels(trajectories: list[Trajectory], count: int = 3) -> list[float]:
    """`count` accuracy levels evenly inside the span every trajectory covers; empty when they share none."""
    usable = [t for t in trajectories if len(t.epochs) >= 2]
    if not usable:
        return []
    low = max(t.accuracy[0] for t in usable)
    high = min(max(t.accuracy) for t in usable)
    if high <= low:
        return []
    return [low + (high - low) * (i + 1) / (count + 1) for i in range(count)]
