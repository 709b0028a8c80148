"""Every run brought to one convention before a report reads it: distances as fractions of the image side.

A record whose `stats.units` is grid, pixels or diagonal is converted once where runs are loaded (`aggregate_runs`,
`summary_rows`) by the inverse of `attention.units.display_factor`, and says so (`converted`); one that cannot be
keeps its accuracy and entropy and loses its distances, with the reason (`unconvertible`).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from vit_locality.attention.units import STORED, UNITS, display_factor, is_distance
from vit_locality.catalog import GRID_SIZE
from vit_locality.store.record import RunRecord

SHOWN = STORED  # the one convention every report shows distances in
SHOWN_NAME = "fractions of the image side (unit square)"
UNITS_NOTE = (
    f"MAD in {SHOWN_NAME}, as every record stores it (a record stored in another stats.units is converted once on"
    " reading: grid / grid side, pixels / image size, diagonal x sqrt 2)"
)
CONVERTED = "converted"  # key under attention.final: what was done ({"from", "factor", "note"})
UNCONVERTIBLE = "unconvertible"  # key under attention.final: why the run's distances were dropped
_KEPT_WITHOUT_DISTANCES = ("epoch", "mean_entropy_early", "early_layers", "probe_images", "settings")


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


def stats_setting(run: RunRecord, key: str) -> Any:
    """A statistics setting as the record states it: the final probe's settings, else the resolved config's."""
    final = run.final_attention
    if key == "early_layers" and "early_layers" in final:
        return final["early_layers"]
    settings = final.get("settings") or {}
    if key in settings:
        return settings[key]
    return ((run.config or {}).get("stats") or {}).get(key)


def recorded_units(run: RunRecord) -> Any:
    """The units the record states, None when it states none; a converted record says what it was converted from."""
    final = run.final_attention
    return final[CONVERTED]["from"] if CONVERTED in final else stats_setting(run, "units")


def unit_factor(run: RunRecord, units: Any) -> tuple[float | None, str | None]:
    """(the factor from `units` to the unit square, what was done) or (None, why not)."""
    if units is None:
        return None, "the record does not state stats.units"
    if units not in UNITS:
        return None, f"stats.units={units!r} is not one this report knows"
    if units == STORED:
        return 1.0, None
    side = grid_side(run)
    patch = patch_pixels(run) if units == "pixels" else None
    if units == "pixels" and patch is None:
        return None, "stats.units=pixels, and the record holds no model.patch_size or data.image_size"
    notes = {
        "grid": f"stats.units=grid, / {side}",
        "pixels": f"stats.units=pixels, / {(patch or 0) * side} ({side} patches of {patch} px)",
        "diagonal": "stats.units=diagonal, x sqrt 2",
    }
    return 1.0 / display_factor(units, side, patch), notes[units]


def in_unit_square(run: RunRecord) -> RunRecord:
    """The run with every distance in the unit square, or without its distances and with the reason why."""
    final = run.final_attention
    if not final or CONVERTED in final or UNCONVERTIBLE in final:
        return run
    units = recorded_units(run)
    factor, note = unit_factor(run, SHOWN if units is None else units)
    if units == SHOWN:
        return run
    data = copy.deepcopy(run.data)
    final = data["attention"]["final"]  # the copy, changed in place
    if factor is None:
        kept = {key: final[key] for key in _KEPT_WITHOUT_DISTANCES if key in final}
        data["attention"]["final"] = {**kept, UNCONVERTIBLE: note}
        return RunRecord(run.run_dir, data)
    scaled = lambda row: {key: _scaled(value, factor) if is_distance(key) else value for key, value in row.items()}
    final["min_mad_early"] = _scaled(final.get("min_mad_early"), factor)
    if isinstance(final.get("per_head"), dict):
        final["per_head"] = scaled(final["per_head"])
    if isinstance(final.get("per_layer"), list):
        final["per_layer"] = [scaled(row) if isinstance(row, dict) else row for row in final["per_layer"]]
    initial = data["attention"].get("initial")
    if isinstance(initial, dict) and "min_mad_early" in initial:
        initial["min_mad_early"] = _scaled(initial["min_mad_early"], factor)
    final["settings"] = {**(final.get("settings") or {}), "units": SHOWN}
    shown_note = note if units is not None else "the record does not state stats.units: read as unit, the default"
    final[CONVERTED] = {"from": units, "factor": factor, "note": shown_note}
    return RunRecord(run.run_dir, data)


def csv_scale(run: RunRecord) -> float:
    """The factor that brings the run's attention_stats.csv distances to the unit square; NaN when none can."""
    final = run.final_attention
    if UNCONVERTIBLE in final:
        return math.nan
    if CONVERTED in final:
        return float(final[CONVERTED]["factor"])
    factor, _ = unit_factor(run, recorded_units(run) or SHOWN)
    return math.nan if factor is None else factor


def conversion_note(run: RunRecord) -> str | None:
    """What was done to the run's distances on reading, or why they are not shown; None when nothing was needed."""
    final = run.final_attention
    if UNCONVERTIBLE in final:
        return f"not shown: {final[UNCONVERTIBLE]}"
    if CONVERTED in final:
        return f"converted to {SHOWN_NAME} ({final[CONVERTED]['note']})"
    return None


def _scaled(value: Any, factor: float) -> Any:
    """A number, or nested lists of numbers, times `factor`; anything else (a damaged entry) as it is."""
    if isinstance(value, list):
        return [_scaled(item, factor) for item in value]
    return value * factor if isinstance(value, int | float) and not isinstance(value, bool) else value


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
