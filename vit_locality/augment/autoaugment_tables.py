"""Constant tables that let batched AutoAugment run every image's op of a slot in a fixed set of
whole-batch tensor ops (autoaugment_ops.py), with no Python value turned into a tensor inside a batch.

A slot (op 1 or op 2 of the sub-policies) can draw a few dozen distinct (op, magnitude bin, sign) entries, plus
"no op". An image's code, sub-policy x 4 + applied x 2 + negative, names its entry, and every table here has one row
per code, built once per (policy, image size) on the host and copied once to each device that asks, so a batch
reads each table with one lookup and makes no tensor of its own from Python values:

- `source`: for the geometric ops (ShearX/Y, TranslateX/Y, Rotate), the source pixel of every output pixel, or
  H x W for the fill. Nearest interpolation makes such an op a pure gather, and the table is read off torchvision's
  own kernel applied to an image whose pixels are their own index, so the gather gives torchvision's pixels
  exactly (its affine grid, rounding and fill included). The grid is torchvision's on the host: the pixels of the
  per-sample transform in the CPU data workers, whatever a GPU's own matrix arithmetic would round;
- `lut`: for the pointwise ops (Brightness, Solarize, Posterize, Invert) the 256-entry lookup table, again read off
  torchvision's own kernel applied to the 256 uint8 values;
- `keep`, `rest` and the kind masks: the factors of the blends (Color, Contrast, Sharpness) and which codes need
  the per-image statistics (AutoContrast, Equalize), computed in autoaugment_ops.py.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any

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


@cache
def _magnitude(name: str, bin_: int | None, negative: bool, height: int, width: int) -> float:
    """The magnitude torchvision's forward would pass for this op, bin and sign at this image size (computed once:
    torchvision's tables are CPU tensors, read here as Python numbers)."""
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


def _index_image(height: int, width: int) -> torch.Tensor:
    """A float image whose pixel i holds i + 1 (0 is the fill): through a nearest-interpolation op it shows every
    output pixel's source."""
    return torch.arange(1, height * width + 1, dtype=torch.float32).view(1, 1, height, width)


def _source(augment: v2.AutoAugment, entries: list[Entry], height: int, width: int) -> torch.Tensor:
    """(E, 1, H x W) source pixels of the geometric entries (identity elsewhere), H x W standing for the fill."""
    probe = _index_image(height, width)
    rows = []
    for name, bin_, negative in entries:
        moved = probe
        if name in GEOMETRIC:
            moved = apply_autoaugment_op(augment, probe, name, _magnitude(name, bin_, negative, height, width))
        index = moved.flatten().long() - 1
        rows.append(torch.where(index < 0, height * width, index).view(1, -1))
    return torch.stack(rows)


def _lut(augment: v2.AutoAugment, entries: list[Entry], height: int, width: int) -> torch.Tensor:
    """(E, 1, 256) value maps of the pointwise entries (identity elsewhere), each torchvision's kernel on 0..255."""
    values = torch.arange(256, dtype=torch.uint8).view(1, 1, 256)
    rows = []
    for name, bin_, negative in entries:
        mapped = values
        if name in POINTWISE:
            mapped = apply_autoaugment_op(augment, values, name, _magnitude(name, bin_, negative, height, width))
        rows.append(mapped.view(1, 256))
    return torch.stack(rows)


def _blend_weights(entries: list[Entry], height: int, width: int) -> tuple[list[float], list[float]]:
    """Per entry (keep, rest): torchvision blends `image.mul(r).add_(other, alpha=1 - r)` (Color, Contrast) and
    sharpens `image.add_(blurred - image, alpha=1 - r)`, r = 1 + magnitude; both weights are used as float32. An
    entry outside the blends gets (1, 0): the image itself, exactly."""
    keep, rest = [], []
    for name, bin_, negative in entries:
        ratio = 1.0 + _magnitude(name, bin_, negative, height, width) if name in BLENDS else 1.0
        keep.append(ratio if name in ("Color", "Contrast") else 1.0)
        rest.append(1.0 - ratio)
    return keep, rest


def _slot(augment: v2.AutoAugment, subs: list, slot: int, height: int, width: int) -> SlotTables:
    """One slot's tables, one row per code: only the kinds the slot can draw get one."""
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
    """Built once per policy and image size on the host, with torchvision's own kernels, autocast off."""
    augment = v2.AutoAugment(v2.AutoAugmentPolicy(policy))
    subs = autoaugment_sub_policies(augment)
    with torch.autocast(device_type="cpu", enabled=False), torch.no_grad():
        slots = tuple(_slot(augment, subs, k, height, width) for k in range(NUM_OPS))
        inner = F.pad(torch.ones(height - 2, width - 2), (1, 1, 1, 1))
        identity = torch.arange(256, dtype=torch.uint8).view(1, 1, 256)
        return PixelTables(slots, identity.float(), identity, torch.ones((), dtype=torch.int64), inner)


def _moved(tables: Any, device: torch.device) -> Any:
    """The same tables with every tensor copied to `device`."""
    moved = {}
    for field in fields(tables):
        value = getattr(tables, field.name)
        if isinstance(value, torch.Tensor):
            value = value.to(device)
        elif isinstance(value, tuple):
            value = tuple(_moved(slot, device) for slot in value)
        moved[field.name] = value
    return replace(tables, **moved)


@cache
def pixel_tables(policy: str, device: str, height: int, width: int) -> PixelTables:
    """The tables on `device`: one copy per policy, device and image size (the first batch's, or `prepare`'s)."""
    return _moved(_host_tables(policy, height, width), torch.device(device))
