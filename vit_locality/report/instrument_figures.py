"""The instruments' figures (docs/instruments.md) for one (data set, model), as PNG and PDF:

- masses: per cell, every head's patch-key attention split into self / 8 neighbours / far, grouped by layer;
- positions: per cell, the classic map of each patch's position-embedding similarity with every other;
- trajectory: minimum early-layer MAD against validation top-1, one line per run through its epochs;
- dose: minimum MAD and top-1 against CutMix's alpha and probability and label smoothing, the paper's settings
  marked.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from vit_locality.attention import plots
from vit_locality.instruments.dose_response import AXES, AXIS_LABELS, PAPER_SETTINGS, dose_curves
from vit_locality.instruments.position_embedding import similarity_mosaic
from vit_locality.report.figures import cell_style
from vit_locality.report.instrument_tables import MASS_KEYS, Instruments, accuracy_levels, head_masses, trajectories

plt = plots.plt
MASS_COLOURS = {"self_mass": "#b2182b", "neighbour_mass": "#ef8a62", "far_mass": "#67a9cf"}
MASS_LABELS = {"self_mass": "self", "neighbour_mass": "8 neighbours", "far_mass": "far"}


def _panels(count: int, width: float, height: float, cols: int = 4) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = max(1, min(cols, count))
    rows = max(1, math.ceil(count / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat


def masses_figure(found: Instruments) -> plt.Figure:
    """Stacked bars, one per head, heads grouped by layer and sorted within a layer from the most self-attending;
    with several seeds, the mean over seeds of the k-th most self-attending head (head indices do not match across
    seeds)."""
    names = list(found.cells)
    fig, axes = _panels(len(names), 5.2, 2.8, cols=2)
    for ax, name in zip(axes, names, strict=False):
        tables = [t for t in (head_masses(run) for run in found.cells[name].runs) if t is not None]
        depths = {t["mad"].shape for t in tables}
        if not tables or len(depths) > 1:
            ax.set_title(f"{name}: no locality masses" if not tables else f"{name}: runs of different shapes")
            ax.axis("off")
            continue
        depth, heads = tables[0]["mad"].shape
        sorted_tables = []
        for t in tables:
            order = torch.argsort(t["self_mass"], dim=1, descending=True)
            sorted_tables.append({k: torch.gather(t[k], 1, order) for k in MASS_KEYS})
        mean = {k: torch.stack([t[k] for t in sorted_tables]).mean(dim=0) for k in MASS_KEYS}
        x = torch.arange(depth)[:, None] * (heads + 1) + torch.arange(heads)[None, :]
        bottom = torch.zeros(depth, heads, dtype=torch.float64)
        for key in MASS_KEYS:
            heights, base = mean[key].flatten().tolist(), bottom.flatten().tolist()
            ax.bar(x.flatten().tolist(), heights, bottom=base, width=0.9, color=MASS_COLOURS[key])
            bottom += mean[key]
        ax.set_xticks([layer * (heads + 1) + (heads - 1) / 2 for layer in range(depth)], range(depth))
        ax.set_xlabel("layer (heads sorted by self mass)")
        ax.set_ylim(0, 1.0)
        ax.set_ylabel("share of patch-key attention")
        ax.set_title(f"{name} ({len(tables)} run{'s' if len(tables) > 1 else ''})", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=MASS_COLOURS[k]) for k in MASS_KEYS]
    fig.legend(handles, [MASS_LABELS[k] for k in MASS_KEYS], loc="upper right", fontsize=8, ncol=3)
    fig.suptitle(f"{found.title}: where each head's attention goes (final model)", fontsize=10, x=0.4)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return plots.plain_tick_labels(fig)


def positions_figure(found: Instruments) -> plt.Figure:
    """Per cell, the first run's similarity mosaic: at each patch's place, its similarity with every patch."""
    shown = [(name, ms) for name, ms in found.measured.items() if any(m.similarity is not None for m in ms)]
    fig, axes = _panels(max(1, len(shown)), 3.3, 3.5)
    if not shown:
        axes[0].text(0.5, 0.5, "no checkpoints", ha="center", transform=axes[0].transAxes)
        axes[0].axis("off")
    image = None
    for ax, (name, measured) in zip(axes, shown, strict=False):
        first = next(m for m in measured if m.similarity is not None)
        image = ax.imshow(similarity_mosaic(first.similarity).numpy(), cmap="viridis", vmin=-1, vmax=1)
        localities = [m.locality for m in measured if m.similarity is not None]
        ax.set_title(f"{name}: locality {sum(localities) / len(localities):.2f}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label="cosine similarity")
    fig.suptitle(f"{found.title}: position-embedding similarity (first seed)", fontsize=10)
    return plots.plain_tick_labels(fig)


def trajectory_figure(found: Instruments) -> plt.Figure:
    """Each run's path through (validation top-1, minimum early-layer MAD), epoch by epoch; the final epoch ringed,
    the matched accuracy levels of the table as dotted lines."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, runs in trajectories(found).items():
        style = cell_style(name)
        for i, (_, t) in enumerate(runs):
            acc = [100 * a for a in t.accuracy]
            ax.plot(acc, t.min_mad, marker="o", ms=2.5, lw=1.2, label=name if i == 0 else None, **style)
            ax.scatter([acc[-1]], [t.min_mad[-1]], s=60, facecolors="none", edgecolors=style["color"])
    for level in accuracy_levels(found):
        ax.axvline(100 * level, color="grey", ls=":", lw=0.8)
    ax.axhline(plots.UNIFORM_MAD_8X8, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("validation top-1 (%)")
    ax.set_ylabel("minimum early-layer MAD")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"{found.title}: locality against accuracy, epoch by epoch (ring: final)", fontsize=10)
    fig.tight_layout()
    return plots.plain_tick_labels(fig)


