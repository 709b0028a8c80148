"""Which cells of a sweep can share one program (hydra/launcher=packed): the same data, model shape, batch, epochs,
optimizer, schedule and Trainer; any protocol flags, smoothing, mixer and eraser settings and seed. A cell that fits
no pack says why in one line and trains as it would alone."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from vit_locality.config.settings import RunSettings

Cell = TypeVar("Cell")
PER_CELL = ("seed", "aug", "loss", "run_name", "tags", "optimized_metric")  # what the cells of a pack may differ in


def unpackable(settings: RunSettings | None) -> str | None:
    """Why the cell trains alone (one line), or None when it can join a pack."""
    if settings is None:
        return "its settings were not checked in this process"
    return settings.pack_refusal() or (None if settings.sweep.packed else "sweep.packed=false")


def pack_key(settings: RunSettings) -> str:
    """What the cells of one pack share: every setting but those a cell of a pack may have its own of."""
    record = settings.as_record()
    shared = {key: value for key, value in record.items() if key not in PER_CELL}
    return json.dumps(shared, sort_keys=True, default=str)


def group_packs(cells: Sequence[tuple[Cell, RunSettings]], cells_per_pack: int) -> list[list[Cell]]:
    """Packs of at most `cells_per_pack` cells that share a key, in the sweep's order (the first cell of each key
    opens its packs)."""
    by_key: dict[str, list[Any]] = {}
    for cell, settings in cells:
        by_key.setdefault(pack_key(settings), []).append(cell)
    packs = []
    for members in by_key.values():
        packs += [members[start : start + cells_per_pack] for start in range(0, len(members), cells_per_pack)]
    return packs
