"""The report's three figures for each (data set, model), as PNG and PDF.

- plane: every head of every seed in the MAD-entropy plane, coloured by layer, one panel per cell present
  (8 for an ablation, Baseline and Modern for a protocols sweep);
- layers: MAD and entropy per layer, minimum and mean over heads, one line per cell (mean over seeds);
- emergence: minimum early-layer MAD against the epoch (from attention_stats.csv), one line per cell,
  the mean over seeds with the min-max band: when locality appears, which the paper does not show.
Each run's own `early_layers` (results.json) decides which layers are early.

A run whose statistics a figure cannot use (a damaged attention_stats.csv, a malformed `per_head` table, another
depth than the other runs of its cell) is left out of that figure and named in the notes the caller prints.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from matplotlib.ticker import MaxNLocator

from vit_locality.attention import plots
from vit_locality.attention.stats_log import read_csv
from vit_locality.catalog import CELL_FLAGS, CELL_ORDER, GRID_SIZE
from vit_locality.report.aggregate import Aggregate, Group, summarise
from vit_locality.report.run_settings import slug
from vit_locality.run.record import ATTENTION_CSV, RunRecord

plt = plots.plt


def cell_style(name: str) -> dict[str, Any]:
    """A fixed colour per cell across figures; CutMix cells solid, the others dashed (the paper's split)."""
    colour = plt.get_cmap("tab10")(CELL_ORDER.index(name))
    return {"color": colour, "ls": "-" if CELL_FLAGS[name][1] else "--"}


def head_stats(run: RunRecord) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The final model's (layers, heads) MAD and entropy tables; None when `per_head` is not two equal numeric
    tables."""
    per_head = run.final_attention.get("per_head")
    try:
        mad = torch.tensor(per_head["mad"], dtype=torch.float32)
        entropy = torch.tensor(per_head["entropy"], dtype=torch.float32)
    except (KeyError, TypeError, ValueError, RuntimeError):
        return None
    return (mad, entropy) if mad.ndim == 2 and mad.shape == entropy.shape and mad.numel() else None


def plane_runs(group: Group, notes: list[str]) -> list[tuple[RunRecord, torch.Tensor, torch.Tensor]]:
    """The runs of a cell with usable head statistics, all of the depth most of them have (their heads share one
    plot, coloured by layer)."""
    usable: list[tuple[RunRecord, torch.Tensor, torch.Tensor]] = []
    for run in group.runs:
        if not run.final_attention.get("per_head"):
            continue  # statistics off: the panel says so
        stats = head_stats(run)
        if stats is None:
            _left_out(notes, run, "attention.final.per_head is malformed", "plane")
        else:
            usable.append((run, *stats))
    if not usable:
        return []
    depth = Counter(mad.shape[0] for _, mad, _ in usable).most_common(1)[0][0]
    for run, mad, _ in usable:
        if mad.shape[0] != depth:
            _left_out(notes, run, f"{mad.shape[0]} layers where the cell's other runs have {depth}", "plane")
    return [entry for entry in usable if entry[1].shape[0] == depth]


def plane_figure(cells: dict[str, Group], title: str, notes: list[str]) -> plt.Figure:
    """One MAD-entropy panel per cell, all seeds' heads together (head indices do not match across seeds)."""
    names = list(cells)
    cols = min(4, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        usable = plane_runs(cells[name], notes)
        if not usable:
            ax.set_title(f"{name}: no attention statistics", fontsize=9)
            continue
        mad = torch.cat([mad for _, mad, _ in usable], dim=1)
        entropy = torch.cat([entropy for _, _, entropy in usable], dim=1)
        units = usable[0][0].stats_units
        label = f"{name} ({len(usable)} seed{'s' if len(usable) > 1 else ''})"
        plots.mad_entropy_plane(mad, entropy, label, ax=ax, units=units, patch_size=patch_pixels(usable[0][0]))
        if ax is not axes.flat[0]:
            ax.get_legend().remove()
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return plots.plain_tick_labels(fig)


LAYER_PANELS = [("mad", "min"), ("mad", "mean"), ("entropy", "min"), ("entropy", "mean")]


def layer_table(run: RunRecord, notes: list[str]) -> list[dict[str, Any]] | None:
    """The final model's `per_layer` rows when every panel's figure is a number in each; None (noted) otherwise."""
    table = run.final_attention.get("per_layer")
    if not table:
        return None
    keys = [f"{stat}_{reduce}" for stat, reduce in LAYER_PANELS]
    rows_ok = isinstance(table, list) and all(isinstance(row, dict) for row in table)
    if rows_ok and all(_is_number(row.get(key)) for row in table for key in keys):
        return table
    _left_out(notes, run, "attention.final.per_layer is malformed", "layers")
    return None


def layers_figure(cells: dict[str, Group], title: str, notes: list[str]) -> plt.Figure:
    """Per layer: min and mean over heads of MAD and of entropy, averaged over seeds, one line per cell."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    early = depth = 0
    units, patch = None, None
    for name, group in cells.items():
        usable = [(run, table) for run in group.runs if (table := layer_table(run, notes))]
        if not usable:
            continue
        if units is None:
            units, patch = usable[0][0].stats_units, patch_pixels(usable[0][0])
        early = max(early, *(early_layers(run) or 0 for run, _ in usable))
        tables = [table for _, table in usable]
        layers = list(range(min(len(t) for t in tables)))
        depth = max(depth, len(layers))
        for ax, (stat, reduce) in zip(axes.flat, LAYER_PANELS, strict=True):
            means = [summarise(t[layer][f"{stat}_{reduce}"] for t in tables).mean for layer in layers]
            ax.plot(layers, means, marker="o", ms=3, label=f"{name} ({len(tables)})", **cell_style(name))
    for ax, (stat, reduce) in zip(axes.flat, LAYER_PANELS, strict=True):
        ax.set_title(f"{'MAD' if stat == 'mad' else 'normalised entropy'}: {reduce} over heads", fontsize=9)
        if early:
            ax.axvspan(-0.5, early - 0.5, color="grey", alpha=0.12, lw=0)
        ax.set_xlabel("layer")
        ax.set_xticks(range(depth))
        if stat == "mad" and units is not None:  # what local and uniform look like, in the runs' units
            plots.draw_mad_references(ax, units, horizontal=True, patch_size=patch)
            plots.draw_uniform_line(ax, units)
            ax.set_ylim(0, max(ax.get_ylim()[1], 0.58) if units == "unit" else None)
            ax.set_ylabel(f"MAD ({units})")
    _legend_or_empty(axes[0, 0])
    fig.suptitle(f"{title} (shaded: early layers; mean over seeds)", fontsize=10)
    fig.tight_layout()
    return plots.plain_tick_labels(fig)


def patch_pixels(run: RunRecord) -> int | None:
    """Pixels per patch side as the record states them (model.patch_size, else data.image_size over the 8 x 8 grid),
    for the references of a figure in pixels; None when it states neither."""
    model, data = run.data.get("model") or {}, run.data.get("data") or {}
    size, image = model.get("patch_size"), data.get("image_size")
    if _is_number(size) and size == int(size) and size > 0:
        return int(size)
    if _is_number(image) and image > 0 and image % GRID_SIZE == 0:
        return int(image) // GRID_SIZE
    return None


def early_layers(run: RunRecord) -> int | None:
    """The run's own count of early layers; None when its record holds no usable one."""
    try:
        count = run.early_layers
    except (TypeError, ValueError):
        return None
    return count if count >= 1 else None


def emergence_series(run: RunRecord, notes: list[str] | None = None) -> dict[int, float]:
    """Epoch -> minimum MAD over the heads of the run's early layers, read from its attention_stats.csv. Rows that
    do not parse are left out; `notes` gets one line for a run that had any, or whose file is unreadable."""
    notes = [] if notes is None else notes
    early = early_layers(run)
    try:
        rows = read_csv(run.attention_csv)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        _left_out(notes, run, f"{ATTENTION_CSV} is unreadable ({type(error).__name__})", "emergence")
        return {}
    if early is None:
        _left_out(notes, run, "attention.final.early_layers is malformed", "emergence")
        return {}
    series: dict[int, float] = {}
    points = [_emergence_point(row) for row in rows]
    for epoch, layer, mad in (point for point in points if point is not None):
        if layer < early:
            series[epoch] = min(series.get(epoch, math.inf), mad)
    bad = points.count(None)
    if bad:
        _left_out(notes, run, f"{bad} of {len(rows)} rows of {ATTENTION_CSV} are unreadable", "emergence", "they are")
    return series


def _emergence_point(row: dict[str, Any]) -> tuple[int, int, float] | None:
    """(epoch, layer, MAD) of one CSV row; None for a row that is not one (short, garbled, negative, not finite)."""
    try:
        epoch, layer, mad = int(row["epoch"]), int(row["layer"]), float(row["mad"])
    except (KeyError, TypeError, ValueError):
        return None
    return (epoch, layer, mad) if epoch >= 0 and layer >= 0 and math.isfinite(mad) else None


def _left_out(notes: list[str], run: RunRecord, why: str, figure: str, subject: str = "the run is") -> None:
    notes.append(f"{run.run_dir}: {why}; {subject} left out of the {figure} figure")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def emergence_figure(cells: dict[str, Group], title: str, notes: list[str]) -> plt.Figure:
    """Minimum early-layer MAD per epoch: mean over seeds, band from the lowest to the highest seed."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    units, patch = "unit", None
    for name, group in cells.items():
        series = [s for s in (emergence_series(run, notes) for run in group.runs) if s]
        if not series:
            continue
        units, patch = group.runs[0].stats_units, patch_pixels(group.runs[0])
        epochs = sorted({epoch for s in series for epoch in s})
        at = [[s[epoch] for s in series if epoch in s] for epoch in epochs]
        style = cell_style(name)
        ax.plot(epochs, [sum(v) / len(v) for v in at], marker="o", ms=3, label=f"{name} ({len(series)})", **style)
        if len(series) > 1:
            ax.fill_between(epochs, [min(v) for v in at], [max(v) for v in at], color=style["color"], alpha=0.15)
    plots.draw_mad_references(ax, units, horizontal=True, patch_size=patch)
    if units == "unit":
        plots.draw_uniform_line(ax, units)
        ax.set_ylim(top=max(ax.get_ylim()[1], 0.58))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch (0 = initialisation)")
    ax.set_ylabel(f"minimum early-layer MAD ({units})")
    ax.set_ylim(bottom=0)
    _legend_or_empty(ax)
    ax.set_title(f"{title}: emergence of locality (mean, min-max band over seeds)", fontsize=10)
    fig.tight_layout()
    return plots.plain_tick_labels(fig)


FIGURE_KINDS = {"plane": plane_figure, "layers": layers_figure, "emergence": emergence_figure}


def write_figures(agg: Aggregate, out_dir: Path, notes: list[str] | None = None) -> list[Path]:
    """Every figure for every (data set, model): <kind>_<data>_<model>.png and .pdf; returns the paths. `notes` gets
    a line for every run a figure had to leave out."""
    notes = [] if notes is None else notes
    paths = []
    for data, model in agg.models():
        cells = agg.cells(data, model)
        for kind, make in FIGURE_KINDS.items():
            fig = make(cells, f"{data}, {model}", notes)
            stem = slug(f"{kind}_{data}_{model}")
            pdf = out_dir / f"{stem}.pdf"
            out_dir.mkdir(parents=True, exist_ok=True)
            fig.savefig(pdf)
            paths += [plots.save(fig, out_dir / f"{stem}.png"), pdf]
    return paths


def _legend_or_empty(ax: plt.Axes) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncol=2)
    else:
        ax.text(0.5, 0.5, "no attention statistics", transform=ax.transAxes, ha="center", color="grey")
