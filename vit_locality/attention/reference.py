"""References whose locality is known by construction: the study's ViT with its attention restricted to each patch's
3 x 3 neighbourhood, or to the patch itself, measured by the project's own probe.

A restricted but otherwise random or trained model is not uniform inside its neighbourhood, so its MAD would depend
on its weights. The reference also zeroes the query and key projections: every score is 0, and each patch query
spreads its weight evenly over the patches it may see. Its answer is then plain arithmetic, the same for every
layer, head, image and width. On the 8 x 8 grid, in the unit convention (one step = 1/8), a 3 x 3 neighbourhood
clipped at the border gives

    36 inner queries (9 keys):   (4 * 1 + 4 * sqrt 2) / 9 steps
    24 edge queries  (6 keys):   (3 * 1 + 2 * sqrt 2) / 6 steps
     4 corner queries (4 keys):  (2 * 1 + 1 * sqrt 2) / 4 steps

a mean of 1.0212 steps = 0.1277 (0.128), entropy (36 ln 9 + 24 ln 6 + 4 ln 4) / (64 ln 64) = 0.480; the patch itself
gives 0 and 0. Patch queries never attend to the CLS token in a reference, so the values are the same with and
without the probe's renormalisation.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import torch

from vit_locality.attention.probe import ProbeResult, probe_attention
from vit_locality.attention.units import display_factor
from vit_locality.catalog import GRID_SIZE
from vit_locality.config.schema import StatsConfig
from vit_locality.model.vit import VisionTransformer

# The references drawn on the figures, by label: the attention radius in patch steps (Chebyshev distance).
REFERENCES = {"3x3 neighbourhood": 1, "self only": 0}
PROBE_IMAGES = 4  # the answer does not depend on the images; a few show that it does not
TINY = {"depth": 1, "dim": 8, "heads": 1, "mlp_ratio": 1.0}  # the figures' references: width changes nothing


@dataclass(frozen=True)
class Reference:
    """One reference's probe statistics: (layers, heads) tensors of MAD and normalised entropy, and their means."""

    label: str
    radius: int
    mad: torch.Tensor
    entropy: torch.Tensor

    @property
    def mad_value(self) -> float:
        return float(self.mad.mean())

    @property
    def entropy_value(self) -> float:
        return float(self.entropy.mean())

    def legend(self) -> str:
        """'3x3 neighbourhood (0.128)': the label and its MAD as the figures print it."""
        return f"{self.label} ({plain_number(self.mad_value)})"


def plain_number(value: float, digits: int = 3) -> str:
    """`value` to `digits` decimals without trailing zeros: 0.128, 0, 1.021."""
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def zero_query_key(model: VisionTransformer) -> None:
    """Zero every layer's query and key projections (weights and biases), so every attention score is 0 and the
    softmax is uniform over what the mask allows. The qkv rows are [queries | keys | values]."""
    with torch.no_grad():
        for block in model.blocks:
            width = block.attn.qkv.out_features // 3
            block.attn.qkv.weight[: 2 * width].zero_()
            block.attn.qkv.bias[: 2 * width].zero_()


def reference_model(
    architecture: dict[str, Any], image_size: int, radius: int, num_classes: int = 10, seed: int = 0
) -> VisionTransformer:
    """The study's model of `architecture` (the ViT's keyword arguments), attention restricted to `radius` steps and
    made uniform inside. Built on a forked random stream: drawing a figure during training leaves the run's own stream
    untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = VisionTransformer(num_classes=num_classes, image_size=image_size, **architecture)
    model.restrict_attention(radius)
    zero_query_key(model)
    return model.eval()


def measure_reference(
    architecture: dict[str, Any],
    image_size: int,
    radius: int,
    settings: StatsConfig | None = None,
    num_images: int = PROBE_IMAGES,
    seed: int = 0,
) -> ProbeResult:
    """The project's probe, with the run's own `settings` (renormalisation), on the reference of `radius` over random
    images: per-layer and per-head MAD (unit square, as the runs store it) and entropy."""
    settings = settings or StatsConfig()
    model = reference_model(architecture, image_size, radius, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(num_images, 3, image_size, image_size, generator=generator)
    return probe_attention(model, images, settings)


def measure_references(
    architecture: dict[str, Any], image_size: int, settings: StatsConfig | None = None
) -> dict[str, Reference]:
    """Every reference of REFERENCES for the model of `architecture`, keyed by label."""
    found = {}
    for label, radius in REFERENCES.items():
        result = measure_reference(architecture, image_size, radius, settings)
        found[label] = Reference(label, radius, result.stats["mad"], result.stats["entropy"])
    return found


@functools.cache
def figure_references(
    units: str = "unit", patch_size: int | None = None, renormalize: bool = True
) -> tuple[Reference, ...]:
    """The references a figure in `units` draws, measured once per process on a one-layer model (the value is the
    same for every depth, width and head) and shown in `units` (attention/units.py). Units the project does not
    know, or pixels without the runs' `patch_size`, give none: a figure then shows no reference rather than one in
    the wrong units."""
    try:
        factor = display_factor(units, GRID_SIZE, patch_size)
    except ValueError:
        return ()
    settings = StatsConfig(probe_size=PROBE_IMAGES, batch_size=PROBE_IMAGES, renormalize=renormalize)
    measured = measure_references(TINY, GRID_SIZE * 2, settings).values()
    return tuple(replace(ref, mad=ref.mad * factor) for ref in measured)