def dose_figure(found: Instruments) -> plt.Figure:
    """Columns: the three knobs; rows: minimum MAD (dashed: uniform attention) and top-1; the paper's settings as
    vertical dotted lines."""
    runs = [run for group in found.cells.values() for run in group.runs]
    fig, axes = plt.subplots(2, len(AXES), figsize=(4.2 * len(AXES), 6.2), squeeze=False)
    for col, axis in enumerate(AXES):
        curves = dose_curves(runs, axis)
        for curve in curves:
            points = curve.means()
            xs = [p[0] for p in points]
            axes[0, col].plot(xs, [p[1] for p in points], marker="o", label=curve.label())
            axes[1, col].plot(xs, [100 * p[2] for p in points], marker="o", label=curve.label())
        for row, label in enumerate(("minimum early-layer MAD", "top-1 (%)")):
            ax = axes[row, col]
            for x in PAPER_SETTINGS[axis]:
                ax.axvline(x, color="grey", ls=":", lw=1)
            ax.set_ylabel(label)
            if row == 1:
                ax.set_xlabel(AXIS_LABELS[axis], fontsize=8)
            if not curves:
                ax.text(0.5, 0.5, "no runs along this axis", ha="center", color="grey", transform=ax.transAxes)
            if row == 0:  # on the full scale, from "attends to itself" (0) to uniform, so flat reads as flat
                ax.axhline(plots.UNIFORM_MAD_8X8, color="grey", ls="--", lw=0.8)
                ax.set_ylim(0, max(0.6, ax.get_ylim()[1]))
        if curves:
            axes[0, col].legend(fontsize=6)
    fig.suptitle(f"{found.title}: dose-response (dotted: the paper's settings; dashed: uniform attention)", fontsize=10)
    fig.tight_layout()
    return plots.plain_tick_labels(fig)


def write_instrument_figures(found: Instruments, out_dir: Path) -> list[Path]:
    """<kind>_<data>_<model>.png and .pdf for every instrument; returns the paths."""
    figures = {
        "masses": masses_figure(found),
        "positions": positions_figure(found),
        "trajectory": trajectory_figure(found),
        "dose": dose_figure(found),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind, fig in figures.items():
        pdf = out_dir / f"{kind}_{found.stem}.pdf"
        fig.savefig(pdf)
        paths += [plots.save(fig, out_dir / f"{kind}_{found.stem}.png"), pdf]
    return paths
