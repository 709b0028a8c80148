"""The report's figures for each (data set, model), as PNG and PDF; what they leave out is noted."""

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
from vit_locality.attention.units import recorded_band
from vit_locality.catalog import CELL_FLAGS, CELL_ORDER
from vit_locality.report.load.aggregate import Aggregate, Group, summarise
from vit_locality.report.load.measurement import lacks_measurement, reads_training_measurement
from vit_locality.report.load.run_settings import slug
from vit_locality.report.stats.claim_units import UNIFORM_TOLERANCE, grid_side, uniform_mad
from vit_locality.store.file_read import UnreadableFile, read_csv_rows
from vit_locality.store.record import ATTENTION_CSV, RunRecord

plt = plots.plt
LAYER_PANELS = [("mad", "min"), ("mad", "mean"), ("entropy", "min"), ("entropy", "mean")]
ENTROPY_SPAN = 0.1  # the least an entropy axis shows: a tenth of its range, so 0.999 and 0.998 look alike
UNITS = "unit"  # every record stores distances so (attention/units.py)


@dataclass(frozen=True)
class Empty:
    """A figure with nothing to draw, and why."""

    why: str


def cell_style(name: str) -> dict[str, Any]:
    """A fixed colour per cell across figures; CutMix cells solid, the others dashed (the paper's split)."""
    colour = plt.get_cmap("tab10")(CELL_ORDER.index(name))
    return {"color": colour, "ls": "-" if CELL_FLAGS[name][1] else "--"}


def per_head_tables(
    run: RunRecord, keys: Iterable[str], dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor] | None:
    """The final model's (layers, heads) tables of `keys`; None unless all are non-empty numeric 2-D of one shape."""
    per_head = run.final_attention.get("per_head")
    try:
        tables = {key: torch.tensor(per_head[key], dtype=dtype) for key in keys}
    except (KeyError, TypeError, ValueError, RuntimeError):
        return None
    shapes = {table.shape for table in tables.values()}
    return tables if len(shapes) == 1 and len(shape := shapes.pop()) == 2 and shape.numel() else None


def plane_runs(group: Group, notes: list[str]) -> list[tuple[RunRecord, torch.Tensor, torch.Tensor]]:
    """The runs of a cell with usable head statistics, of the depth most of them have."""
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


def plane_figure(
    cells: dict[str, Group], title: str, notes: list[str], references: plots.ReferenceSource | None = None
) -> plt.Figure | Empty:
    """One MAD-entropy panel per cell, all seeds' heads together, with their control MADs where all runs have them,
    and the `references`."""
    if not any(run.final_attention.get("per_head") for group in cells.values() for run in group.runs):
        return Empty("no run has per-head attention statistics")
    names = list(cells)
    fig, axes = panels(len(names), 3.6, 3.2)
    for ax, name in zip(axes, names, strict=False):
        usable = plane_runs(cells[name], notes)
        if not usable:
            ax.set_title(f"{name}: no attention statistics", fontsize=9)
            continue
        runs = [run for run, _, _ in usable]
        mad, entropy = (torch.cat([entry[i] for entry in usable], dim=1) for i in (1, 2))
        label = f"{name} ({len(usable)} seed{'s' if len(usable) > 1 else ''})"
        controls = [per_head_tables(run, ("mad", "mad_control")) for run in runs]
        control = None if None in controls else torch.cat([c["mad_control"] for c in controls], dim=1)  # type: ignore[index]
        bands = [recorded_band(run.data) for run in runs]
        band = None if None in bands else max(b for b in bands if b is not None)
        drawn = plots.references_in(references, UNITS, None)
        plots.mad_entropy_plane(mad, entropy, label, ax=ax, units=UNITS, control=control, band=band, references=drawn)
    fig.suptitle(title, fontsize=10)
    shared_legend_below(fig)
    return plots.plain_tick_labels(fig)


