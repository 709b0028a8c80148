"""References of known locality: the ViT attending uniformly (query and key projections zeroed) within each patch's
3 x 3 neighbourhood, or to the patch itself. On the 8 x 8 grid the neighbourhood gives 36 inner queries of 9 keys,
24 edge ones of 6 and 4 corners of 4: MAD (36 (4 + 4 sqrt 2) / 9 + 24 (3 + 2 sqrt 2) / 6 + 4 (2 + sqrt 2) / 4) / 64
= 1.0212 steps = 0.1277, entropy (36 ln 9 + 24 ln 6 + 4 ln 4) / (64 ln 64) = 0.480; the patch itself gives 0 and 0,
for every layer, head, image and width, with or without renormalisation (the CLS key is masked).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from vit_locality.attention.probe import ProbeResult, probe_attention
from vit_locality.attention.units import display_factor
from vit_locality.catalog import GRID_SIZE
from vit_locality.config.schema import StatsConfig
from vit_locality.model.vit import VisionTransformer

REFERENCES = {"3x3 neighbourhood": 1, "self only": 0}  # the figures' references: attention radius in patch steps
PROBE_IMAGES = 4  # the answer does not depend on the images; a few show that it does not
TINY = {"depth": 1, "dim": 8, "heads": 1, "mlp_ratio": 1.0}  # the figures' references: width changes nothing


@dataclass(frozen=True)
class Reference:
    """One reference's (layers, heads) tensors of MAD and normalised entropy, and their means."""

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


def reference_model(
    architecture: dict[str, Any], image_size: int, radius: int, num_classes: int = 10, seed: int = 0
) -> VisionTransformer:
    """The ViT of `architecture` attending uniformly within `radius` steps, built on a forked random stream."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = VisionTransformer(num_classes=num_classes, image_size=image_size, **architecture)
    model.restrict_attention(radius)
    with torch.no_grad():  # zero queries and keys (the qkv rows are [queries | keys | values]): every score is 0
        for block in model.blocks:
            width = block.attn.qkv.out_features // 3
            block.attn.qkv.weight[: 2 * width].zero_()
            block.attn.qkv.bias[: 2 * width].zero_()
    return model.eval()


def measure_reference(
    architecture: dict[str, Any],
    image_size: int,
    radius: int,
    settings: StatsConfig | None = None,
    num_images: int = PROBE_IMAGES,
    seed: int = 0,
) -> ProbeResult:
    """The project's probe with `settings` on the reference of `radius`, over random images."""
    model = reference_model(architecture, image_size, radius, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(num_images, 3, image_size, image_size, generator=generator)
    return probe_attention(model, images, settings or StatsConfig())


@functools.cache
def figure_references(
    units: str = "unit", patch_size: int | None = None, renormalize: bool = True
) -> tuple[Reference, ...]:
    """REFERENCES with their MAD in `units`, measured once per process; none for units that cannot be shown."""
    try:
        factor = display_factor(units, GRID_SIZE, patch_size)
    except ValueError:
        return ()
    settings = StatsConfig(probe_size=PROBE_IMAGES, batch_size=PROBE_IMAGES, renormalize=renormalize)
    found = []
    for label, radius in REFERENCES.items():
        stats = measure_reference(TINY, GRID_SIZE * 2, radius, settings).stats
        found.append(Reference(label, radius, stats["mad"] * factor, stats["entropy"]))
    return tuple(found)
