"""Every image's drawn AutoAugment op of a slot on a uint8 batch in a fixed list of tensor ops, with no host reads:
a gather (geometric ops), a blend (Color, Contrast, Sharpness), a 256-entry lookup (the rest), each exactly the
identity for images whose op is not its own, in torchvision's arithmetic and dtypes."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vit_locality.augment.autoaugment_tables import PixelTables, SlotTables

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
        flat = _slot(flat, codes[k], slot, tables, height, width)
    return flat.view(batch, channels, height, width)


def _slot(
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