def panels(count: int, width: float, height: float, cols: int = 4) -> tuple[plt.Figure, list[plt.Axes]]:
    """A grid of `count` panels of width x height inches, at most `cols` a row; the unused ones hidden."""
    cols = max(1, min(cols, count))
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def shared_legend_below(fig: plt.Figure) -> None:
    """One legend below every panel of `fig`, each label once, so no legend covers a panel's reference labels."""
    found: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if found:
        fig.legend(list(found.values()), list(found), loc="lower center", ncol=min(8, len(found)), fontsize=7)
    fig.tight_layout(rect=(0, 0.07 if found else 0, 1, 1))


def layer_table(run: RunRecord, notes: list[str]) -> list[dict[str, Any]] | None:
    """The final model's `per_layer` rows when every panel's figure is a number in each; None (noted) otherwise."""
    table = run.final_attention.get("per_layer")
    if not table:
        return None
    keys = [f"{stat}_{reduce}" for stat, reduce in LAYER_PANELS]
    number = lambda value: isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(table, list) and all(
        isinstance(row, dict) and all(number(row.get(k)) for k in keys) for row in table
    ):
        return table
    _left_out(notes, run, "attention.final.per_layer is malformed", "layers")
    return None


def layers_figure(
    cells: dict[str, Group], title: str, notes: list[str], references: plots.ReferenceSource | None = None
) -> plt.Figure | Empty:
    """Per layer: min and mean over heads of MAD and of entropy, averaged over seeds, one line per cell, with the
    `references` on the MAD panels."""
    if not any(run.final_attention.get("per_layer") for group in cells.values() for run in group.runs):
        return Empty("no run has per-layer attention statistics")
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    early = depth = 0
    seeds: list[int] = []
    for name, group in cells.items():
        usable = [(run, table) for run in group.runs if (table := layer_table(run, notes))]
        if not usable:
            continue
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
        ax.set(xlabel="layer", xticks=range(depth))
        if stat == "mad" and seeds:  # what local and uniform look like
            plots.draw_mad_references(ax, plots.references_in(references, UNITS, None), horizontal=True)
            plots.draw_uniform_line(ax, UNITS)
            ax.set_ylim(0, max(ax.get_ylim()[1], 0.58))
            ax.set_ylabel(f"MAD ({UNITS})")
        if stat == "entropy":
            plots.keep_min_span(ax, ENTROPY_SPAN, -0.02, 1.02)
    if not axes[0, 0].get_legend_handles_labels()[0]:
        plt.close(fig)
        return Empty("no run has a usable per-layer table")
    fig.suptitle(f"{title} (shaded: early layers; {seeds_drawn(seeds)})", fontsize=10)
    shared_legend_below(fig)
    return plots.plain_tick_labels(fig)


def seeds_drawn(seeds: list[int]) -> str:
    """What each line of a figure is, from each cell's seed count."""
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
    """Epoch -> minimum early-layer MAD (unit square) from the run's attention_stats.csv; problems go to `notes`."""
    notes = [] if notes is None else notes
    if lacks_measurement(run):  # no attention figures at all, said once in the report's notes
        return {}
    if not reads_training_measurement(run):
        why = f"its {ATTENTION_CSV} was measured with other stats settings than the measurement read"
        _left_out(notes, run, why, "emergence")
        return {}
    early = early_layers(run)
    path = run.attention_csv
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
    series: dict[int, float] = {}
    points = [_emergence_point(row) for row in rows]
    for epoch, layer, mad in (point for point in points if point is not None):
        if layer < early:
            series[epoch] = min(series.get(epoch, math.inf), mad)
    if bad := points.count(None):
        _left_out(notes, run, f"{bad} of {len(rows)} rows of {ATTENTION_CSV} are unreadable", "emergence", "they are")
    return series


def _emergence_point(row: dict[str, Any]) -> tuple[int, int, float] | None:
    """(epoch, layer, MAD) of one CSV row; None for a short, garbled, negative or non-finite one."""
    try:
        epoch, layer, mad = int(row["epoch"]), int(row["layer"]), float(row["mad"])
    except (KeyError, TypeError, ValueError):
        return None
    return (epoch, layer, mad) if epoch >= 0 and layer >= 0 and math.isfinite(mad) else None


