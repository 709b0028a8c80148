"""Dose-response: minimum early-layer MAD and top-1 against one protocol knob, one curve per setting of the others.
A run without CutMix stands at 0 on the `cutmix_prob` axis, on every alpha's curve, and has no `cutmix_alpha`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vit_locality.store.record import RunRecord

AXES = ("cutmix_alpha", "cutmix_prob", "ls")
AXIS_LABELS = {
    "cutmix_alpha": "aug.cutmix_alpha (Beta(alpha, alpha) box area)",
    "cutmix_prob": "aug.cutmix_prob (share of mixed batches; no CutMix = 0)",
    "ls": "loss.ls (label smoothing epsilon)",
}
PAPER_SETTINGS = {"cutmix_alpha": (1.0,), "cutmix_prob": (0.0, 1.0), "ls": (0.0, 0.1)}


def dose_coordinates(run: RunRecord) -> dict[str, float | None] | None:
    """The run's (autoaug, cutmix_alpha, cutmix_prob, ls); None for a record without a config."""
    aug = (run.config or {}).get("aug")
    if not isinstance(aug, dict):
        return None
    protocol = run.protocol
    prob = float(aug.get("cutmix_prob", 1.0)) if protocol.cutmix else 0.0
    alpha = float(aug.get("cutmix_alpha", 1.0)) if protocol.cutmix and prob > 0 else None
    return {"autoaug": float(protocol.autoaug), "cutmix_alpha": alpha, "cutmix_prob": prob, "ls": protocol.ls}


@dataclass
class DoseCurve:
    """Runs along one axis with the other knobs fixed (`fixed`), as x -> [(min MAD, top-1)] over seeds."""

    axis: str
    fixed: dict[str, float | None]
    points: dict[float, list[tuple[float, float]]] = field(default_factory=dict)

    def label(self) -> str:
        return ", ".join(f"{key}={value:g}" for key, value in self.fixed.items() if value is not None)

    def means(self) -> list[tuple[float, float, float, int]]:
        """(x, mean min MAD, mean top-1, runs) in x order; a mean over the finite values only."""
        rows = []
        for x in sorted(self.points):
            mads = [m for m, _ in self.points[x] if math.isfinite(m)]
            accs = [a for _, a in self.points[x] if math.isfinite(a)]
            rows.append((x, _mean(mads), _mean(accs), len(self.points[x])))
        return rows


def dose_curves(runs: list[RunRecord], axis: str) -> list[DoseCurve]:
    """The curves along `axis` with two or more x values, one off the paper's settings, sorted by their fixed ones."""
    curves: dict[tuple, DoseCurve] = {}
    unmixed: list[tuple[dict, RunRecord]] = []
    for run in runs:
        coords = dose_coordinates(run)
        if coords is None or coords[axis] is None:
            continue
        if axis == "cutmix_prob" and coords["cutmix_alpha"] is None:
            unmixed.append((coords, run))  # joins every alpha's curve below
            continue
        fixed = {key: value for key, value in coords.items() if key != axis}
        _add(curves, axis, fixed, coords[axis], run)
    for coords, run in unmixed:
        for curve in list(curves.values()):
            if all(curve.fixed[k] == coords[k] for k in ("autoaug", "ls")):
                _add(curves, axis, curve.fixed, 0.0, run)
    found = [c for c in curves.values() if len(c.points) >= 2 and set(c.points) - set(PAPER_SETTINGS[axis])]
    return sorted(found, key=lambda c: [(v is None, v or 0.0) for v in c.fixed.values()])


def _add(curves: dict[tuple, DoseCurve], axis: str, fixed: dict, x: float, run: RunRecord) -> None:
    key = tuple(sorted(fixed.items(), key=lambda item: item[0]))
    curve = curves.setdefault(key, DoseCurve(axis, dict(fixed)))
    headline = run.headline()
    curve.points.setdefault(float(x), []).append((headline.min_mad, headline.acc1))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan
