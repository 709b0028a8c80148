"""The report's three figures for each (data set, model), as PNG and PDF.

- plane: every head of every seed in the MAD-entropy plane, coloured by layer, one panel per cell present
  (8 for an ablation, Baseline and Modern for a protocols sweep);
- layers: MAD and entropy per layer, minimum and mean over heads, one line per cell (mean over seeds);
- emergence: minimum early-layer MAD against the epoch (from attention_stats.csv), one line per cell,
  the mean over seeds with the min-max band: when locality appears, which the paper does not show.
Each run's own `early_layers` (results.json) decides which layers are early.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from matplotlib.ticker import MaxNLocator

from .. import plots
from ..attention_records import read_csv
from ..domain import CELL_FLAGS, CELL_ORDER
from ..results import RunRecord
from .aggregate import Aggregate, Group, slug, summarise

plt = plots.plt


def cell_style(name: str) -> dict[str, Any]:
    """A fixed colour per cell across figures; CutMix cells solid, the others dashed (the paper's split)."""
    colour = plt.get_cmap("tab10")(CELL_ORDER.index(name))
    return {"color": colour, "ls": "-" if CELL_FLAGS[name][1] else "--"}


def plane_figure(cells: dict[str, Group], title: str) -> plt.Figure:
    """One MAD-entropy panel per cell, all seeds' heads together (head indices do not match across seeds)."""
    names = list(cells)
    cols = min(4, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        runs = [run for run in cells[name].runs if run.final_attention.get("per_head")]
        if not runs:
            ax.set_title(f"{name}: no attention statistics", fontsize=9)
            continue
        mad = torch.cat([torch.tensor(run.final_attention["per_head"]["mad"]) for run in runs], dim=1)
        entropy = torch.cat([torch.tensor(run.final_attention["per_head"]["entropy"]) for run in runs], dim=1)
        units = runs[0].stats_units
        label = f"{name} ({len(runs)} seed{'s' if len(runs) > 1 else ''})"
        plots.mad_entropy_plane(mad, entropy, label, ax=ax, units=units)
        if ax is not axes.flat[0]:
            ax.get_legend().remove()
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def layers_figure(cells: dict[str, Group], title: str) -> plt.Figure:
    """Per layer: min and mean over heads of MAD and of entropy, averaged over seeds, one line per cell."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    panels = [("mad", "min"), ("mad", "mean"), ("entropy", "min"), ("entropy", "mean")]
    early = depth = 0
    for name, group in cells.items():
        tables = [run.final_attention["per_layer"] for run in group.runs if run.final_attention.get("per_layer")]
        if not tables:
            continue
        early = max(early, *(run.early_layers for run in group.runs))
        layers = list(range(min(len(t) for t in tables)))
        depth = max(depth, len(layers))
        for ax, (stat, reduce) in zip(axes.flat, panels, strict=True):
            means = [summarise(t[layer][f"{stat}_{reduce}"] for t in tables).mean for layer in layers]
            ax.plot(layers, means, marker="o", ms=3, label=f"{name} ({len(tables)})", **cell_style(name))
    for ax, (stat, reduce) in zip(axes.flat, panels, strict=True):
        ax.set_title(f"{'MAD' if stat == 'mad' else 'normalised entropy'}: {reduce} over heads", fontsize=9)
        if early:
            ax.axvspan(-0.5, early - 0.5, color="grey", alpha=0.12, lw=0)
        ax.set_xlabel("layer")
        ax.set_xticks(range(depth))
    _legend_or_empty(axes[0, 0])
    fig.suptitle(f"{title} (shaded: early layers; mean over seeds)", fontsize=10)
    fig.tight_layout()
    return fig


def emergence_series(run: RunRecord) -> dict[int, float]:
    """Epoch -> minimum MAD over the heads of the run's early layers, read from its attention_stats.csv."""
    early = run.early_layers
    series: dict[int, float] = {}
    for row in read_csv(run.attention_csv):
        try:
            epoch, layer, mad = int(row["epoch"]), int(row["layer"]), float(row["mad"])
        except (KeyError, TypeError, ValueError):
            continue
        if layer < early:
            series[epoch] = min(series.get(epoch, math.inf), mad)
    return series


def emergence_figure(cells: dict[str, Group], title: str) -> plt.Figure:
    """Minimum early-layer MAD per epoch: mean over seeds, band from the lowest to the highest seed."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    units = "unit"
    for name, group in cells.items():
        series = [s for s in (emergence_series(run) for run in group.runs) if s]
        if not series:
            continue
        units = group.runs[0].stats_units
        epochs = sorted({epoch for s in series for epoch in s})
        at = [[s[epoch] for s in series if epoch in s] for epoch in epochs]
        style = cell_style(name)
        ax.plot(epochs, [sum(v) / len(v) for v in at], marker="o", ms=3, label=f"{name} ({len(series)})", **style)
        if len(series) > 1:
            ax.fill_between(epochs, [min(v) for v in at], [max(v) for v in at], color=style["color"], alpha=0.15)
    if units == "unit":
        ax.axhline(plots.UNIFORM_MAD_8X8, color="grey", ls=":", lw=1)
        ax.text(0, plots.UNIFORM_MAD_8X8, "uniform", color="grey", fontsize=7, va="bottom")
        ax.set_ylim(top=max(ax.get_ylim()[1], 0.58))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch (0 = initialisation)")
    ax.set_ylabel(f"minimum early-layer MAD ({units})")
    ax.set_ylim(bottom=0)
    _legend_or_empty(ax)
    ax.set_title(f"{title}: emergence of locality (mean, min-max band over seeds)", fontsize=10)
    fig.tight_layout()
    return fig


FIGURE_KINDS = {"plane": plane_figure, "layers": layers_figure, "emergence": emergence_figure}


def write_figures(agg: Aggregate, out_dir: Path) -> list[Path]:
    """Every figure for every (data set, model): <kind>_<data>_<model>.png and .pdf; returns the paths."""
    paths = []
    for data, model in agg.models():
        cells = agg.cells(data, model)
        for kind, make in FIGURE_KINDS.items():
            fig = make(cells, f"{data}, {model}")
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
