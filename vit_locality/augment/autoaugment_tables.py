"""Batched AutoAugment's `select` path. Its constant tables, one row per code (sub-policy x 4 + applied x 2 +
negative), are built once per policy and image size by running torchvision's own kernels on probes and copied once
per device; `apply_slots` then runs every image's drawn op in a fixed list of tensor ops with no host reads (a gather,
a blend, a 256-entry lookup), each the identity for images whose op is not its own, in torchvision's arithmetic."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torchvision.transforms import v2

from vit_locality.upstream import apply_autoaugment_op, autoaugment_space, autoaugment_sub_policies

NUM_BINS = 10  # torchvision's AutoAugment.forward asks its magnitude functions for this many bins
NUM_OPS = 2
GEOMETRIC = frozenset({"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"})
POINTWISE = frozenset({"Brightness", "Solarize", "Posterize", "Invert"})
BLENDS = frozenset({"Color", "Contrast", "Sharpness"})  # blend with grey, its mean, the blurred image
Entry = tuple[str, int | None, bool]  # op name, magnitude bin, negative
Built = TypeVar("Built")


def built_once(build: Callable[..., Built]) -> Callable[..., Built]:
    """functools.cache for per-device tables, as a plain dict: torch.compile traces a hit as a lookup, where it
    traces through functools.cache's wrapper and would rebuild the table inside the graph (host reads included)."""
    built: dict[tuple, Built] = {}

    @functools.wraps(build)
    def lookup(*key: Any) -> Built:
        if key not in built:
            built[key] = build(*key)
        return built[key]

    lookup.cache_clear = built.clear  # type: ignore[attr-defined]  # functools.cache's name for it
    return lookup


@cache
def _magnitude(name: str, bin_: int | None, negative: bool, height: int, width: int) -> float:
    """The magnitude torchvision's forward passes for this op, bin and sign at this image size, as a Python number."""
    magnitudes_fn, signed = autoaugment_space()[name]
    magnitudes = magnitudes_fn(NUM_BINS, height, width)
    if magnitudes is None:
        return 0.0
    magnitude = float(magnitudes[bin_])
    return -magnitude if signed and negative else magnitude


@dataclass(frozen=True)
class SlotTables:
    """One slot's tables on one device for one image size; a kind's table is None when the slot never draws it."""

    names: frozenset[str]  # the op names the slot can draw
    # One row per code (P x 4 rows):
    source: torch.Tensor | None  # (P x 4, 1, H x W) int64: source pixel per output pixel, H x W for the fill
    lut: torch.Tensor | None  # (P x 4, 1, 256) uint8: the pointwise ops' value maps, identity elsewhere
    keep: torch.Tensor | None  # (P x 4, 1, 1) float32: the image's weight in a blend (1 for Sharpness, others)
    rest: torch.Tensor | None  # (P x 4, 1, 1) float64: the other's weight (float32 values; 0 outside the blends)
    sharpness: torch.Tensor | None  # (P x 4, 1, 1) bool
    contrast: torch.Tensor | None  # (P x 4, 1, 1) bool
    autocontrast: torch.Tensor | None  # (P x 4, 1, 1) bool
    equalize: torch.Tensor | None  # (P x 4, 1, 1) bool

    @property
    def blends(self) -> bool:
        return bool(self.names & BLENDS)

    @property
    def grey(self) -> bool:
        """Color and Contrast blend with the grey image (Contrast with its mean)."""
        return bool(self.names & {"Color", "Contrast"})


@dataclass(frozen=True)
class PixelTables:
    """Both slots' tables and the constants shared by them, for one policy, device and image size."""

    slots: tuple[SlotTables, ...]
    levels: torch.Tensor  # (1, 1, 256) float32: the uint8 values, for the per-image lookup tables
    identity: torch.Tensor  # (1, 1, 256) uint8: the lookup table that changes nothing
    one: torch.Tensor  # () int64: a histogram's increment
    inner: torch.Tensor  # (H, W) float32: 1 on the pixels Sharpness changes, 0 on the border it keeps


def _slot_entries(subs: list, slot: int) -> tuple[list[Entry], list[int]]:
    """The slot's distinct entries (0: no op) and the entry of every code."""
    space = autoaugment_space()
    entries: dict[Entry, int] = {("", None, False): 0}
    codes = []
    for sub in subs:
        name, _, bin_ = sub[slot]
        for applied in (False, True):
            for negative in (False, True):
                key = (name, bin_, negative and space[name][1]) if applied else ("", None, False)
                codes.append(entries.setdefault(key, len(entries)))
    return list(entries), codes


def _probed(
    augment: v2.AutoAugment, entries: list[Entry], probe: torch.Tensor, kinds: frozenset[str], height: int, width: int
) -> torch.Tensor:
    """(E, 1, N): `probe` through each entry's torchvision kernel when the op is one of `kinds`, else as it is."""
    rows = []
    for name, bin_, negative in entries:
        moved = probe
        if name in kinds:
            moved = apply_autoaugment_op(augment, probe, name, _magnitude(name, bin_, negative, height, width))
        rows.append(moved.reshape(1, -1))
    return torch.stack(rows)


