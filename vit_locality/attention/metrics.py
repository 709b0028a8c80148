"""Per-head attention statistics: Mean Attention Distance (MAD), normalised entropy and CLS mass.

The definitions, reductions and hand-computed reference values are in docs/metrics.md. Input is attention
probabilities of shape (B, heads, T, T) with T = 1 + g * g: the CLS token first, then the patches in row-major
order on the g x g grid. Only patch queries count; the CLS query's row is ignored.

For each patch query the weights over the g * g patch keys are renormalised to sum 1 (``renormalize=True``,
the default; the CLS key's share is reported apart as ``cls_mass``), or used as they are
(``renormalize=False``, the probing-vits convention). Then

    MAD(k)      = sum_l a(k, l) d(k, l)
    entropy(k)  = -sum_l a(k, l) log a(k, l) / log(g * g)        (0 log 0 = 0)
    cls_mass(k) = share of the raw row on the CLS key
    self_mass(k), neighbour_mass(k), far_mass(k)
                = sum of a(k, l) over l = k, over the (up to 8) patches one step away (diagonals included),
                  and over every other patch: a MAD near 0 read as "itself" or "a small neighbourhood"

A head's value is the mean over every patch query and every image; ``mad_std`` and ``entropy_std`` are the
population spread of the per-image means over the images.

A low MAD has two causes: a preference for the query's surroundings, or attention concentrated on a few patches
whatever the query. The control separates them: every query is given the head's query-averaged row
abar(l) = mean over queries (and images) of a(k, l), so

    mad_control   = mean_k sum_l abar(l) d(k, l) = sum_l abar(l) D(l),  D(l) = mean_k d(k, l)
    surround_pref = mad_control - MAD

is 0 for a head whose rows are all alike (uniform, or one fixed salient patch) and positive when the head looks
nearer to each query than its overall choice of patches does. mad_control is linear in abar, so the mean of the
per-image controls is the control of the image-averaged row.

Distances are fractions of the image side (the unit square, one patch step = 1 / g), the one convention the
project stores; `attention.units.to_display` turns them into patch steps, pixels or diagonal fractions for showing.

Everything is computed in float32 (float64 if the input is float64), whatever the input dtype, so bf16 or
fp16 attention maps give the fp32 answer to within their own rounding.

Imports torch alone, so the statistics can be used and tested without Lightning or Hydra.
"""

from __future__ import annotations

import math

import torch

from vit_locality.attention.units import UNITS, display_factor

