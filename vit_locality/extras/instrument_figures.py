"""The instruments' figures (docs/instruments.md) for one (data set, model), as PNG and PDF, and the report's
`instruments` command."""

from __future__ import annotations

from pathlib import Path

import torch

from vit_locality.attention import plots
from vit_locality.extras.instrument_tables import (
    MASS_KEYS,
    Instruments,
    accuracy_levels,
    head_masses,
    instrument_tables,
    measure,
    trajectories,
)
from vit_locality.extras.instruments.dose_response import AXES, AXIS_LABELS, PAPER_SETTINGS, dose_curves
from vit_locality.extras.instruments.position_embedding import similarity_mosaic
from vit_locality.report.load.aggregate import Aggregate
from vit_locality.report.render.figures import UNITS, Empty, cell_style, panels, save_figure

plt = plots.plt
MASS_COLOURS = {"self_mass": "#b2182b", "neighbour_mass": "#ef8a62", "far_mass": "#67a9cf"}
MASS_LABELS = {"self_mass": "self", "neighbour_mass": "8 neighbours", "far_mass": "far"}


def masses_figure(found: Instruments) -> plt.Figure | Empty:
    """Stacked self / neighbour / far bars per head, by layer, from the most self-attending (mean over seeds)."""
    if not any(head_masses(run) is not None for group in found.cells.values() for run in group.runs):
        return Empty("no run records per-head locality masses (attention.final.per_head)")
    names = list(found.cells)
    fig, axes = panels(len(names), 5.2, 2.8, cols=2)
    for ax, name in zip(axes, names, strict=False):
        tables = [t for t in (head_masses(run) for run in found.cells[name].runs) if t is not None]
        depths = {t["mad"].shape for t in tables}
        if not tables or len(depths) > 1:
            ax.set_title(f"{name}: no locality masses" if not tables else f"{name}: runs of different shapes")
            ax.axis("off")
            continue
        depth, heads = tables[0]["mad"].shape
        orders = [torch.argsort(t["self_mass"], dim=1, descending=True) for t in tables]
        mean = {
            k: torch.stack([t[k].gather(1, o) for t, o in zip(tables, orders, strict=True)]).mean(0) for k in MASS_KEYS
        }
        x = torch.arange(depth)[:, None] * (heads + 1) + torch.arange(heads)[None, :]
        bottom = torch.zeros(depth, heads, dtype=torch.float64)
        for key in MASS_KEYS:
            heights, base = mean[key].flatten().tolist(), bottom.flatten().tolist()
            ax.bar(x.flatten().tolist(), heights, bottom=base, width=0.9, color=MASS_COLOURS[key])
            bottom += mean[key]
        ax.set_xticks([layer * (heads + 1) + (heads - 1) / 2 for layer in range(depth)], range(depth))
        ax.set(xlabel="layer (heads sorted by self mass)", ylim=(0, 1.0), ylabel="share of patch-key attention")
        ax.set_title(f"{name} ({len(tables)} run{'s' if len(tables) > 1 else ''})", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=MASS_COLOURS[k]) for k in MASS_KEYS]
    fig.legend(handles, [MASS_LABELS[k] for k in MASS_KEYS], loc="upper right", fontsize=8, ncol=3)
    fig.suptitle(f"{found.title}: where each head's attention goes (final model)", fontsize=10, x=0.4)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return plots.plain_tick_labels(fig)


def positions_figure(found: Instruments) -> plt.Figure | Empty:
    """Per cell, the first run's position-embedding similarity mosaic."""
    shown = [(name, ms) for name, ms in found.measured.items() if any(m.similarity is not None for m in ms)]
    if not shown:
        return Empty("no run has a usable checkpoints/last.ckpt")
    fig, axes = panels(len(shown), 3.3, 3.5)
    image = None
    for ax, (name, measured) in zip(axes, shown, strict=False):
        first = next(m for m in measured if m.similarity is not None)
        image = ax.imshow(similarity_mosaic(first.similarity).numpy(), cmap="viridis", vmin=-1, vmax=1)
        localities = [m.locality for m in measured if m.similarity is not None]
        ax.set_title(f"{name}: locality {sum(localities) / len(localities):.2f}", fontsize=9)
        ax.set(xticks=[], yticks=[])
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label="cosine similarity")
    fig.suptitle(f"{found.title}: position-embedding similarity (first seed)", fontsize=10)
    return plots.plain_tick_labels(fig)