def _source(augment: v2.AutoAugment, entries: list[Entry], height: int, width: int) -> torch.Tensor:
    """(E, 1, H x W) source pixels of the geometric entries (identity elsewhere), H x W standing for the fill."""
    probe = torch.arange(1, height * width + 1, dtype=torch.float32).view(1, 1, height, width)  # 0: the fill
    index = _probed(augment, entries, probe, GEOMETRIC, height, width).long() - 1
    return torch.where(index < 0, height * width, index)


def _lut(augment: v2.AutoAugment, entries: list[Entry], height: int, width: int) -> torch.Tensor:
    """(E, 1, 256) value maps of the pointwise entries (identity elsewhere), torchvision's kernels on 0..255."""
    return _probed(augment, entries, torch.arange(256, dtype=torch.uint8).view(1, 1, 256), POINTWISE, height, width)


def _blend_weights(entries: list[Entry], height: int, width: int) -> tuple[list[float], list[float]]:
    """Per entry (keep, rest), r = 1 + magnitude: Color, Contrast (r, 1 - r); Sharpness (1, 1 - r); else (1, 0)."""
    keep, rest = [], []
    for name, bin_, negative in entries:
        ratio = 1.0 + _magnitude(name, bin_, negative, height, width) if name in BLENDS else 1.0
        keep.append(ratio if name in ("Color", "Contrast") else 1.0)
        rest.append(1.0 - ratio)
    return keep, rest


def _slot(augment: v2.AutoAugment, subs: list, slot: int, height: int, width: int) -> SlotTables:
    """One slot's tables, one row per code; only the kinds the slot can draw get one."""
    entries, codes = _slot_entries(subs, slot)
    names = frozenset(name for name, _, _ in entries[1:])
    rows = torch.tensor(codes, dtype=torch.int64)

    def mask(kind: str) -> torch.Tensor | None:
        if kind not in names:
            return None
        return torch.tensor([name == kind for name, _, _ in entries])[rows].view(-1, 1, 1)

    keep, rest = _blend_weights(entries, height, width)
    blends = bool(names & BLENDS)
    return SlotTables(
        names=names,
        source=_source(augment, entries, height, width)[rows] if names & GEOMETRIC else None,
        lut=_lut(augment, entries, height, width)[rows] if names & POINTWISE else None,
        keep=torch.tensor(keep, dtype=torch.float32)[rows].view(-1, 1, 1) if blends else None,
        # rounded to float32, as the kernels round their alpha, then held in float64 for the exact blend
        rest=torch.tensor(rest, dtype=torch.float32).double()[rows].view(-1, 1, 1) if blends else None,
        sharpness=mask("Sharpness"),
        contrast=mask("Contrast"),
        autocontrast=mask("AutoContrast"),
        equalize=mask("Equalize"),
    )


@cache
def _host_tables(policy: str, height: int, width: int) -> PixelTables:
    """Built once per policy and image size on the host, autocast off."""
    augment = v2.AutoAugment(v2.AutoAugmentPolicy(policy))
    subs = autoaugment_sub_policies(augment)
    with torch.autocast(device_type="cpu", enabled=False), torch.no_grad():
        slots = tuple(_slot(augment, subs, k, height, width) for k in range(NUM_OPS))
        inner = F.pad(torch.ones(height - 2, width - 2), (1, 1, 1, 1))
        identity = torch.arange(256, dtype=torch.uint8).view(1, 1, 256)
        return PixelTables(slots, identity.float(), identity, torch.ones((), dtype=torch.int64), inner)


def _moved(tables: Any, device: torch.device) -> Any:
    moved = {}
    for field in fields(tables):
        value = getattr(tables, field.name)
        if isinstance(value, torch.Tensor):
            value = value.to(device)
        elif isinstance(value, tuple):
            value = tuple(_moved(slot, device) for slot in value)
        moved[field.name] = value
    return replace(tables, **moved)


@built_once
def pixel_tables(policy: str, device: str, height: int, width: int) -> PixelTables:
    """The tables on `device`: one copy per policy, device and image size."""
    return _moved(_host_tables(policy, height, width), torch.device(device))


_MAX = 255.0  # uint8


def grey_levels(images: torch.Tensor) -> torch.Tensor:
    """torchvision's grey level of uint8 RGB along dim 1: ITU-R 601 in float32, floored, dim 1 kept."""
    red, green, blue = images.unbind(1)
    return red.mul(0.2989).add_(green, alpha=0.587).add_(blue, alpha=0.114).floor_().unsqueeze(1)