__all__ = [
    "UNITS",
    "AttentionStatsAccumulator",
    "attention_entropy",
    "attention_summary",
    "cls_mass",
    "cross_border_mass",
    "locality_masses",
    "mad_control",
    "mean_attention_distance",
    "neighbourhood_masks",
    "patch_distance_matrix",
]


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else (bf16, fp16, fp32) is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def patch_distance_matrix(
    grid_size: int,
    units: str = "unit",
    patch_size: float | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(g*g, g*g) Euclidean distances between patch centres, patches in row-major order.

    units="unit": centres ((c + 0.5) / g, (r + 0.5) / g) in the unit square, so one patch step is 1 / g;
    units="grid": one patch step is 1; units="pixels": one patch step is ``patch_size`` pixels;
    units="diagonal": the unit square's values over its diagonal sqrt(2), the other way a paper may normalise
    (one patch step is 1 / (g sqrt 2)).
    ``patch_size`` is only used with units="pixels".
    """
    scale = display_factor(units, grid_size, patch_size) / grid_size  # patch steps -> unit square -> `units`
    # Built in float64 so the cast to the requested dtype is the only rounding.
    idx = torch.arange(grid_size * grid_size, device=device)
    rows = torch.div(idx, grid_size, rounding_mode="floor").to(torch.float64)
    cols = (idx % grid_size).to(torch.float64)
    dr = rows[:, None] - rows[None, :]
    dc = cols[:, None] - cols[None, :]
    dist = torch.sqrt(dr * dr + dc * dc)  # in patch steps; exactly 0 on the diagonal
    return (dist * scale).to(dtype)


def neighbourhood_masks(grid_size: int, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(self, neighbour) boolean (g*g, g*g) masks: the diagonal, and the patches at most one step away in row and
    column (the 8-neighbourhood, clipped at the border) without the diagonal. The rest of a row is "far"."""
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
    rows = attn[:, :, 1:, :].to(_compute_dtype(attn.dtype))
    return rows[..., 0], rows[..., 1:], g


def _renormalizer(weights: torch.Tensor, renormalize: bool) -> torch.Tensor | None:
    """Each query's total weight on the patch keys (B, H, N), what renormalisation divides by; None for raw
    weights. Computed once and shared by MAD and entropy."""
    return weights.sum(dim=-1) if renormalize else None


def _mad_per_image(weights: torch.Tensor, g: int, mass: torch.Tensor | None) -> torch.Tensor:
    """(B, H) means over the queries of sum_l a(k, l) d(k, l). Renormalisation divides each query's sum by its
    patch mass (linear), so the (B, H, N, N) renormalised weights are never materialised: the probe pass stays
    cheap."""
    dist = patch_distance_matrix(g, device=weights.device, dtype=weights.dtype)
    mad = torch.einsum("bhqk,qk->bhq", weights, dist)
    if mass is not None:
        # A row with no patch mass at all gives 0, not NaN.
        mad = torch.where(mass > 0, mad / mass.clamp_min(torch.finfo(mad.dtype).tiny), 0.0)
    return mad.mean(dim=-1)


def _mad_control_per_image(weights: torch.Tensor, g: int, mass: torch.Tensor | None) -> torch.Tensor:
    """(B, H) MAD of the query-independent attention: each image's query-averaged (renormalised) row abar(l) given to
    every query, i.e. sum_l abar(l) D(l) with D(l) the mean distance from patch l to the queries. A row with no
    patch mass adds nothing to abar, as it adds 0 to MAD."""
    dist = patch_distance_matrix(g, device=weights.device, dtype=weights.dtype)
    if mass is None:
        mean_row = weights.mean(dim=-2)
    else:
        inverse = torch.where(mass > 0, 1.0 / mass.clamp_min(torch.finfo(weights.dtype).tiny), 0.0)
        mean_row = torch.einsum("bhqk,bhq->bhk", weights, inverse) / weights.shape[-2]
    return mean_row @ dist.mean(dim=0)


def _entropy_per_image(weights: torch.Tensor, mass: torch.Tensor | None) -> torch.Tensor:
    """(B, H) means over the queries of -sum_l a log a / log(N). For renormalised rows a = w / t, and
    -sum (w/t) log(w/t) = (-sum w log w) / t + log t, which needs one pass over the weights instead of three."""
    num_keys = weights.shape[-1]
    if num_keys == 1:  # a single key carries no uncertainty; avoids dividing by log 1 = 0
        return torch.zeros(weights.shape[:-2], dtype=weights.dtype, device=weights.device)
    # xlogy gives 0 * log 0 = 0 exactly, so one-hot rows are safe.
    raw = -torch.special.xlogy(weights, weights).sum(dim=-1)
    if mass is not None:
        safe = mass.clamp_min(torch.finfo(raw.dtype).tiny)
        raw = torch.where(mass > 0, raw / safe + torch.log(safe), 0.0)
    return (raw / math.log(num_keys)).mean(dim=-1)


def _masses_per_image(weights: torch.Tensor, g: int, mass: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """(B, H) means over the queries of the (renormalised) weight on the query itself, its neighbours, the rest."""
    own, near = neighbourhood_masks(g, device=weights.device)
    on_self = torch.diagonal(weights, dim1=-2, dim2=-1)
    on_near = (weights * near.to(weights.dtype)).sum(dim=-1)
    total = weights.sum(dim=-1)
    shares = {"self_mass": on_self, "neighbour_mass": on_near, "far_mass": (total - on_self - on_near).clamp_min(0)}
    if mass is not None:
        safe = mass.clamp_min(torch.finfo(weights.dtype).tiny)
        shares = {key: torch.where(mass > 0, value / safe, 0.0) for key, value in shares.items()}
    return {key: value.mean(dim=-1) for key, value in shares.items()}


def locality_masses(attn: torch.Tensor, renormalize: bool = True) -> dict[str, torch.Tensor]:
    """Per head (heads,): the patch-key weight on the query's own patch, its 8 neighbours and the rest.

    With renormalisation the three sum to 1 per head; with raw weights to 1 - cls_mass."""
    _, weights, g = _patch_rows(attn)
    return {
        key: value.mean(dim=0)
        for key, value in _masses_per_image(weights, g, _renormalizer(weights, renormalize)).items()
    }


def cross_border_mass(attn: torch.Tensor, inside: torch.Tensor, renormalize: bool = True) -> torch.Tensor:
    """Per head (heads,), for a set of patches `inside` (a (g*g,) boolean mask, e.g. a pasted CutMix box): over
    the patch queries inside it and the images, the mean share of the query's patch-key attention on patches
    outside it (renormalised over the patch keys, as MAD is). Attention across a pasted box's border mixes two
    images' evidence."""
    _, weights, g = _patch_rows(attn)
    if inside.shape != (g * g,):
        raise ValueError(f"the box mask has shape {tuple(inside.shape)}, not ({g * g},) for the {g} x {g} grid")
    inside = inside.to(weights.device)
    rows = weights[:, :, inside, :]
    outside = rows[..., ~inside].sum(dim=-1)
    mass = _renormalizer(rows, renormalize)
    if mass is not None:
        outside = torch.where(mass > 0, outside / mass.clamp_min(torch.finfo(outside.dtype).tiny), 0.0)
    return outside.mean(dim=(0, 2))


def mean_attention_distance(attn: torch.Tensor, renormalize: bool = True) -> torch.Tensor:
    """Mean Attention Distance per head on the unit square, (heads,)."""
    _, weights, g = _patch_rows(attn)
    return _mad_per_image(weights, g, _renormalizer(weights, renormalize)).mean(dim=0)


def mad_control(attn: torch.Tensor, renormalize: bool = True) -> torch.Tensor:
    """MAD each head would have if every query used the head's query-averaged weights, (heads,)."""
    _, weights, g = _patch_rows(attn)
    return _mad_control_per_image(weights, g, _renormalizer(weights, renormalize)).mean(dim=0)


def attention_entropy(attn: torch.Tensor, renormalize: bool = True) -> torch.Tensor:
    """Entropy over the patch keys divided by log(g*g) per head, (heads,): 1 for uniform, 0 for one key."""
    _, weights, _ = _patch_rows(attn)
    return _entropy_per_image(weights, _renormalizer(weights, renormalize)).mean(dim=0)


def cls_mass(attn: torch.Tensor) -> torch.Tensor:
    """Share of each patch query's raw attention on the CLS key, mean per head, (heads,)."""
    return _patch_rows(attn)[0].mean(dim=-1).mean(dim=0)


def _per_image(attn: torch.Tensor, renormalize: bool) -> dict[str, torch.Tensor]:
    """Per-image means over the patch queries, {"mad", "entropy", "cls_mass", "self_mass", "neighbour_mass",
    "far_mass", "mad_control"} each (B, heads)."""
    cls, weights, g = _patch_rows(attn)
    mass = _renormalizer(weights, renormalize)
    return {
        "mad": _mad_per_image(weights, g, mass),
        "mad_control": _mad_control_per_image(weights, g, mass),
        "entropy": _entropy_per_image(weights, mass),
        "cls_mass": cls.mean(dim=-1),
        **_masses_per_image(weights, g, mass),
    }


def _summarize(per_image: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-head means over images, the control's difference from MAD, and the spread of MAD and entropy over images,
    each (heads,).

    Every image has the same number of patch queries, so the mean of the per-image means is the mean over all
    queries. The spread is the population standard deviation (correction 0), so one image gives 0, not NaN.
    """
    summary = {key: value.mean(dim=0) for key, value in per_image.items()}
    summary["surround_pref"] = summary["mad_control"] - summary["mad"]
    summary["mad_std"] = per_image["mad"].std(dim=0, correction=0)
    summary["entropy_std"] = per_image["entropy"].std(dim=0, correction=0)
    return summary


def attention_summary(attn: torch.Tensor, renormalize: bool = True) -> dict[str, torch.Tensor]:
    """One call per layer: {"mad", "entropy", "cls_mass", "self_mass", "neighbour_mass", "far_mass", "mad_control",
    "surround_pref", "mad_std", "entropy_std"}, each (heads,); distances on the unit square."""
    return _summarize(_per_image(attn, renormalize))


class AttentionStatsAccumulator:
    """Collects per-image statistics of one layer over probe batches; ``compute`` equals one-shot
    ``attention_summary`` on the concatenated batch. Use one accumulator per layer.

    Per-image values are (B, heads) and small, so they are kept (detached) and concatenated rather than
    folded into running sums: exact, and the same std as the one-shot call.
    """

    def __init__(self, renormalize: bool = True) -> None:
        self.renormalize = renormalize
        self._chunks: list[dict[str, torch.Tensor]] = []

    @torch.no_grad()
    def update(self, attn: torch.Tensor) -> None:
        """Add one batch of attention probabilities (B, heads, T, T)."""
        self._chunks.append(_per_image(attn.detach(), self.renormalize))

    def compute(self) -> dict[str, torch.Tensor]:
        """Same keys and shapes as ``attention_summary``, over every image seen so far."""
        if not self._chunks:
            raise RuntimeError("AttentionStatsAccumulator.compute() called before any update()")
        return _summarize({key: torch.cat([chunk[key] for chunk in self._chunks]) for key in self._chunks[0]})
