"""Each run's minimum MAD in the convention the paper's figures are read in, or why it cannot be.

The paper's bounds (0.024, 0.210; 0.316 -> 0.008) are minimum early-layer MADs of renormalised attention on the
unit square over the first 2 layers. A record states its own settings (`attention.final.settings` and
`early_layers`; the resolved `config.stats` where those lack a key), and a claim compares the paper's numbers
only with values brought to that convention exactly:

- units: `unit` as it is; `grid` (patch steps) / g; `pixels` / (patch size x g); `diagonal` x sqrt 2. g is the
  recorded grid side (`model.grid_size`, else `data.image_size / model.patch_size`, else the 8 x 8 grid every
  model of this project has); `pixels` needs the recorded patch size (or image size).
- early layers: a record whose minimum is over other than the first 2 layers is re-read from its per-layer
  minima (`per_layer`, else `per_head`); without them it is not comparable.
- renormalisation: raw weights (`renormalize=false`) scale each query's MAD by that query's own patch share, which
  a per-head mean cannot undo: not comparable.
- probe size: how many images the mean is over changes its sampling noise, not what it measures; it is read and
  shown, never a bar.

The paper does not say whether it divides distances by the image side or by its diagonal, so every claim on MAD
is judged under both: `CONVENTIONS` maps each to the factor applied to the unit-square value.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vit_locality.catalog import GRID_SIZE
from vit_locality.run.record import RunRecord

PAPER_EARLY_LAYERS = 2
# name -> factor on the unit-square value: distances over the image side (ours) or over its diagonal.
CONVENTIONS: dict[str, float] = {"grid side": 1.0, "diagonal": 1.0 / math.sqrt(2.0)}
GRID_SIDE, DIAGONAL = tuple(CONVENTIONS)


@dataclass(frozen=True)
class PaperValue:
    """A run's minimum MAD on the unit square, over its first 2 layers; NaN with the reason when not comparable."""

    value: float
    reason: str | None = None  # why the record cannot be brought to the paper's convention
    converted: str | None = None  # what was done to the recorded value, when anything was

    @property
    def comparable(self) -> bool:
        return self.reason is None


def stats_setting(run: RunRecord, key: str) -> Any:
    """A statistics setting as the record states it: the final probe's settings, else the resolved config's."""
    final = run.final_attention
    if key == "early_layers" and "early_layers" in final:
        return final["early_layers"]
    settings = final.get("settings") or {}
    if key in settings:
        return settings[key]
    stats = (run.config or {}).get("stats") or {}
    return stats.get(key)


def grid_side(run: RunRecord) -> int:
    """The recorded patch grid's side: model.grid_size, else image size / patch size, else the fixed 8."""
    model, data = run.data.get("model") or {}, run.data.get("data") or {}
    side = model.get("grid_size")
    if _positive_int(side):
        return side
    image, patch = data.get("image_size"), model.get("patch_size")
    if _positive_int(image) and _positive_int(patch) and image % patch == 0:
        return image // patch
    return GRID_SIZE


def patch_pixels(run: RunRecord) -> int | None:
    """Pixels per patch side as recorded: model.patch_size, else data.image_size / the grid side; None if neither."""
    model, data = run.data.get("model") or {}, run.data.get("data") or {}
    if _positive_int(model.get("patch_size")):
        return model["patch_size"]
    image, side = data.get("image_size"), grid_side(run)
    if _positive_int(image) and image % side == 0:
        return image // side
    return None


def paper_value(run: RunRecord) -> PaperValue:
    """The run's minimum MAD in the paper's convention (unit square, renormalised, first 2 layers), or the reason
    it cannot be had exactly."""
    if not run.final_attention:
        return PaperValue(math.nan, "no attention statistics")
    renormalize = stats_setting(run, "renormalize")
    if renormalize is None:
        return PaperValue(math.nan, "the record does not state stats.renormalize")
    if renormalize is not True:
        return PaperValue(
            math.nan, "stats.renormalize=false: raw weights scale each query's MAD by its own patch share"
        )
    units = stats_setting(run, "units")
    factor, why = unit_factor(run, units)
    if factor is None:
        return PaperValue(math.nan, why)
    recorded, early_note = _first_layers_min(run)
    if not math.isfinite(recorded):
        return PaperValue(math.nan, early_note)
    notes = [note for note in (why, early_note) if note]
    return PaperValue(recorded * factor, None, "; ".join(notes) or None)


def unit_factor(run: RunRecord, units: Any) -> tuple[float | None, str | None]:
    """(what turns the recorded MAD into the unit square's, what was done) or (None, why not)."""
    if units == "unit":
        return 1.0, None
    if units == "diagonal":
        return math.sqrt(2.0), "stats.units=diagonal, x sqrt 2"
    side = grid_side(run)
    if units == "grid":
        return 1.0 / side, f"stats.units=grid, / {side}"
    if units == "pixels":
        patch = patch_pixels(run)
        if patch is None:
            return None, "stats.units=pixels, and the record holds no model.patch_size or data.image_size"
        return 1.0 / (patch * side), f"stats.units=pixels, / {patch * side} ({side} patches of {patch} px)"
    if units is None:
        return None, "the record does not state stats.units"
    return None, f"stats.units={units!r} is not one this report knows"


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


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def conversion_notes(runs: Iterable[tuple[str, RunRecord]]) -> list[str]:
    """Lines for under the claims: each run whose min MAD was converted or is not comparable (cell, seed, what or
    why), and the probe sizes the values are means over."""
    lines: list[str] = []
    probes: Counter[str] = Counter()
    for cell, run in runs:
        if not math.isfinite(run.headline().min_mad):
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
