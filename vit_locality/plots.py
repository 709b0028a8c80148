"""Pictures of the attention statistics, saved as PNG (matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

UNIFORM_MAD_8X8 = 0.5171  # MAD of uniform attention over the 8 x 8 grid, in unit-square distance


def layer_colours(depth: int) -> list:
    cmap = plt.get_cmap("viridis")
    return [cmap(i / max(1, depth - 1)) for i in range(depth)]


def mad_entropy_plane(
    mad: torch.Tensor, entropy: torch.Tensor, title: str, ax: plt.Axes | None = None, units: str = "unit"
) -> plt.Figure:
    """Every head as a point (MAD, entropy), one colour per layer; (layers, heads) inputs."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 4.5))
    for layer, colour in enumerate(layer_colours(mad.shape[0])):
        ax.scatter(mad[layer], entropy[layer], color=colour, s=28, label=f"layer {layer}", edgecolor="k", lw=0.3)
    right = float(mad.max()) * 1.1
    if units == "unit":  # a fixed scale, so that panels of different cells compare at a glance
        ax.axvline(UNIFORM_MAD_8X8, color="grey", ls=":", lw=1)
        ax.text(UNIFORM_MAD_8X8, 0.02, " uniform", color="grey", fontsize=7, rotation=90, va="bottom")
        right = max(right, 0.6)
    ax.set_xlim(0, right)
    ax.set_xlabel(f"mean attention distance ({units})")
    ax.set_ylabel("normalised entropy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    return fig if fig is not None else ax.figure


def central_query_maps(maps: torch.Tensor, layers: list[int], title: str) -> plt.Figure:
    """Each head's mean attention from the central query patch, as a g x g image; one row per layer."""
    heads = maps.shape[1]
    fig, axes = plt.subplots(len(layers), heads, figsize=(1.3 * heads, 1.45 * len(layers) + 0.4), squeeze=False)
    grid = maps.shape[-1]
    centre = (grid // 2, grid // 2)
    for row, layer in enumerate(layers):
        for head in range(heads):
            ax = axes[row, head]
            ax.imshow(maps[layer, head], cmap="magma", vmin=0)
            ax.scatter([centre[1]], [centre[0]], marker="+", color="cyan", s=30)
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(f"head {head}", fontsize=8)
            if head == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def layer_head_heatmap(values: torch.Tensor, title: str, vmax: float | None = None) -> plt.Figure:
    """A (layers, heads) matrix as a heatmap with the values written in."""
    fig, ax = plt.subplots(figsize=(0.6 * values.shape[1] + 1.5, 0.45 * values.shape[0] + 1))
    image = ax.imshow(values, cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
    for (layer, head), value in zip(
        torch.cartesian_prod(torch.arange(values.shape[0]), torch.arange(values.shape[1])).tolist(),
        values.flatten().tolist(),
        strict=True,
    ):
        ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=6, color="w")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
