"""How the callback and `analyze` record probe results: CSV rows, the record's `attention` section, logger scalars
and pictures. Distances are written on the unit square; only the log line and the pictures use `stats.units`."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from vit_locality.attention import plots
from vit_locality.attention.probe import STAT_KEYS, ProbeResult
from vit_locality.attention.units import STORED, shown
from vit_locality.store.atomic import atomic_write_text
from vit_locality.store.file_read import read_csv_rows
from vit_locality.store.record import ATTENTION_CSV

# `mad_layer_range` (max - min of MAD over the row's layer's heads) comes last: files without it still read.
CSV_FIELDS = ("epoch", "step", "layer", "head", *STAT_KEYS, "mad_layer_range")
# The columns every release wrote; the masses, the control and the layer range came later and may be absent.
REQUIRED_CSV_FIELDS = ("epoch", "step", "layer", "head", "mad", "entropy", "cls_mass", "mad_std", "entropy_std")
PLANE_PNG = "attention_mad_entropy.png"
MAPS_PNG = "attention_central_maps.png"


def probe_rows(result: ProbeResult, epoch: int, step: int) -> list[dict[str, Any]]:
    """Long-format rows, one per (layer, head)."""
    rows = []
    spread = result.mad_range()
    for layer in range(result.depth):
        for head in range(result.heads):
            row: dict[str, Any] = {"epoch": epoch, "step": step, "layer": layer, "head": head}
            row.update({key: float(result.stats[key][layer, head]) for key in STAT_KEYS})
            row["mad_layer_range"] = float(spread[layer])
            rows.append(row)
    return rows


def scalar_metrics(result: ProbeResult) -> dict[str, float]:
    """Per layer the min, mean and max of MAD and entropy, plus the early-layer headline figures."""
    metrics = {}
    for row in result.per_layer():
        metrics.update({f"attn/layer{row['layer']}/{k}": v for k, v in row.items() if k != "layer"})
    metrics["attn/min_mad_early"] = result.min_mad_early()
    metrics["attn/mean_entropy_early"] = result.mean_entropy_early()
    layer, head = result.min_mad_head()
    for key in ("mad_control", "surround_pref"):
        metrics[f"attn/min_head_{key}"] = float(result.stats[key][layer, head])
    return metrics


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rewrite the whole file atomically: a reader never sees half a row, a crash never loses old rows."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())


def read_csv(path: Path) -> list[dict[str, Any]]:
    """The file's rows through the bounded reader of run files; none when there is no file yet."""
    return read_csv_rows(path) if path.exists() else []


def headline_line(result: ProbeResult, epoch: int) -> str:
    """The log line of one evaluation: its headline pair, MAD in the display units."""
    mad = shown(result.min_mad_early(), result.settings.units, result.grid_size, result.patch_size)
    return f"epoch {epoch}: min early-layer MAD {mad}, mean early-layer entropy {result.mean_entropy_early():.4f}"


def save_pictures(
    result: ProbeResult,
    out_dir: Path,
    title: str,
    band: float | None = None,
    references: plots.ReferenceSource | None = None,
) -> list[Path]:
    """The MAD-entropy plane in the display units (`band` on the unit square, `references` drawn where given) and
    the central-query maps."""
    factor = result.display_factor()
    units = str(result.settings.units)
    plane = plots.mad_entropy_plane(
        result.stats["mad"] * factor,
        result.stats["entropy"],
        title,
        units=units,
        control=result.stats["mad_control"] * factor,
        band=None if band is None else band * factor,
        references=plots.references_in(references, units, result.patch_size),
    )
    layers = list(range(min(2, result.depth)))
    maps = plots.central_query_maps(result.central_maps, layers, f"{title}: mean attention of the central query patch")
    return [plots.save(plane, out_dir / PLANE_PNG), plots.save(maps, out_dir / MAPS_PNG)]


def probe_summary(result: ProbeResult) -> dict[str, Any]:
    """A probe result as plain data: headline pair, per-head values, per-layer reductions, settings (unit square)."""
    settings = result.settings
    how = {"renormalize": settings.renormalize, "units": STORED, "display_units": str(settings.units)}
    return {
        **result.headline(),
        "early_layers": result.early_layers,
        "probe_images": result.num_images,
        "settings": {**how, "probe_size": settings.probe_size},
        "per_layer": result.per_layer(),
        "per_head": {key: result.stats[key].tolist() for key in STAT_KEYS},
    }


def headline_of_rows(rows: list[dict[str, Any]], epoch: int, early_layers: int) -> dict[str, float] | None:
    """The headline pair of one evaluation, from attention_stats.csv rows (a resumed run's initial model)."""
    early = [row for row in rows if int(row["epoch"]) == epoch and int(row["layer"]) < early_layers]
    if not early:
        return None
    mads, entropies = [float(row["mad"]) for row in early], [float(row["entropy"]) for row in early]
    return {"min_mad_early": min(mads), "mean_entropy_early": sum(entropies) / len(entropies)}


def attention_section(
    final: ProbeResult, final_epoch: int, initial: dict[str, float] | None, band: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The record's `attention` section: the final statistics, the initial headline pair and the noise band."""
    section: dict[str, Any] = {"final": {"epoch": final_epoch, **probe_summary(final)}}
    if initial is not None:
        section["initial"] = dict(initial)
    if band is not None:
        section["noise_band"] = dict(band)
    section["csv"] = ATTENTION_CSV
    return {"attention": section}