def apply_slots(
    images: torch.Tensor, sub: torch.Tensor, applied: torch.Tensor, negative: torch.Tensor, tables: PixelTables
) -> torch.Tensor:
    """Both slots' ops on a uint8 (B, 3, H, W) batch; `applied` and `negative` are (B, 2) bool."""
    batch, channels, height, width = images.shape
    codes = (sub.unsqueeze(1) * 4).add(applied, alpha=2).add_(negative)  # (B, 2): the tables' rows
    codes = codes.t().contiguous()  # a slot's codes contiguous: index_select copies a strided index first
    flat = images.reshape(batch, channels, height * width)
    for k, slot in enumerate(tables.slots):
        flat = _run_slot(flat, codes[k], slot, tables, height, width)
    return flat.view(batch, channels, height, width)


def _run_slot(
    flat: torch.Tensor, code: torch.Tensor, slot: SlotTables, tables: PixelTables, height: int, width: int
) -> torch.Tensor:
    """One slot on a (B, C, H x W) uint8 batch: the stages its ops need (blends hand int64 pixels to the maps)."""
    maps = slot.lut is not None or slot.autocontrast is not None or slot.equalize is not None
    if slot.source is not None:  # every output pixel from its source pixel, the fill from a zero after the last
        flat = F.pad(flat, (0, 1)).gather(2, slot.source.index_select(0, code).expand(-1, flat.shape[1], -1))
    if slot.blends:
        flat = _blend(flat, code, slot, tables, height, width, torch.int64 if maps else torch.uint8)
    if maps:
        flat = _value_maps(flat, code, slot, tables)
    return flat


def _blend(
    flat: torch.Tensor,
    code: torch.Tensor,
    slot: SlotTables,
    tables: PixelTables,
    height: int,
    width: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """torchvision's `image.mul(r).add_(other, alpha=1 - r)` per image, the fused add exact in float64."""
    scaled = flat * slot.keep.index_select(0, code)  # float32, rounded as torchvision's image.mul(r)
    other: torch.Tensor | None = None
    if slot.grey:
        other = grey = grey_levels(flat)
        if slot.contrast is not None:  # an integer sum, exact in any order: torchvision's mean
            other = torch.where(slot.contrast.index_select(0, code), grey.mean(2, keepdim=True), grey)
    if slot.sharpness is not None:
        detail = _detail(scaled, tables.inner, height, width)
        other = detail if other is None else torch.where(slot.sharpness.index_select(0, code), detail, other)
    assert other is not None
    mixed = torch.addcmul(scaled, other, slot.rest.index_select(0, code))  # in float64, as `rest` is
    return mixed.float().clamp_(0, _MAX).to(dtype)


def _detail(image: torch.Tensor, inner: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Sharpness's `blurred - image` inside, 0 on the border: round((3x3 sum + 4 x centre) / 13) is torchvision's
    rounded blur exactly on integer pixels (the quotient is never within 1/26 of a half)."""
    batch, channels = image.shape[:2]
    image = image.view(batch, channels, height, width)
    total = F.avg_pool2d(image, 3, stride=1, padding=1, divisor_override=1).add_(image, alpha=4)
    return total.div_(13).round_().sub_(image).mul_(inner).view(batch, channels, height * width)


def _value_maps(flat: torch.Tensor, code: torch.Tensor, slot: SlotTables, tables: PixelTables) -> torch.Tensor:
    """Every pixel (uint8 or int64) through its image and channel's 256-entry table, to uint8."""
    index = flat if flat.dtype == torch.int64 else flat.long()
    lut = tables.identity if slot.lut is None else slot.lut.index_select(0, code)
    if slot.autocontrast is not None or slot.equalize is not None:
        low, high = flat.aminmax(dim=2, keepdim=True)
        if slot.autocontrast is not None:
            lut = torch.where(slot.autocontrast.index_select(0, code), _autocontrast_lut(low, high, tables.levels), lut)
        if slot.equalize is not None:
            equalized, valid = _equalize_lut(index, high, tables.one)
            lut = torch.where(slot.equalize.index_select(0, code) & valid, equalized, lut)
    if lut.shape[:2] != flat.shape[:2]:  # one table for all channels
        lut = lut.expand(*flat.shape[:2], 256)
    return lut.gather(2, index)


def _autocontrast_lut(low: torch.Tensor, high: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """torchvision's `autocontrast_image` for uint8 on each channel's 256 values; a flat channel stays as it is."""
    flat = high == low
    inv_scale = (high - low).mul(1.0 / _MAX).masked_fill_(flat, 1.0)
    return (levels - low.masked_fill(flat, 0)).div_(inv_scale).clamp_(0, _MAX).to(torch.uint8)


def _equalize_lut(index: torch.Tensor, high: torch.Tensor, one: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's `equalize_image` table per channel, and whether it applies (255+ pixels below the max)."""
    batch, channels, _ = index.shape
    hist = index.new_zeros(batch, channels, 256).scatter_add_(2, index, one.expand_as(index))
    below = hist.cumsum(2).sub_(hist)  # pixels below each value: torchvision's cum_hist shifted by one
    step = (index < high).sum(2, keepdim=True).div_(255, rounding_mode="floor")
    lut = below.add_(step // 2).div_(step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    return lut.to(torch.uint8), step > 0
