"""Run the probe set through the explicit fp32 attention path into per-head statistics (callback and `analyze`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from vit_locality.attention.metrics import MASS_KEYS, AttentionStatsAccumulator
from vit_locality.attention.units import display_factor
from vit_locality.config.schema import StatsConfig
from vit_locality.model.vit import VisionTransformer

# The stored column order: the headline statistics, then the locality masses and the control (docs/metrics.md).
STAT_KEYS = ("mad", "entropy", "cls_mass", "mad_std", "entropy_std", *MASS_KEYS, "mad_control", "surround_pref")


@dataclass
class ProbeResult:
    """Per-head statistics, each (layers, heads) (distances on the unit square), and the central query's maps."""

    stats: dict[str, torch.Tensor]
    central_maps: torch.Tensor  # (layers, heads, g, g): mean attention of the central patch query over patches
    num_images: int
    early_layers: int
    settings: StatsConfig = field(default_factory=StatsConfig)  # how it was measured; `units` how it is shown
    patch_size: int | None = None  # pixels per patch side: a figure in pixel units needs it for its references

    @property
    def depth(self) -> int:
        return int(self.stats["mad"].shape[0])

    @property
    def heads(self) -> int:
        return int(self.stats["mad"].shape[1])

    @property
    def grid_size(self) -> int:
        return int(self.central_maps.shape[-1])

    def display_factor(self) -> float:
        """What a stored distance of this result is multiplied by to show in `settings.units`."""
        return display_factor(self.settings.units, self.grid_size, self.patch_size)

    def min_mad_early(self) -> float:
        """The paper's locality figure: the minimum MAD over the heads of the first `early_layers` layers."""
        return float(self.stats["mad"][: self.early_layers].min())

    def mean_entropy_early(self) -> float:
        return float(self.stats["entropy"][: self.early_layers].mean())

    def headline(self) -> dict[str, float]:
        return {"min_mad_early": self.min_mad_early(), "mean_entropy_early": self.mean_entropy_early()}

    def min_mad_head(self) -> tuple[int, int]:
        """(layer, head) of the minimum MAD over the early layers (the first in layer-major order on a tie)."""
        early = self.stats["mad"][: self.early_layers]
        return divmod(int(early.flatten().argmin()), early.shape[1])

    def mad_range(self) -> torch.Tensor:
        """(layers,) max - min of MAD over each layer's heads: a minimum over heads falls as this spread grows."""
        mad = self.stats["mad"]
        return mad.amax(dim=1) - mad.amin(dim=1)

    def per_layer(self) -> list[dict[str, float]]:
        rows = []
        spread = self.mad_range()
        for layer in range(self.depth):
            row: dict[str, float] = {"layer": layer}
            for key in ("mad", "entropy"):
                values = self.stats[key][layer]
                for reduction in ("min", "mean", "max"):
                    row[f"{key}_{reduction}"] = float(getattr(values, reduction)())
            row["mad_range"] = float(spread[layer])
            rows.append(row)
        return rows


@torch.no_grad()
def probe_attention(model: VisionTransformer, images: torch.Tensor, settings: StatsConfig) -> ProbeResult:
    """Statistics of normalised `images` (N, 3, H, W) on the model's device; eval mode (restored) and autocast off."""
    was_training = model.training
    model.eval()
    grid = model.grid_size
    accumulators = [AttentionStatsAccumulator(settings.renormalize) for _ in model.blocks]
    centre = 1 + (grid // 2) * grid + grid // 2  # the query at row g // 2, column g // 2, after the CLS token
    central_sum = torch.zeros(len(model.blocks), model.blocks[0].attn.heads, grid * grid, device=images.device)
    try:
        with torch.autocast(device_type=images.device.type, enabled=False):
            for chunk in images.split(settings.batch_size):
                _, maps = model.forward_with_attention(chunk.float())
                for layer, attn in enumerate(maps):
                    accumulators[layer].update(attn)
                    central_sum[layer] += attn[:, :, centre, 1:].sum(dim=0)
    finally:
        model.train(was_training)
    computed = [acc.compute() for acc in accumulators]
    # To the host in one copy each (on a GPU every copy waits for the device): the statistics, the central maps.
    stacked = torch.stack([torch.stack([c[key] for c in computed]) for key in STAT_KEYS]).cpu()
    stats = dict(zip(STAT_KEYS, stacked.unbind(), strict=True))
    central = (central_sum.cpu() / len(images)).view(len(model.blocks), -1, grid, grid)
    early = min(settings.early_layers, len(model.blocks))
    return ProbeResult(stats, central, len(images), early, settings, model.patch_size)