def _left_out(notes: list[str], run: RunRecord, why: str, figure: str, subject: str = "the run is") -> None:
    notes.append(f"{run.run_dir}: {why}; {subject} left out of the {figure} figure")


def emergence_figure(
    cells: dict[str, Group], title: str, notes: list[str], references: plots.ReferenceSource | None = None
) -> plt.Figure | Empty:
    """Minimum early-layer MAD per epoch: mean over seeds, with a min-max band where a cell has two or more, and the
    `references`."""
    found = {
        name: [s for s in (emergence_series(run, notes) for run in group.runs) if s] for name, group in cells.items()
    }
    drawn = {name: series for name, series in found.items() if series}
    if not drawn:
        return Empty(f"no run has per-epoch attention statistics ({ATTENTION_CSV})")
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for name, series in drawn.items():
        epochs = sorted({epoch for s in series for epoch in s})
        at = [[s[epoch] for s in series if epoch in s] for epoch in epochs]
        style = cell_style(name)
        ax.plot(epochs, [sum(v) / len(v) for v in at], marker="o", ms=3, label=f"{name} ({len(series)})", **style)
        if len(series) > 1:
            ax.fill_between(epochs, [min(v) for v in at], [max(v) for v in at], color=style["color"], alpha=0.15)
    plots.draw_mad_references(ax, plots.references_in(references, UNITS, None), horizontal=True)
    plots.draw_uniform_line(ax, UNITS)
    ax.set_ylim(top=max(ax.get_ylim()[1], 0.58))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="epoch (0 = initialisation)", ylabel=f"minimum early-layer MAD ({UNITS})")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, title="cell (seeds)")
    seeds = [len(series) for series in drawn.values()]  # a band only where a cell has two or more
    if min(seeds) > 1:
        band = "mean, min-max band over seeds"
    elif max(seeds) == 1:
        band = "one seed per cell: its own line, no band"
    else:
        band = "mean over seeds; min-max band for cells with 2 or more"
    what = "attention still uniform: no locality emerged" if _uniform(drawn, cells) else band
    ax.set_title(f"{title}: minimum early-layer MAD per epoch ({what})", fontsize=10)
    fig.tight_layout()
    return plots.plain_tick_labels(fig)


def _uniform(drawn: dict[str, list[dict[int, float]]], cells: dict[str, Group]) -> bool:
    """Every point drawn within UNIFORM_TOLERANCE of uniform attention's MAD on its run's grid."""
    return all(
        abs(value - uniform_mad(grid_side(cells[name].runs[0]))) <= UNIFORM_TOLERANCE
        for name, series in drawn.items()
        for run in series
        for value in run.values()
    )


FIGURE_KINDS = {"plane": plane_figure, "layers": layers_figure, "emergence": emergence_figure}


def write_figures(
    agg: Aggregate, out_dir: Path, notes: list[str] | None = None, references: plots.ReferenceSource | None = None
) -> list[Path]:
    """<kind>_<data>_<model>.png and .pdf for every (data set, model), with the `references` drawn; returns the
    paths, noting what is left out."""
    notes = [] if notes is None else notes
    paths = []
    for data, model in agg.models():
        cells = agg.cells(data, model)
        for kind, make in FIGURE_KINDS.items():
            figure = make(cells, f"{data}, {model}", notes, references)
            paths += save_figure(figure, out_dir, slug(f"{kind}_{data}_{model}"), notes)
    return paths


def save_figure(fig: plt.Figure | Empty, out_dir: Path, stem: str, notes: list[str]) -> list[Path]:
    """<stem>.png and <stem>.pdf; an Empty figure only gets a line in `notes`."""
    if isinstance(fig, Empty):
        notes.append(f"figure {stem} left out: {fig.why}")
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    pdf = out_dir / f"{stem}.pdf"
    fig.savefig(pdf)
    return [plots.save(fig, out_dir / f"{stem}.png"), pdf]
