"""Per-head attention statistics: Mean Attention Distance (MAD), normalised entropy and CLS mass.

Definitions are those of DESIGN.md, "Attention statistics". Input is attention probabilities of shape
(B, heads, T, T) with T = num_prefix_tokens + g * g: the prefix tokens (CLS, registers) first, then the
patches in row-major order on the g x g grid. Only patch queries count; prefix-token queries are ignored.

For each patch query the weights over the g * g patch keys are renormalised to sum 1 (``renormalize=True``,
the default; the prefix keys' share is reported apart as ``cls_mass``), or used as they are
(``renormalize=False``, the probing-vits convention). Then

    MAD(k)     = sum_l a(k, l) d(k, l)
    entropy(k) = -sum_l a(k, l) log a(k, l) / log(g * g)        (0 log 0 = 0)
    cls_mass(k) = share of the raw row on the prefix keys

A head's value is the mean over every patch query and every image.

Reductions (``reduce``): ``"mean"`` -> (heads,), the mean over images and queries; ``"none"`` -> (B, heads),
per-image means over the queries, so callers can take the spread over images or concatenate batches;
``"query"`` -> (B, heads, g * g), the per-query values. Since every image has the same number of patch
queries, the mean of the per-image values equals the ``"mean"`` reduction, so batched probe sets can be
handled by concatenating ``"none"`` outputs, or by :class:`AttentionStatsAccumulator`.

Everything is computed in float32 (float64 if the input is float64), whatever the input dtype, so bf16 or
fp16 attention maps give the fp32 answer to within their own rounding.

Imports torch alone (DESIGN.md: vit_locality.metrics has no Lightning or Hydra).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "UNITS",
    "REDUCTIONS",
    "AttentionStatsAccumulator",
    "attention_entropy",
    "attention_per_image",
    "attention_summary",
    "cls_mass",
    "infer_grid_size",
    "mean_attention_distance",
    "patch_distance_matrix",
    "summarize_per_image",
]

UNITS = ("unit", "grid", "pixels")
REDUCTIONS = ("mean", "none", "query")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else (bf16, fp16, fp32) is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_units(units: str, patch_size: float | None) -> None:
    if units not in UNITS:
        raise ValueError(f"units must be one of {UNITS}, got {units!r}")
    if units == "pixels" and (patch_size is None or patch_size <= 0):
        raise ValueError(f"units='pixels' needs a positive patch_size (pixels per patch), got {patch_size!r}")


def _check_reduce(reduce: str) -> None:
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")


def infer_grid_size(num_tokens: int, num_prefix_tokens: int = 1) -> int:
    """Side g of the patch grid from the token count T = num_prefix_tokens + g * g."""
    if num_prefix_tokens < 0:
        raise ValueError(f"num_prefix_tokens must be >= 0, got {num_prefix_tokens}")
    num_patches = num_tokens - num_prefix_tokens
    g = math.isqrt(num_patches) if num_patches > 0 else 0
    if g < 1 or g * g != num_patches:
        raise ValueError(
            f"cannot infer the patch grid: {num_tokens} tokens minus {num_prefix_tokens} prefix token(s) "
            f"leaves {num_patches} patches, which is not a positive perfect square; "
            "check num_prefix_tokens or pass grid_size"
        )
    return g


def patch_distance_matrix(
    grid_size: int,
    units: str = "unit",
    patch_size: float | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(g*g, g*g) Euclidean distances between patch centres, patches in row-major order.

    units="unit": centres ((c + 0.5) / g, (r + 0.5) / g) in the unit square, so one patch step is 1 / g;
    units="grid": one patch step is 1; units="pixels": one patch step is ``patch_size`` pixels.
    ``patch_size`` is only used with units="pixels".
    """
    _check_units(units, patch_size)
    if not isinstance(grid_size, int) or grid_size < 1:
        raise ValueError(f"grid_size must be a positive int, got {grid_size!r}")
    # Built in float64 so the cast to the requested dtype is the only rounding.
    idx = torch.arange(grid_size * grid_size, device=device)
    rows = torch.div(idx, grid_size, rounding_mode="floor").to(torch.float64)
    cols = (idx % grid_size).to(torch.float64)
    dr = rows[:, None] - rows[None, :]
    dc = cols[:, None] - cols[None, :]
    dist = torch.sqrt(dr * dr + dc * dc)  # in patch steps; exactly 0 on the diagonal
    if units == "unit":
        dist = dist / grid_size
    elif units == "pixels":
        dist = dist * float(patch_size)  # type: ignore[arg-type]
    return dist.to(dtype)


