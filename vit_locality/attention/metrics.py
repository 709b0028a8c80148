"""Per-head attention statistics, defined in docs/metrics.md: input (B, heads, T, T), T = 1 + g * g (the CLS token,
then the patches row-major); only patch queries count. float32 (float64 for float64 input); imports torch alone."""

from __future__ import annotations

import math

import torch

from vit_locality.attention.units import display_factor

MASS_KEYS = ("self_mass", "neighbour_mass", "far_mass")


def patch_distance_matrix(
    grid_size: int,
    units: str = "unit",
    patch_size: float | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(g*g, g*g) Euclidean distances between patch centres in `units` (attention/units.py); row-major patches."""
    scale = display_factor(units, grid_size, patch_size) / grid_size  # patch steps -> unit square -> `units`
    idx = torch.arange(grid_size * grid_size, device=device)  # in float64 below: the final cast is the only rounding
    rows = torch.div(idx, grid_size, rounding_mode="floor").to(torch.float64)
    cols = (idx % grid_size).to(torch.float64)
    dr = rows[:, None] - rows[None, :]
    dc = cols[:, None] - cols[None, :]
    return (torch.sqrt(dr * dr + dc * dc) * scale).to(dtype)


def neighbourhood_masks(grid_size: int, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(self, neighbour) boolean (g*g, g*g) masks: the diagonal, and the 8-neighbourhood without it."""
    steps = patch_distance_matrix(grid_size, "grid", device=device, dtype=torch.float64)
    own = steps == 0
    return own, (steps < 1.5) & ~own  # sqrt(2) = 1.414 is the farthest neighbour, 2 the nearest non-neighbour


def _patch_rows(attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Split the patch-query rows into (CLS-key weight (B, H, N), patch-key weights (B, H, N, N), g)."""
    if attn.dim() != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attention must have shape (B, heads, T, T), got {tuple(attn.shape)}")
    num_patches = attn.shape[-1] - 1
    g = math.isqrt(num_patches) if num_patches > 0 else 0
    if g < 1 or g * g != num_patches:
        raise ValueError(
            f"{attn.shape[-1]} tokens minus the CLS token leave {num_patches} patches, "
            "which is not a positive perfect square"
        )
    rows = attn[:, :, 1:, :].to(torch.float64 if attn.dtype == torch.float64 else torch.float32)
    return rows[..., 0], rows[..., 1:], g


def _per_mass(value: torch.Tensor, mass: torch.Tensor | None) -> torch.Tensor:
    """`value` divided by each query's patch mass; 0 (not NaN) for a row without any, unchanged for raw weights."""
    if mass is None:
        return value
    return torch.where(mass > 0, value / mass.clamp_min(torch.finfo(value.dtype).tiny), 0.0)


def _entropy_per_image(weights: torch.Tensor, mass: torch.Tensor | None) -> torch.Tensor:
    """(B, H) query means of -sum a log a / log N; for a = w / t: (-sum w log w) / t + log t, in one pass."""
    num_keys = weights.shape[-1]
    if num_keys == 1:  # a single key carries no uncertainty; avoids dividing by log 1 = 0
        return torch.zeros(weights.shape[:-2], dtype=weights.dtype, device=weights.device)
    raw = -torch.special.xlogy(weights, weights).sum(dim=-1)  # 0 log 0 = 0 exactly
    if mass is not None:
        safe = mass.clamp_min(torch.finfo(raw.dtype).tiny)
        raw = torch.where(mass > 0, raw / safe + torch.log(safe), 0.0)
    return (raw / math.log(num_keys)).mean(dim=-1)


def _per_image(attn: torch.Tensor, renormalize: bool) -> dict[str, torch.Tensor]:
    """Every statistic as per-image means over the patch queries, each (B, heads)."""
    cls, weights, g = _patch_rows(attn)
    mass = weights.sum(dim=-1) if renormalize else None
    dist = patch_distance_matrix(g, device=weights.device, dtype=weights.dtype)
    if mass is None:
        mean_row = weights.mean(dim=-2)
    else:  # abar(l): a row without patch mass adds nothing to it
        inverse = torch.where(mass > 0, 1.0 / mass.clamp_min(torch.finfo(weights.dtype).tiny), 0.0)
        mean_row = torch.einsum("bhqk,bhq->bhk", weights, inverse) / weights.shape[-2]
    _, near = neighbourhood_masks(g, device=weights.device)
    on_self = torch.diagonal(weights, dim1=-2, dim2=-1)
    on_near = (weights * near.to(weights.dtype)).sum(dim=-1)
    shares = (on_self, on_near, (weights.sum(dim=-1) - on_self - on_near).clamp_min(0))
    return {
        "mad": _per_mass(torch.einsum("bhqk,qk->bhq", weights, dist), mass).mean(dim=-1),  # sums divided, not weights
        "mad_control": mean_row @ dist.mean(dim=0),
        "entropy": _entropy_per_image(weights, mass),
        "cls_mass": cls.mean(dim=-1),
        **{key: _per_mass(share, mass).mean(dim=-1) for key, share in zip(MASS_KEYS, shares, strict=True)},
    }


def locality_masses(attn: torch.Tensor, renormalize: bool = True) -> dict[str, torch.Tensor]:
    """Per head (heads,): the weight on the query's own patch, its 8 neighbours and the rest (sum 1 renormalised)."""
    per_image = _per_image(attn, renormalize)
    return {key: per_image[key].mean(dim=0) for key in MASS_KEYS}


def cross_border_mass(attn: torch.Tensor, inside: torch.Tensor, renormalize: bool = True) -> torch.Tensor:
    """Per head (heads,): the mean share of the attention of queries `inside` a (g*g,) mask that lands outside it."""
    _, weights, g = _patch_rows(attn)
    if inside.shape != (g * g,):
        raise ValueError(f"the box mask has shape {tuple(inside.shape)}, not ({g * g},) for the {g} x {g} grid")
    inside = inside.to(weights.device)
    rows = weights[:, :, inside, :]
    outside = _per_mass(rows[..., ~inside].sum(dim=-1), rows.sum(dim=-1) if renormalize else None)
    return outside.mean(dim=(0, 2))


def mean_attention_distance(attn: torch.Tensor, renormalize: bool = True) -> torch.Tensor:
    """Mean Attention Distance per head on the unit square, (heads,)."""
    return _per_image(attn, renormalize)["mad"].mean(dim=0)


def mad_control(attn: torch.Tensor, renormalize: bool = True) -> torch.Tensor:
    """MAD each head would have if every query used the head's query-averaged weights, (heads,)."""
    return _per_image(attn, renormalize)["mad_control"].mean(dim=0)


def attention_entropy(attn: torch.Tensor, renormalize: bool = True) -> torch.Tensor:
    """Entropy over the patch keys divided by log(g*g) per head, (heads,): 1 for uniform, 0 for one key."""
    return _per_image(attn, renormalize)["entropy"].mean(dim=0)


def cls_mass(attn: torch.Tensor) -> torch.Tensor:
    """Share of each patch query's raw attention on the CLS key, mean per head, (heads,)."""
    return _patch_rows(attn)[0].mean(dim=-1).mean(dim=0)


def _summarize(per_image: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-head means over images, surround_pref, and the population std (one image: 0) of MAD and entropy."""
    summary = {key: value.mean(dim=0) for key, value in per_image.items()}
    summary["surround_pref"] = summary["mad_control"] - summary["mad"]
    summary["mad_std"] = per_image["mad"].std(dim=0, correction=0)
    summary["entropy_std"] = per_image["entropy"].std(dim=0, correction=0)
    return summary


def attention_summary(attn: torch.Tensor, renormalize: bool = True) -> dict[str, torch.Tensor]:
    """One layer's statistics, each (heads,): every key of `_per_image`, surround_pref, mad_std, entropy_std."""
    return _summarize(_per_image(attn, renormalize))


class AttentionStatsAccumulator:
    """One layer's per-image statistics over batches: `compute` is `attention_summary` of them all at once."""

    def __init__(self, renormalize: bool = True) -> None:
        self.renormalize = renormalize
        self._chunks: list[dict[str, torch.Tensor]] = []

    @torch.no_grad()
    def update(self, attn: torch.Tensor) -> None:
        """Add one batch of attention probabilities (B, heads, T, T)."""
        self._chunks.append(_per_image(attn.detach(), self.renormalize))

    def compute(self) -> dict[str, torch.Tensor]:
        if not self._chunks:
            raise RuntimeError("AttentionStatsAccumulator.compute() called before any update()")
        return _summarize({key: torch.cat([chunk[key] for chunk in self._chunks]) for key in self._chunks[0]})
