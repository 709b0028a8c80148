"""The instruments of docs/instruments.md measured on a sweep's runs, as report tables; what is left out is noted."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vit_locality.catalog import GRID_SIZE
from vit_locality.errors import first_line
from vit_locality.extras.instruments import loading
from vit_locality.extras.instruments.dose_response import AXES, dose_curves
from vit_locality.extras.instruments.pasted_box import BoxResult, box_locality
from vit_locality.extras.instruments.position_embedding import (
    FAR_STEPS,
    NEAR_STEPS,
    position_locality,
    position_rank_locality,
    position_similarity,
    similarity_at_distances,
)
from vit_locality.extras.instruments.trajectory import (
    METRICS_CSV,
    TEST_SET_REFUSAL,
    Trajectory,
    matched_levels,
    val_accuracy_by_epoch,
)
from vit_locality.report.load.aggregate import Aggregate, Group, summarise
from vit_locality.report.load.run_settings import slug
from vit_locality.report.render.figures import early_layers, emergence_series, per_head_tables
from vit_locality.report.render.table_format import MISSING, Table, format_figure, format_stat
from vit_locality.run.checkpoints import DamagedCheckpoint
from vit_locality.store.file_read import UnreadableFile
from vit_locality.store.record import RunRecord

MASS_KEYS = ("self_mass", "neighbour_mass", "far_mass")
BOX_IMAGES = 128  # probe images for the pasted-box instrument (image i gets the box of image i + 1)


@dataclass
class RunInstruments:
    """What the checkpoint-based instruments measured on one run (None where it could not be measured)."""

    run: RunRecord
    similarity: torch.Tensor | None = None
    locality: float = math.nan
    box: BoxResult | None = None


@dataclass
class Instruments:
    """The instruments of one (data set, model): per cell its runs' measurements, plus the notes."""

    data: str
    model: str
    cells: dict[str, Group]
    measured: dict[str, list[RunInstruments]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _trajectories: dict[str, list[tuple[RunRecord, Trajectory]]] | None = None

    @property
    def title(self) -> str:
        return f"{self.data}, {self.model}"

    @property
    def stem(self) -> str:
        return slug(f"{self.data}_{self.model}")


def measure(agg: Aggregate, data: str, model: str, box_images: int = BOX_IMAGES) -> Instruments:
    """Load each run's checkpoint once: its position embeddings, and (box_images > 1) the pasted-box probe."""
    found = Instruments(data, model, agg.cells(data, model))
    images: dict[str, torch.Tensor] = {}  # probe images by data settings, built once each
    for name, group in found.cells.items():
        found.measured[name] = [_measure_run(run, box_images, found.notes, images) for run in group.runs]
    return found


def _measure_run(run: RunRecord, box_images: int, notes: list[str], cache: dict[str, torch.Tensor]) -> RunInstruments:
    result, left_out = RunInstruments(run), "left out of the position and box instruments"
    try:
        checkpoint = loading.read_checkpoint(run.run_dir)
        if checkpoint is not None:
            result.similarity = position_similarity(loading.position_embedding(checkpoint))
            result.locality = position_locality(result.similarity)
    except UnreadableFile as error:  # a FIFO, a device or an oversized file in its place
        notes.append(error.skipped(f"the run is {left_out}"))
        return result
    except Exception as error:  # a damaged file, or one whose weights lack the position embedding
        why = error.why if isinstance(error, DamagedCheckpoint) else first_line(error)
        notes.append(f"{run.run_dir}: checkpoints/last.ckpt is unusable ({why}); {left_out}")
        return result
    if checkpoint is None:
        notes.append(f"{run.run_dir}: no checkpoints/last.ckpt; {left_out}")
        return result
    if box_images <= 1 or run.config is None:
        return result
    key = json.dumps(run.config.get("data"), sort_keys=True, default=str)  # the probe images depend on these alone
    try:
        if key not in cache:
            cache[key] = loading.probe_images(run.config, box_images)
    except Exception as error:  # data not on this machine, or a config the data layer does not take
        notes.append(f"{run.run_dir}: probe images not rebuilt ({first_line(error)}); left out of the box instrument")
        return result
    try:
        model = loading.model_from_checkpoint(checkpoint)
    except Exception as error:  # hyper-parameters and weights that do not fit one another
        notes.append(f"{run.run_dir}: the checkpoint's model does not load ({first_line(error)}); no box")
        return result
    result.box = box_locality(model, loading.normalise(cache[key], checkpoint))
    return result


def head_masses(run: RunRecord) -> dict[str, torch.Tensor] | None:
    """The final model's (layers, heads) self / neighbour / far and MAD tables, or None."""
    return per_head_tables(run, (*MASS_KEYS, "mad"), torch.float64)


def masses_table(found: Instruments) -> Table:
    """Per cell, the early-layer head with the smallest MAD: its MAD and where its patch-key mass goes."""
    headers = ["cell", "runs", "min MAD", "self", "8 neighbours", "far", "layer, head (first run)"]
    rows, records = [], []
    for name, group in found.cells.items():
        picks = []
        for run in group.runs:
            tables, early = head_masses(run), early_layers(run)
            if tables is None or early is None:
                continue
            mad = tables["mad"][:early]
            layer, head = divmod(int(torch.argmin(mad)), mad.shape[1])
            picks.append((float(mad[layer, head]), *(float(tables[k][layer, head]) for k in MASS_KEYS), layer, head))
        if not picks:
            found.notes.append(f"{found.title}/{name}: no run records the locality masses")
            continue
        stats = [summarise(p[i] for p in picks) for i in range(4)]
        where = f"{picks[0][4]}, {picks[0][5]}"
        rows.append([name, str(len(picks)), *(format_stat(s, 3) for s in stats), where])
        record: dict[str, Any] = {"cell": name, "runs": len(picks)}
        record.update({key: s.mean for key, s in zip(("min_mad", *MASS_KEYS), stats, strict=True)})
        records.append(record)
    notes = [
        "the head with the smallest MAD among each run's early layers; self + 8 neighbours + far = 1 (the share of"
        " the patch-key attention, CLS left out); a MAD near 0 with self near 1 attends to itself, with the"
        " neighbours large to a small neighbourhood"
    ]
    return Table(f"masses_{found.stem}", f"Self, neighbourhood, far: {found.title}", headers, rows, records, notes)


def positions_table(found: Instruments) -> Table:
    """Per cell: how 2-D local the learned position embeddings are, beside the attention's minimum MAD."""
    headers = ["cell", "runs", "position locality", "rank locality", "similarity at 1 step"]
    headers += [f"similarity at >= {FAR_STEPS:g} steps", "min MAD", "per run (seed: position locality)"]
    rows, records = [], []
    for name, measured in found.measured.items():
        usable = [m for m in measured if m.similarity is not None]
        if not usable:
            continue
        stat = summarise(m.locality for m in usable)
        similarities = [m.similarity for m in usable if m.similarity is not None]
        rank = summarise(position_rank_locality(sim) for sim in similarities)
        scales = [similarity_at_distances(sim) for sim in similarities]
        near, far = summarise(s[0] for s in scales), summarise(s[1] for s in scales)
        mad = summarise(m.run.headline().min_mad for m in usable)
        per_run = ", ".join(f"{m.run.seed}: {m.locality:.3f}" for m in usable)
        shown = [format_stat(x, 3) for x in (stat, rank, near, far, mad)]
        rows.append([name, str(len(usable)), *shown, per_run])
        records.append({"cell": name, "runs": len(usable), "position_locality": stat.mean, "rank_locality": rank.mean})
        records[-1].update({"similarity_near": near.mean, "similarity_far": far.mean, "min_mad": mad.mean})
        records[-1]["per_run"] = per_run
    notes = [
        "position locality: minus the Pearson correlation between two patches' position-embedding cosine similarity"
        " and their grid distance (1: similarity falls linearly with distance; 0: the embeddings ignore the grid);"
        " it rewards a linear fall-off, so a sharp, very local code scores lower than a broad one",
        "rank locality: minus the Spearman correlation of the same pairs, 1 whenever similarity falls with distance,"
        " however sharply; read the length scale beside it",
        f"length scale: mean similarity of patches {NEAR_STEPS:g} step apart and of patches {FAR_STEPS:g} or more"
        " steps apart; a local code is high at 1 step and near 0 far away, a broad one stays high far away",
        "a CutMix cell with Baseline's position locality but a far smaller MAD changed the attention, not the"
        " positions",
    ]
    title = f"Learned position embeddings: {found.title}"
    return Table(f"positions_{found.stem}", title, headers, rows, records, notes)


def box_table(found: Instruments) -> Table:
    """Per cell and layer: the share of attention a pasted box's patches send across its border."""
    headers = ["cell", "layer", "runs", "mixed", "unmixed", "mixed - unmixed", "lowest head, mixed", "uniform"]
    rows, records = [], []
    for name, measured in found.measured.items():
        boxes = [m.box for m in measured if m.box is not None]
        if not boxes:
            continue
        depth = min(b.mixed.shape[0] for b in boxes)
        uniform = boxes[0].uniform(GRID_SIZE)
        for layer in range(depth):
            mixed = summarise(float(b.mixed[layer].mean()) for b in boxes)
            unmixed = summarise(float(b.unmixed[layer].mean()) for b in boxes)
            diff = summarise(float((b.mixed[layer] - b.unmixed[layer]).mean()) for b in boxes)
            lowest = summarise(float(b.mixed[layer].min()) for b in boxes)
            stats = [s.mean for s in (mixed, unmixed, diff, lowest)]
            shown = [format_stat(s, 3) for s in (mixed, unmixed, diff, lowest)]
            rows.append([name, str(layer), str(len(boxes)), *shown, f"{uniform:.3f}"])
            means = dict(zip(("mixed", "unmixed", "difference", "lowest_head_mixed"), stats, strict=True))
            records.append({"cell": name, "layer": layer, "runs": len(boxes), **means, "uniform": uniform})
    box = next((m.box.box for ms in found.measured.values() for m in ms if m.box is not None), None)
    where = f"rows {box.top}-{box.top + box.height - 1}, columns {box.left}-{box.left + box.width - 1}" if box else "-"
    notes = [
        f"box: patches {where} of the 8 x 8 grid, pasted from the next probe image (a CutMix-like mix with a"
        " patch-aligned border); for each patch query inside the box, the share of its patch-key attention on"
        " patches outside, mean over the box's queries, the images and the layer's heads",
        "mixed: on the mixed image; unmixed: the same patch on the image the box came from (same content, no"
        " border); uniform: what evenly spread attention would send across",
        "mixed below unmixed: the heads keep attention inside the pasted region, which is what CutMix rewards",
    ]
    title = f"Attention across a pasted box's border: {found.title}"
    return Table(f"box_{found.stem}", title, headers, rows, records, notes)


def trajectories(found: Instruments) -> dict[str, list[tuple[RunRecord, Trajectory]]]:
    """Per cell, each run's per-epoch (validation top-1, minimum early-layer MAD); read once per `found`."""
    if found._trajectories is not None:
        return found._trajectories
    by_cell: dict[str, list[tuple[RunRecord, Trajectory]]] = {}
    on_test: list[Path] = []  # runs evaluated on the test set: one note for all of them
    for name, group in found.cells.items():
        for run in group.runs:
            if eval_split_of(run) != "val":
                on_test.append(Path(run.run_dir))
                continue
            try:
                accuracy = val_accuracy_by_epoch(run.run_dir)
            except UnreadableFile as error:
                found.notes.append(error.skipped("no trajectory of the run"))
                continue
            except (OSError, UnicodeDecodeError, csv.Error) as error:
                found.notes.append(
                    f"{run.run_dir}: {METRICS_CSV} is unreadable ({type(error).__name__}); no trajectory"
                )
                continue
            trajectory = Trajectory.pair(accuracy, emergence_series(run, found.notes))
            if trajectory.epochs:
                by_cell.setdefault(name, []).append((run, trajectory))
            else:
                found.notes.append(f"{run.run_dir}: no epoch with both val/acc1 and statistics; no trajectory")
    if on_test:
        which = str(on_test[0]) if len(on_test) == 1 else f"{len(on_test)} runs ({on_test[0].parent}/...)"
        found.notes.append(f"{which}: {TEST_SET_REFUSAL}; no trajectory")
    found._trajectories = by_cell
    return by_cell


def eval_split_of(run: RunRecord) -> str:
    """The split a run evaluated every epoch: measured_on.eval_split, else `val` if data.val_size > 0, else `test`."""
    split = (run.data.get("measured_on") or {}).get("eval_split")
    if split in ("val", "test"):
        return split
    val_size = ((run.config or {}).get("data") or {}).get("val_size")
    return "val" if isinstance(val_size, int) and val_size > 0 else "test"


def accuracy_levels(found: Instruments) -> list[float]:
    """The matched accuracy levels of `found`'s runs (see `matched_levels`)."""
    return matched_levels([t for runs in trajectories(found).values() for _, t in runs])


def matched_table(found: Instruments) -> Table:
    """Per cell: minimum MAD when validation top-1 first reached each matched level, and at the final epoch."""
    by_cell = trajectories(found)
    levels = accuracy_levels(found)
    headers = ["cell", "runs", "final epoch", "final val top-1 (%)", "final min MAD"]
    headers += [f"min MAD at {100 * level:.1f}%" for level in levels]
    rows, records = [], []
    for name, runs in by_cell.items():
        finals = [t.final for _, t in runs if t.final]
        epoch, acc, mad = (summarise(f[i] for f in finals) for i in range(3))
        at = [summarise(t.mad_at_accuracy(level) for _, t in runs) for level in levels]
        row = [name, str(len(runs)), f"{epoch.mean:g}", format_figure(acc, "acc1"), format_stat(mad, 3)]
        rows.append(row + [format_stat(s, 3) for s in at])
        record: dict[str, Any] = {"cell": name, "runs": len(runs), "final_epoch": epoch.mean}
        record.update({"final_val_acc1": acc.mean, "final_min_mad": mad.mean})
        record.update({f"min_mad_at_{level:.4f}": s.mean for level, s in zip(levels, at, strict=True)})
        records.append(record)
    notes = [
        "matched levels: evenly inside the validation accuracy span every run covers (from the highest first-epoch"
        " accuracy to the lowest best one); MAD interpolated at the first crossing; - where a run never crossed",
        "compare cells along a row at the same accuracy, not at the same epoch: strong augmentation slows learning,"
        " and locality grows as a model learns",
    ]
    if not levels:
        notes.append("no accuracy span is common to every run: no matched levels")
    title = f"Locality at matched accuracy: {found.title}"
    return Table(f"matched_{found.stem}", title, headers, rows, records, notes)


def dose_table(found: Instruments) -> Table:
    """Every dose curve's points: axis, the other knobs, the dose, minimum MAD and top-1 (mean over seeds)."""
    runs = [run for group in found.cells.values() for run in group.runs]
    headers = ["axis", "other settings", "value", "runs", "min MAD", "top-1 (%)"]
    rows, records = [], []
    for axis in AXES:
        for curve in dose_curves(runs, axis):
            for x, mad, acc, n in curve.means():
                rows.append([axis, curve.label(), f"{x:g}", str(n), _fixed(mad, 3), _fixed(100 * acc, 2)])
                records.append({"axis": axis, "fixed": curve.label(), "value": x, "runs": n, "min_mad": mad})
                records[-1]["acc1"] = acc
    notes = ["one curve per setting of the other knobs; no CutMix counts as cutmix_prob 0 (no batch is mixed)"]
    return Table(f"dose_{found.stem}", f"Dose-response: {found.title}", headers, rows, records, notes)


def _fixed(value: float, digits: int) -> str:
    return MISSING if not math.isfinite(value) else f"{value:.{digits}f}"


def instrument_tables(found: Instruments) -> list[Table]:
    """Every instrument's table for one (data set, model); a table without rows is left out."""
    tables = [masses_table(found), positions_table(found), box_table(found), matched_table(found), dose_table(found)]
    return [table for table in tables if table.rows]