def trajectory_figure(found: Instruments) -> plt.Figure | Empty:
    """Each run's path through (validation top-1 in percent, minimum early-layer MAD), epoch by epoch."""
    paths = trajectories(found)
    if not paths:
        return Empty("no run has a validation top-1 (data.val_size > 0) and attention statistics for the same epochs")
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for name, runs in paths.items():
        style = cell_style(name)
        for i, (_, t) in enumerate(runs):
            acc = [100 * a for a in t.accuracy]
            ax.plot(acc, t.min_mad, marker="o", ms=2.5, lw=1.2, label=name if i == 0 else None, **style)
            ax.scatter([acc[-1]], [t.min_mad[-1]], s=60, facecolors="none", edgecolors=style["color"])
    for level in accuracy_levels(found):
        ax.axvline(100 * level, color="grey", ls=":", lw=0.8)
    ax.axhline(plots.UNIFORM_MAD_8X8, color="grey", ls="--", lw=0.8)
    ax.set(xlabel="validation top-1 (%)", ylabel=f"minimum early-layer MAD ({UNITS})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    ax.set_title(f"{found.title}: locality against accuracy, epoch by epoch (ring: final)", fontsize=10)
    fig.tight_layout()
    return plots.plain_tick_labels(fig)


def dose_figure(found: Instruments) -> plt.Figure | Empty:
    """One column per swept knob of `AXES`: minimum MAD and top-1 against the dose, the paper's settings dotted."""
    runs = [run for group in found.cells.values() for run in group.runs]
    swept = {axis: curves for axis in AXES if (curves := dose_curves(runs, axis))}
    if not swept:
        knobs = ", ".join(AXIS_LABELS[axis].split(" ")[0] for axis in AXES)
        return Empty(f"no runs along {knobs} beyond the paper's settings (the dose_* sweeps make them)")
    fig, axes = plt.subplots(2, len(swept), figsize=(4.2 * len(swept), 6.2), squeeze=False)
    for col, (axis, curves) in enumerate(swept.items()):
        for curve in curves:
            points = curve.means()
            xs = [p[0] for p in points]
            axes[0, col].plot(xs, [p[1] for p in points], marker="o", label=curve.label())
            axes[1, col].plot(xs, [100 * p[2] for p in points], marker="o", label=curve.label())
        for row, label in enumerate((f"minimum early-layer MAD ({UNITS})", "top-1 (%)")):
            ax = axes[row, col]
            for x in PAPER_SETTINGS[axis]:
                ax.axvline(x, color="grey", ls=":", lw=1)
            ax.set_ylabel(label)
            if row == 1:
                ax.set_xlabel(AXIS_LABELS[axis], fontsize=8)
            if row == 0:  # the full scale, from "attends to itself" (0) to uniform
                ax.axhline(plots.UNIFORM_MAD_8X8, color="grey", ls="--", lw=0.8)
                ax.set_ylim(0, max(0.6, ax.get_ylim()[1]))
        axes[0, col].legend(fontsize=6)
    unswept = [AXIS_LABELS[axis].split(" ")[0] for axis in AXES if axis not in swept]
    missing = f"; not swept: {', '.join(unswept)}" if unswept else ""
    fig.suptitle(
        f"{found.title}: dose-response (dotted: the paper's settings; dashed: uniform attention{missing})", fontsize=10
    )
    fig.tight_layout()
    return plots.plain_tick_labels(fig)


def write_instrument_figures(found: Instruments, out_dir: Path) -> list[Path]:
    """<kind>_<data>_<model>.png and .pdf for every instrument with something to draw; returns the paths."""
    makers = {
        "masses": masses_figure,
        "positions": positions_figure,
        "trajectory": trajectory_figure,
        "dose": dose_figure,
    }
    figures = {kind: make(found) for kind, make in makers.items()}  # all drawn before any is saved: notes in order
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        path for kind, fig in figures.items() for path in save_figure(fig, out_dir, f"{kind}_{found.stem}", found.notes)
    ]


def write_instruments(agg: Aggregate, out: Path, box_images: int) -> list[Path]:
    """Every instrument's tables (printed too) and figures for each (data set, model)."""
    written: list[Path] = []
    for data, model in agg.models():
        found = measure(agg, data, model, box_images)
        for table in instrument_tables(found):
            print(table.markdown(), end="\n\n")
            written += table.write(out)
        written += write_instrument_figures(found, out)
        agg.notes.extend(found.notes)
    return written
