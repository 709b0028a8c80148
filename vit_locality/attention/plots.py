"""Pictures of the attention statistics, saved as PNG (matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.ticker import ScalarFormatter  # noqa: E402

UNIFORM_MAD_8X8 = 0.5171  # MAD of uniform attention over the 8 x 8 grid, in unit-square distance
CHAR_WIDTH_EM = 0.6  # a generous average glyph width of the default sans-serif font, in ems
REFERENCE_COLOURS = {"3x3 neighbourhood": "tab:red", "self only": "tab:purple"}
REFERENCE_MARKERS = {"3x3 neighbourhood": "P", "self only": "X"}
# Where a picture's reference lines come from: (units, patch size) -> objects with `label`, `mad_value`,
# `entropy_value` and `legend()` (extras/references.py); a picture given none draws none.
ReferenceSource = Callable[[str, int | None], Sequence[Any]]


def references_in(source: ReferenceSource | None, units: str, patch_size: int | None) -> Sequence[Any]:
    """What `source` draws in `units` (with the patch size for pixels); nothing without a source."""
    return () if source is None else source(units, patch_size)


def plain_tick_labels(fig: plt.Figure) -> plt.Figure:
    """Plain numbers on every ScalarFormatter axis of `fig`, never an offset ("1e-5+5.17e-1") that reads as noise."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            formatter = axis.get_major_formatter()
            if isinstance(formatter, ScalarFormatter):
                formatter.set_useOffset(False)
                formatter.set_scientific(False)
    return fig


def draw_mad_references(ax: plt.Axes, references: Sequence[Any], horizontal: bool) -> float:
    """Lines at the `references`' MAD, in the axes' units (vertical ones with a point at the entropy); the largest
    value, or 0."""
    largest = 0.0
    for ref in references:
        colour, value = REFERENCE_COLOURS[ref.label], ref.mad_value
        largest = max(largest, value)
        style = {"color": colour, "fontsize": 6.5}
        if horizontal:
            ax.axhline(value, color=colour, ls="-.", lw=0.8)
            along = ax.get_yaxis_transform()  # x in axes fractions, y in data
            ax.text(0.01, value, ref.legend(), va="bottom", transform=along, **style)
            continue
        ax.axvline(value, color=colour, ls="-.", lw=0.8)
        ax.scatter([value], [ref.entropy_value], color=colour, marker=REFERENCE_MARKERS[ref.label], s=36, clip_on=False)
        across = ax.get_xaxis_transform()  # x in data, y in axes fractions: from the top down, inside any panel
        ax.text(value, 0.98, " " + ref.legend(), rotation=90, va="top", ha="left", transform=across, **style)
    return largest


def draw_uniform_line(ax: plt.Axes, units: str) -> None:
    """A horizontal line at the MAD of uniform attention over the 8 x 8 grid, in unit distance only."""
    if units == "unit":
        ax.axhline(UNIFORM_MAD_8X8, color="grey", ls=":", lw=1)
        along = ax.get_yaxis_transform()
        ax.text(0.01, UNIFORM_MAD_8X8, "uniform", color="grey", fontsize=7, va="bottom", transform=along)


def keep_min_span(ax: plt.Axes, span: float, lower: float, upper: float) -> None:
    """Widen the y axis to at least `span`, within [lower, upper], so that noise in the fourth decimal looks flat."""
    low, high = ax.get_ylim()
    if high - low >= span:
        return
    middle = (low + high) / 2
    low = min(max(middle - span / 2, lower), upper - span)
    ax.set_ylim(low, low + span)


def wrap_title(title: str, width_inches: float, fontsize: float) -> str:
    """`title` in lines that fit `width_inches` at `fontsize`, broken after `_`, a space or `,` (else where it must)."""
    per_line = max(8, int(width_inches * 72 / (CHAR_WIDTH_EM * fontsize)))
    lines: list[str] = []
    line = ""
    for piece in re.findall(r"[^_ ,]*[_ ,]?", title):
        while len(piece) > per_line:  # an empty `line` is dropped at the end
            lines += [line, piece[:per_line]]
            line, piece = "", piece[per_line:]
        if len(line) + len(piece) > per_line:
            lines.append(line.rstrip())
            line = ""
        line += piece
    lines.append(line.rstrip())
    return "\n".join(part for part in lines if part)


def set_title(ax: plt.Axes, title: str, fontsize: float) -> None:
    """An axes title wrapped to the axes' width."""
    width = ax.get_position().width * ax.figure.get_figwidth()
    ax.set_title(wrap_title(title, width, fontsize), fontsize=fontsize)


