"""Each run's minimum MAD in the paper's convention (renormalised attention, first 2 layers), or why it cannot be
had exactly, and whether a run's attention ever left uniform (docs/metrics.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from vit_locality.catalog import GRID_SIZE
from vit_locality.store.record import RunRecord

PAPER_EARLY_LAYERS = 2
# name -> factor on the unit-square value: distances over the image side (ours) or over its diagonal.
CONVENTIONS: dict[str, float] = {"grid side": 1.0, "diagonal": 1.0 / math.sqrt(2.0)}
GRID_SIDE, DIAGONAL = tuple(CONVENTIONS)
# How far (unit square) an early head's MAD may lie from uniform attention's and still count as uniform: about 9
# times the probe noise at initialisation (+-0.0011 around 0.5171 on 8 x 8) and under a third of the smallest learned
# departure seen (+AA's 0.481).
UNIFORM_TOLERANCE = 0.01


@dataclass(frozen=True)
class PaperValue:
    """A run's minimum MAD over its first 2 layers; NaN with the reason when not comparable."""

    value: float
    reason: str | None = None
    converted: str | None = None  # how the value was re-read, when it was

    @property
    def comparable(self) -> bool:
        return self.reason is None


def paper_value(run: RunRecord) -> PaperValue:
    """The run's minimum MAD in the paper's convention, or the reason it cannot be had exactly."""
    final = run.final_attention
    if not final:
        return PaperValue(math.nan, "no attention statistics")
    renormalize = stats_setting(run, "renormalize")
    if renormalize is None:
        return PaperValue(math.nan, "the record does not state stats.renormalize")
    if renormalize is not True:
        return PaperValue(
            math.nan, "stats.renormalize=false: raw weights scale each query's MAD by its own patch share"
        )
    recorded, early_note = _first_layers_min(run)
    if not math.isfinite(recorded):
        return PaperValue(math.nan, early_note)
    return PaperValue(recorded, None, early_note)


def stats_setting(run: RunRecord, key: str) -> Any:
    """A statistics setting as the record states it: the final probe's settings, else the resolved config's."""
    final = run.final_attention
    if key == "early_layers" and "early_layers" in final:
        return final["early_layers"]
    settings = final.get("settings") or {}
    if key in settings:
        return settings[key]
    return ((run.config or {}).get("stats") or {}).get(key)


def grid_side(run: RunRecord) -> int:
    """The recorded patch grid's side: model.grid_size, else image size / patch size, else the fixed 8."""
    model, data = run.data.get("model") or {}, run.data.get("data") or {}
    side, image, patch = model.get("grid_size"), data.get("image_size"), model.get("patch_size")
    if _positive_int(side):
        return side
    if _positive_int(image) and _positive_int(patch) and image % patch == 0:
        return image // patch
    return GRID_SIZE


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _first_layers_min(run: RunRecord) -> tuple[float, str | None]:
    """(the minimum head MAD over the first 2 layers, a note when re-read) or (NaN, why not)."""
    final = run.final_attention
    early = stats_setting(run, "early_layers")
    if early == PAPER_EARLY_LAYERS:
        return float(final["min_mad_early"]), None
    minima = _layer_minima(final)
    if minima is None or len(minima) < PAPER_EARLY_LAYERS:
        depth = f"{len(minima)} layer(s) recorded" if minima is not None else "no per-layer figures"
        return math.nan, f"stats.early_layers={early!r} and {depth} to take the first {PAPER_EARLY_LAYERS} from"
    note = f"stats.early_layers={early}, re-read from the first {PAPER_EARLY_LAYERS} layers"
    return min(minima[:PAPER_EARLY_LAYERS]), note


def _layer_minima(final: Mapping[str, Any]) -> list[float] | None:
    """Each layer's smallest head MAD, from `per_layer` (mad_min) or `per_head` (mad); None when neither is usable."""
    try:
        rows = sorted(final["per_layer"], key=lambda row: int(row["layer"]))
        return [float(row["mad_min"]) for row in rows]
    except (KeyError, TypeError, ValueError):
        pass
    try:
        return [min(float(v) for v in layer) for layer in final["per_head"]["mad"]]
    except (KeyError, TypeError, ValueError):
        return None


@cache
def uniform_mad(side: int) -> float:
    """MAD of uniform attention over a side x side grid, unit square (docs/metrics.md, "Uniform attention")."""
    p = [1.0 / side] + [2.0 * (side - m) / side**2 for m in range(1, side)]
    return sum(p[m] * p[n] * math.hypot(m, n) for m in range(side) for n in range(side)) / side


def still_uniform(run: RunRecord) -> bool:
    """Every early head within UNIFORM_TOLERANCE of uniform attention's MAD on its grid; False without distances."""
    final = run.final_attention
    if not final:
        return False
    values = _early_head_values(final, run.early_layers)
    uniform = uniform_mad(grid_side(run))
    return bool(values) and all(abs(value - uniform) <= UNIFORM_TOLERANCE for value in values)


def _early_head_values(final: Mapping[str, Any], early: int) -> list[float]:
    """Every early head's MAD, else each early layer's minimum and maximum, else the headline minimum, else []."""
    try:
        return [float(v) for layer in final["per_head"]["mad"][:early] for v in layer]
    except (KeyError, TypeError, ValueError):
        pass
    try:
        rows = [row for row in final["per_layer"] if int(row["layer"]) < early]
        return [float(row[key]) for row in rows for key in ("mad_min", "mad_max")]
    except (KeyError, TypeError, ValueError):
        pass
    value = final.get("min_mad_early")
    return [float(value)] if isinstance(value, int | float) and math.isfinite(value) else []


def conversion_notes(runs: Iterable[tuple[str, RunRecord]]) -> list[str]:
    """Lines under the claims: each run whose min MAD was re-read or is not comparable, and the probe sizes."""
    lines: list[str] = []
    probes: Counter[str] = Counter()
    for cell, run in runs:
        if not run.final_attention:
            continue
        paper = paper_value(run)
        if paper.converted:
            lines.append(f"{cell} seed {run.seed}: min MAD converted to the paper's convention ({paper.converted})")
        elif not paper.comparable:
            lines.append(f"{cell} seed {run.seed}: not comparable with the paper's figures ({paper.reason})")
        probe = run.final_attention.get("probe_images", stats_setting(run, "probe_size"))
        probes[str(probe) if probe is not None else "not recorded"] += 1
    if probes:
        sizes = ", ".join(f"{size} ({count} run{'s' * (count > 1)})" for size, count in sorted(probes.items()))
        lines.append(f"probe images per run: {sizes}; the size sets the noise of a mean, not what it measures")
    return lines
