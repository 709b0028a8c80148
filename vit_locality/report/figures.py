"""The report's three figures for each (data set, model), as PNG and PDF (`FIGURE_KINDS`: plane, layers,
emergence). Each run's own `early_layers` decides which layers are early. A figure with nothing to draw is not
written (`Empty`), and a run a figure cannot use is left out of it; both are named in the notes the caller prints.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from matplotlib.ticker import MaxNLocator

from vit_locality.attention import plots
from vit_locality.attention.min_head import recorded_band
from vit_locality.catalog import CELL_FLAGS, CELL_ORDER
from vit_locality.report.aggregate import Aggregate, Group, summarise
from vit_locality.report.claim_units import UNIFORM_TOLERANCE, uniform_mad
from vit_locality.report.record_units import csv_scale, grid_side, patch_pixels
from vit_locality.report.run_settings import slug
from vit_locality.store.file_read import UnreadableFile, read_csv_rows
from vit_locality.store.record import ATTENTION_CSV, RunRecord

plt = plots.plt


@dataclass(frozen=True)
class Empty:
    """A figure with nothing to draw, and why: it is left out of the files and the page, and the reason is a note."""

    why: str


def cell_style(name: str) -> dict[str, Any]:
    """A fixed colour per cell across figures; CutMix cells solid, the others dashed (the paper's split)."""
    colour = plt.get_cmap("tab10")(CELL_ORDER.index(name))
    return {"color": colour, "ls": "-" if CELL_FLAGS[name][1] else "--"}


def per_head_tables(
    run: RunRecord, keys: Iterable[str], dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor] | None:
    """The final model's (layers, heads) tables of `keys` from `per_head`; None unless every one is a non-empty
    numeric 2-D table and all have one shape."""
    per_head = run.final_attention.get("per_head")
    try:
        tables = {key: torch.tensor(per_head[key], dtype=dtype) for key in keys}
    except (KeyError, TypeError, ValueError, RuntimeError):
        return None
    shapes = {table.shape for table in tables.values()}
    return tables if len(shapes) == 1 and len(shape := shapes.pop()) == 2 and shape.numel() else None


def plane_runs(group: Group, notes: list[str]) -> list[tuple[RunRecord, torch.Tensor, torch.Tensor]]:
    """The runs of a cell with usable head statistics, all of the depth most of them have (their heads share one
    plot, coloured by layer)."""
    usable: list[tuple[RunRecord, torch.Tensor, torch.Tensor]] = []
    for run in group.runs:
        if not run.final_attention.get("per_head"):
            continue  # statistics off: the panel says so
        stats = per_head_tables(run, ("mad", "entropy"))
        if stats is None:
            _left_out(notes, run, "attention.final.per_head is malformed", "plane")
        else:
            usable.append((run, stats["mad"], stats["entropy"]))
    if not usable:
        return []
    depth = Counter(mad.shape[0] for _, mad, _ in usable).most_common(1)[0][0]
    for run, mad, _ in usable:
        if mad.shape[0] != depth:
            _left_out(notes, run, f"{mad.shape[0]} layers where the cell's other runs have {depth}", "plane")
    return [entry for entry in usable if entry[1].shape[0] == depth]


def plane_figure(cells: dict[str, Group], title: str, notes: list[str]) -> plt.Figure | Empty:
    """One MAD-entropy panel per cell, all seeds' heads together (head indices do not match across seeds), each
    head joined to its control (query-averaged) MAD where every run of the cell records it. Empty when no run has
    per-head statistics."""
    if not any(run.final_attention.get("per_head") for group in cells.values() for run in group.runs):
        return Empty("no run has per-head attention statistics")
    names = list(cells)
    fig, axes = panels(len(names), 3.6, 3.2)
    for ax, name in zip(axes, names, strict=False):
        usable = plane_runs(cells[name], notes)
        if not usable:
            ax.set_title(f"{name}: no attention statistics", fontsize=9)
            continue
        mad = torch.cat([mad for _, mad, _ in usable], dim=1)
        entropy = torch.cat([entropy for _, _, entropy in usable], dim=1)
        units = usable[0][0].stats_units
        label = f"{name} ({len(usable)} seed{'s' if len(usable) > 1 else ''})"
        controls = [per_head_tables(run, ("mad", "mad_control")) for run, _, _ in usable]
        missing = any(c is None for c in controls)
        control = None if missing else torch.cat([c["mad_control"] for c in controls], dim=1)  # type: ignore[index]
        patch = patch_pixels(usable[0][0])
        band = cell_band([run for run, _, _ in usable], units)
        plots.mad_entropy_plane(mad, entropy, label, ax=ax, units=units, patch_size=patch, control=control, band=band)
    fig.suptitle(title, fontsize=10)
    shared_legend_below(fig)
    return plots.plain_tick_labels(fig)


def cell_band(runs: list[RunRecord], units: str) -> float | None:
    """The largest noise band of surround_pref over a panel's runs (unit square), None unless every run records one
    and the panel is drawn on the unit square."""
    bands = [recorded_band(run.data) for run in runs]
    return None if units != "unit" or not bands or None in bands else max(b for b in bands if b is not None)


def panels(count: int, width: float, height: float, cols: int = 4) -> tuple[plt.Figure, list[plt.Axes]]:
    """A grid of `count` panels of width x height inches, at most `cols` a row; the unused ones hidden."""
    cols = max(1, min(cols, count))
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def shared_legend_below(fig: plt.Figure) -> None:
    """One legend for every panel of `fig`, below them: a legend inside a panel covers the labels of its reference
    lines (the plane's `uniform` sits where its `lower right` legend goes). Each label once, in the panels' order."""
    found: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if found:
        fig.legend(list(found.values()), list(found), loc="lower center", ncol=min(8, len(found)), fontsize=7)
    fig.tight_layout(rect=(0, 0.07 if found else 0, 1, 1))


LAYER_PANELS = [("mad", "min"), ("mad", "mean"), ("entropy", "min"), ("entropy", "mean")]


def layer_table(run: RunRecord, notes: list[str]) -> list[dict[str, Any]] | None:
    """The final model's `per_layer` rows when every panel's figure is a number in each; None (noted) otherwise."""
    table = run.final_attention.get("per_layer")
    if not table:
        return None
    keys = [f"{stat}_{reduce}" for stat, reduce in LAYER_PANELS]
    rows_ok = isinstance(table, list) and all(isinstance(row, dict) for row in table)
    if rows_ok and all(
        isinstance(value := row.get(key), int | float) and not isinstance(value, bool) for row in table for key in keys
    ):
        return table
    _left_out(notes, run, "attention.final.per_layer is malformed", "layers")
    return None


def layers_figure(cells: dict[str, Group], title: str, notes: list[str]) -> plt.Figure | Empty:
    """Per layer: min and mean over heads of MAD and of entropy, averaged over seeds, one line per cell; the legend
    below the panels, clear of the references' labels. Empty when no run has a usable per-layer table."""
    if not any(run.final_attention.get("per_layer") for group in cells.values() for run in group.runs):
        return Empty("no run has per-layer attention statistics")
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    early = depth = 0
    units, patch = None, None
    seeds: list[int] = []
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
        seeds.append(len(tables))
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
        if stat == "entropy":
            plots.keep_min_span(ax, ENTROPY_SPAN, -0.02, 1.02)
    if not axes[0, 0].get_legend_handles_labels()[0]:
        plt.close(fig)
        return Empty("no run has a usable per-layer table")
    fig.suptitle(f"{title} (shaded: early layers; {seeds_drawn(seeds)})", fontsize=10)
    shared_legend_below(fig)
    return plots.plain_tick_labels(fig)


ENTROPY_SPAN = 0.1  # the least an entropy axis shows: a tenth of its range, so 0.999 and 0.998 look alike


def seeds_drawn(seeds: list[int]) -> str:
    """What each line of a figure is, from each cell's seed count: a mean only where there is more than one."""
    if max(seeds) == 1:
        return "one seed per cell: each line is one run"
    if min(seeds) > 1:
        return "each line the mean over its cell's seeds (in the legend)"
    return "mean over seeds where a cell has several (seeds in the legend)"


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
    path = run.attention_csv  # read through the bounded reader of run files: a FIFO or a device is refused at once
    try:
        rows = read_csv_rows(path) if path.exists() or path.is_symlink() else []
    except UnreadableFile as error:
        notes.append(error.skipped("the run is left out of the emergence figure"))
        return {}
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        _left_out(notes, run, f"{ATTENTION_CSV} is unreadable ({type(error).__name__})", "emergence")
        return {}
    if early is None:
        _left_out(notes, run, "attention.final.early_layers is malformed", "emergence")
        return {}
    scale = csv_scale(run)  # the CSV holds the record's own units; the figure shows the unit square
    if not math.isfinite(scale):
        _left_out(notes, run, "its MAD cannot be converted to the unit square", "emergence")
        return {}
    series: dict[int, float] = {}
    points = [_emergence_point(row) for row in rows]
    for epoch, layer, mad in (point for point in points if point is not None):
        if layer < early:
            series[epoch] = min(series.get(epoch, math.inf), scale * mad)
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


def emergence_figure(cells: dict[str, Group], title: str, notes: list[str]) -> plt.Figure | Empty:
    """Minimum early-layer MAD per epoch: mean over seeds, band from the lowest to the highest seed where a cell has
    two or more (the title says which is drawn); the legend right of the axes, clear of the references' labels.
    Empty when no run has per-epoch statistics."""
    found = {
        name: [s for s in (emergence_series(run, notes) for run in group.runs) if s] for name, group in cells.items()
    }
    drawn = {name: series for name, series in found.items() if series}
    if not drawn:
        return Empty(f"no run has per-epoch attention statistics ({ATTENTION_CSV})")
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    units, patch = "unit", None
    for name, series in drawn.items():
        group = cells[name]
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
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, title="cell (seeds)")
    seeds = [len(series) for series in drawn.values()]  # a band only where a cell has two or more
    if min(seeds) > 1:
        band = "mean, min-max band over seeds"
    elif max(seeds) == 1:
        band = "one seed per cell: its own line, no band"
    else:
        band = "mean over seeds; min-max band for cells with 2 or more"
    what = "attention still uniform: no locality emerged" if units == "unit" and _uniform(drawn, cells) else band
    ax.set_title(f"{title}: minimum early-layer MAD per epoch ({what})", fontsize=10)
    fig.tight_layout()
    return plots.plain_tick_labels(fig)