def mad_entropy_plane(
    mad: torch.Tensor,
    entropy: torch.Tensor,
    title: str,
    ax: plt.Axes | None = None,
    units: str = "unit",
    control: torch.Tensor | None = None,
    band: float | None = None,
    references: Sequence[Any] = (),
) -> plt.Figure:
    """Every head at (MAD, entropy), one colour per layer; `control` adds a hollow marker at each head's control MAD,
    joined to the head where control - MAD exceeds `band` (the noise band, in `units`; without it, everywhere);
    `references` (in `units`) are drawn as vertical lines."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 5.2), layout="constrained")
    depth = mad.shape[0]
    for layer in range(depth):
        colour = plt.get_cmap("viridis")(layer / max(1, depth - 1))
        if control is not None:
            for head_mad, head_control, head_entropy in zip(mad[layer], control[layer], entropy[layer], strict=True):
                if band is None or float(head_control) - float(head_mad) > band:
                    ax.plot([float(head_mad), float(head_control)], [float(head_entropy)] * 2, color=colour, lw=0.7)
            ax.scatter(control[layer], entropy[layer], s=22, facecolor="none", edgecolor=colour, lw=0.8)
        ax.scatter(mad[layer], entropy[layer], color=colour, s=28, label=f"layer {layer}", edgecolor="k", lw=0.3)
    if control is not None:
        ax.scatter([], [], s=22, facecolor="none", edgecolor="k", lw=0.8, label="control: query-averaged")
        line = "line: control - MAD (noise band not recorded)"
        line = line if band is None else f"line: surround preference (control - MAD > noise band {band:.4f})"
        ax.scatter([], [], marker="_", s=80, color="k", lw=0.7, label=line)  # a collection: ax.lines stays the data
    largest = max(float(mad.max()), float(control.max()) if control is not None else 0.0)
    right = max(largest, draw_mad_references(ax, references, horizontal=False)) * 1.1
    if units == "unit":  # a fixed scale, so that panels of different cells compare at a glance
        ax.axvline(UNIFORM_MAD_8X8, color="grey", ls=":", lw=1)
        ax.text(UNIFORM_MAD_8X8, 0.02, " uniform", color="grey", fontsize=7, rotation=90, va="bottom")
        right = max(right, 0.6)
    ax.set(xlim=(0, right), xlabel=f"mean attention distance ({units})")
    ax.set(ylim=(-0.02, 1.02), ylabel="normalised entropy")
    set_title(ax, title, fontsize=10)
    if fig is None:  # a panel of a report figure: the figure gathers one legend below its panels
        ax.legend(fontsize=7, ncol=2, loc="lower right")
        return plain_tick_labels(ax.figure)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.14), borderaxespad=0)  # below the axes
    return plain_tick_labels(fig)


def central_query_maps(maps: torch.Tensor, layers: list[int], title: str) -> plt.Figure:
    """Each head's mean attention from the central query patch, as a g x g image; one row per layer."""
    heads = maps.shape[1]
    size = (1.3 * heads, 1.45 * len(layers) + 0.6)
    fig, axes = plt.subplots(len(layers), heads, figsize=size, squeeze=False, layout="constrained")
    centre = maps.shape[-1] // 2
    for row, layer in enumerate(layers):
        for head in range(heads):
            ax = axes[row, head]
            ax.imshow(maps[layer, head].detach().cpu().numpy(), cmap="magma", vmin=0)
            ax.scatter([centre], [centre], marker="+", color="cyan", s=30)
            ax.set(xticks=[], yticks=[])
            if row == 0:
                ax.set_title(f"head {head}", fontsize=8)
            if head == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=8)
    fig.suptitle(wrap_title(title, fig.get_figwidth(), 9), fontsize=9)
    return plain_tick_labels(fig)


def text_colour(rgba: tuple[float, ...]) -> str:
    """Black or white, whichever contrasts more with `rgba` (WCAG: black wins above luminance 0.179)."""
    red, green, blue = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3])  # linear
    luminance = 0.2126 * red + 0.7152 * green + 0.0722 * blue
    return "black" if luminance > 0.179 else "white"


def layer_head_heatmap(values: torch.Tensor, title: str, vmax: float | None = None) -> plt.Figure:
    """A (layers, heads) matrix as a heatmap with a colour bar and the values written in."""
    values = torch.as_tensor(values).detach().cpu().numpy()  # matplotlib wants numpy (a tensor warns under numpy 2)
    layers, heads = values.shape
    fig, ax = plt.subplots(figsize=(0.7 * heads + 2.0, 0.5 * layers + 1.2), layout="constrained")
    image = ax.imshow(values, cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
    for layer in range(layers):
        for head in range(heads):
            value = float(values[layer, head])
            colour = text_colour(image.cmap(image.norm(value)))
            ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=7, color=colour)
    ax.set(xticks=range(heads), yticks=range(layers), xlabel="head", ylabel="layer")
    fig.colorbar(image, ax=ax)
    set_title(ax, title, fontsize=9)
    return plain_tick_labels(fig)


def save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    plain_tick_labels(fig)
    fig.savefig(path, dpi=130, bbox_inches="tight")  # nothing drawn outside the figure is cut off
    plt.close(fig)
    return path