def _patch_rows(
    attn: torch.Tensor, grid_size: int | None, num_prefix_tokens: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Split the patch-query rows into (prefix-key mass (B, H, N), patch-key weights (B, H, N, N), g)."""
    if attn.dim() != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attention must have shape (B, heads, T, T), got {tuple(attn.shape)}")
    num_tokens = attn.shape[-1]
    if grid_size is None:
        grid_size = infer_grid_size(num_tokens, num_prefix_tokens)
    elif num_prefix_tokens < 0 or num_tokens != num_prefix_tokens + grid_size * grid_size:
        raise ValueError(
            f"{num_tokens} tokens do not match num_prefix_tokens={num_prefix_tokens} + "
            f"grid_size**2={grid_size * grid_size}"
        )
    rows = attn[:, :, num_prefix_tokens:, :].to(_compute_dtype(attn.dtype))
    prefix_mass = rows[..., :num_prefix_tokens].sum(dim=-1)
    weights = rows[..., num_prefix_tokens:]
    return prefix_mass, weights, grid_size


def _patch_mass(weights: torch.Tensor) -> torch.Tensor:
    """Each query's total weight on the patch keys, (B, H, N): what renormalisation divides by."""
    return weights.sum(dim=-1)


def _mad_per_query(
    weights: torch.Tensor,
    grid_size: int,
    units: str,
    patch_size: float | None,
    renormalize: bool,
    mass: torch.Tensor | None = None,
) -> torch.Tensor:
    """sum_l a(k, l) d(k, l); renormalised rows are handled by dividing the per-query sum by the row's patch mass
    (linear, so the (B, H, N, N) renormalised weights are never materialised: the probe pass stays cheap)."""
    dist = patch_distance_matrix(grid_size, units, patch_size, device=weights.device, dtype=weights.dtype)
    mad = torch.einsum("bhqk,qk->bhq", weights, dist)
    if not renormalize:
        return mad
    mass = _patch_mass(weights) if mass is None else mass
    # A row with no patch mass at all stays 0 (no NaN).
    return torch.where(mass > 0, mad / mass.clamp_min(torch.finfo(mad.dtype).tiny), 0.0)


def _entropy_per_query(weights: torch.Tensor, renormalize: bool, mass: torch.Tensor | None = None) -> torch.Tensor:
    """-sum_l a log a / log(N). For renormalised rows a = w / t, and -sum (w/t) log(w/t) = (-sum w log w) / t + log t,
    which needs one pass over the weights instead of three."""
    num_keys = weights.shape[-1]
    if num_keys == 1:  # a single key carries no uncertainty; avoids dividing by log 1 = 0
        return torch.zeros(weights.shape[:-1], dtype=weights.dtype, device=weights.device)
    # xlogy gives 0 * log 0 = 0 exactly, so one-hot rows are safe.
    raw = -torch.special.xlogy(weights, weights).sum(dim=-1)
    if renormalize:
        mass = _patch_mass(weights) if mass is None else mass
        safe = mass.clamp_min(torch.finfo(raw.dtype).tiny)
        raw = torch.where(mass > 0, raw / safe + torch.log(safe), 0.0)
    return raw / math.log(num_keys)


def _reduce(per_query: torch.Tensor, reduce: str) -> torch.Tensor:
    if reduce == "query":
        return per_query
    per_image = per_query.mean(dim=-1)
    return per_image if reduce == "none" else per_image.mean(dim=0)


def mean_attention_distance(
    attn: torch.Tensor,
    grid_size: int | None = None,
    num_prefix_tokens: int = 1,
    renormalize: bool = True,
    units: str = "unit",
    patch_size: float | None = None,
    reduce: str = "mean",
) -> torch.Tensor:
    """Mean Attention Distance per head: (heads,) for reduce="mean", (B, heads) for "none",
    (B, heads, g*g) for "query"."""
    _check_units(units, patch_size)
    _check_reduce(reduce)
    _, weights, g = _patch_rows(attn, grid_size, num_prefix_tokens)
    return _reduce(_mad_per_query(weights, g, units, patch_size, renormalize), reduce)


def attention_entropy(
    attn: torch.Tensor,
    grid_size: int | None = None,
    num_prefix_tokens: int = 1,
    renormalize: bool = True,
    reduce: str = "mean",
) -> torch.Tensor:
    """Entropy over the patch keys divided by log(g*g): 1 for uniform, 0 for one key. Shapes as MAD's."""
    _check_reduce(reduce)
    _, weights, _ = _patch_rows(attn, grid_size, num_prefix_tokens)
    return _reduce(_entropy_per_query(weights, renormalize), reduce)


def cls_mass(
    attn: torch.Tensor,
    num_prefix_tokens: int = 1,
    grid_size: int | None = None,
    reduce: str = "mean",
) -> torch.Tensor:
    """Share of each patch query's attention on the prefix keys (0 when there are none). Shapes as MAD's."""
    _check_reduce(reduce)
    prefix_mass, _, _ = _patch_rows(attn, grid_size, num_prefix_tokens)
    return _reduce(prefix_mass, reduce)


def attention_per_image(
    attn: torch.Tensor,
    grid_size: int | None = None,
    num_prefix_tokens: int = 1,
    renormalize: bool = True,
    units: str = "unit",
    patch_size: float | None = None,
) -> dict[str, torch.Tensor]:
    """Per-image means over the patch queries, {"mad", "entropy", "cls_mass"} each (B, heads).

    The building block for streaming: concatenate these over probe batches, then ``summarize_per_image``.
    """
    _check_units(units, patch_size)
    prefix_mass, weights, g = _patch_rows(attn, grid_size, num_prefix_tokens)
    mass = _patch_mass(weights) if renormalize else None
    return {
        "mad": _mad_per_query(weights, g, units, patch_size, renormalize, mass).mean(dim=-1),
        "entropy": _entropy_per_query(weights, renormalize, mass).mean(dim=-1),
        "cls_mass": prefix_mass.mean(dim=-1),
    }


def summarize_per_image(per_image: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-head means over images and the spread of MAD and entropy over images, each (heads,).

    The spread is the population standard deviation (correction 0), so a single image gives 0, not NaN.
    """
    return {
        "mad": per_image["mad"].mean(dim=0),
        "entropy": per_image["entropy"].mean(dim=0),
        "cls_mass": per_image["cls_mass"].mean(dim=0),
        "mad_std": per_image["mad"].std(dim=0, correction=0),
        "entropy_std": per_image["entropy"].std(dim=0, correction=0),
    }


def attention_summary(
    attn: torch.Tensor,
    grid_size: int | None = None,
    num_prefix_tokens: int = 1,
    renormalize: bool = True,
    units: str = "unit",
    patch_size: float | None = None,
) -> dict[str, torch.Tensor]:
    """One call per layer: {"mad", "entropy", "cls_mass", "mad_std", "entropy_std"}, each (heads,)."""
    return summarize_per_image(attention_per_image(attn, grid_size, num_prefix_tokens, renormalize, units, patch_size))


class AttentionStatsAccumulator:
    """Collects per-image statistics of one layer over probe batches; ``compute`` equals one-shot
    ``attention_summary`` on the concatenated batch. Use one accumulator per layer.

    Per-image values are (B, heads) and small, so they are kept (detached) and concatenated rather than
    folded into running sums: exact, and the same std as the one-shot call.
    """

    def __init__(
        self,
        grid_size: int | None = None,
        num_prefix_tokens: int = 1,
        renormalize: bool = True,
        units: str = "unit",
        patch_size: float | None = None,
    ) -> None:
        _check_units(units, patch_size)
        self.grid_size = grid_size
        self.num_prefix_tokens = num_prefix_tokens
        self.renormalize = renormalize
        self.units = units
        self.patch_size = patch_size
        self._chunks: list[dict[str, torch.Tensor]] = []

    @torch.no_grad()
    def update(self, attn: torch.Tensor) -> None:
        """Add one batch of attention probabilities (B, heads, T, T)."""
        per_image = attention_per_image(
            attn.detach(),
            self.grid_size,
            self.num_prefix_tokens,
            self.renormalize,
            self.units,
            self.patch_size,
        )
        self._chunks.append(per_image)

    @property
    def num_images(self) -> int:
        return sum(chunk["mad"].shape[0] for chunk in self._chunks)

    def per_image(self) -> dict[str, torch.Tensor]:
        """All images seen so far: {"mad", "entropy", "cls_mass"}, each (num_images, heads)."""
        if not self._chunks:
            raise RuntimeError("AttentionStatsAccumulator.per_image() called before any update()")
        return {key: torch.cat([chunk[key] for chunk in self._chunks]) for key in self._chunks[0]}

    def compute(self) -> dict[str, torch.Tensor]:
        """Same keys and shapes as ``attention_summary``, over every image seen so far."""
        return summarize_per_image(self.per_image())

    def reset(self) -> None:
        self._chunks.clear()