def _uniform(drawn: dict[str, list[dict[int, float]]], cells: dict[str, Group]) -> bool:
    """Every point drawn within UNIFORM_TOLERANCE of uniform attention's MAD on its run's grid (the claims' test)."""
    return all(
        abs(value - uniform_mad(grid_side(cells[name].runs[0]))) <= UNIFORM_TOLERANCE
        for name, series in drawn.items()
        for run in series
        for value in run.values()
    )


FIGURE_KINDS = {"plane": plane_figure, "layers": layers_figure, "emergence": emergence_figure}


def write_figures(agg: Aggregate, out_dir: Path, notes: list[str] | None = None) -> list[Path]:
    """Every figure for every (data set, model): <kind>_<data>_<model>.png and .pdf; returns the paths. `notes` gets
    a line for every run a figure had to leave out, and for every figure left out as empty (`Empty`)."""
    notes = [] if notes is None else notes
    paths = []
    for data, model in agg.models():
        cells = agg.cells(data, model)
        for kind, make in FIGURE_KINDS.items():
            paths += save_figure(make(cells, f"{data}, {model}", notes), out_dir, slug(f"{kind}_{data}_{model}"), notes)
    return paths


def save_figure(fig: plt.Figure | Empty, out_dir: Path, stem: str, notes: list[str]) -> list[Path]:
    """<stem>.png and <stem>.pdf; an Empty figure is left out of the files and the page, with one line in `notes`."""
    if isinstance(fig, Empty):
        notes.append(f"figure {stem} left out: {fig.why}")
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    pdf = out_dir / f"{stem}.pdf"
    fig.savefig(pdf)
    return [plots.save(fig, out_dir / f"{stem}.png"), pdf]
