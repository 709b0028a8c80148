"""Every image's drawn AutoAugment op of a slot, for a whole uint8 batch, in a fixed list of tensor ops.

This is what `batched_autoaugment.apply` runs for `select` (the GPU path). Its cost on the host is a fixed number of
dispatched ops per batch (about 65 per slot, whatever the batch size or the draws: no loop over images, ops or
magnitudes), and it reads nothing back and makes no tensor from Python values: the constants of every drawable
(op, magnitude, sign) are tables made once (autoaugment_tables.py). Each image has one op per slot, so a slot is
three stages, each the identity (exactly) for the images whose op is not one of its own:

1. geometric ops: one gather of every image from its source-pixel table;
2. blends: `keep x image + rest x other` in torchvision's rounding, `other` being the grey image (Color), its mean
   (Contrast) or the blurred image's detail (Sharpness); keep = 1, rest = 0 elsewhere;
3. value maps: one gather of every pixel through its image and channel's 256-entry table: the pointwise ops' fixed
   tables, or the table AutoContrast (channel min and max) or Equalize (channel histogram) makes for the image,
   with torchvision's arithmetic applied to the 256 values instead of the pixels (the same result per value).

The arithmetic is torchvision's kernels' own, step for step, in their dtypes (Sharpness's blur excepted, whose
rounded result is computed exactly instead: `_detail`); the tests hold every op on every image to torchvision's
per-image pixels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vit_locality.augment.autoaugment_tables import PixelTables, SlotTables

_MAX = 255.0  # uint8


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
    """One slot on a (B, C, H x W) uint8 batch: the stages the slot's ops need, in a fixed order. Before the value
    maps the blends hand over int64 pixels, the maps' gather index, rather than uint8 ones (one conversion less)."""
    maps = slot.lut is not None or slot.autocontrast is not None or slot.equalize is not None
    if slot.source is not None:
        flat = _geometric(flat, slot.source.index_select(0, code))
    if slot.blends:
        flat = _blend(flat, code, slot, tables, height, width, torch.int64 if maps else torch.uint8)
    if maps:
        flat = _value_maps(flat, code, slot, tables)
    return flat


def _geometric(flat: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """Every output pixel from its source pixel, the fill (0) from a zero after the last pixel."""
    padded = F.pad(flat, (0, 1))
    return padded.gather(2, source.expand(-1, flat.shape[1], -1))


def _blend(
    flat: torch.Tensor,
    code: torch.Tensor,
    slot: SlotTables,
    tables: PixelTables,
    height: int,
    width: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """torchvision's `image.mul(r).add_(other, alpha=1 - r)` and `image.add_(blurred - image, alpha=1 - r)` for
    every image at once. The float32 multiply-add rounds once; in float64 the product of two float32 values is
    exact, so the sum rounded to float32 is that result. The pixels come back truncated, as uint8 or int64."""
    scaled = flat * slot.keep.index_select(0, code)  # float32, rounded as torchvision's image.mul(r)
    other: torch.Tensor | None = None
    if slot.grey:
        red, green, blue = flat.unbind(1)  # torchvision's grey for uint8: ITU-R 601 in float32, floored
        grey = red.mul(0.2989).add_(green, alpha=0.587).add_(blue, alpha=0.114).floor_().unsqueeze(1)
        other = grey
        if slot.contrast is not None:  # an integer sum, exact in any order: torchvision's mean
            other = torch.where(slot.contrast.index_select(0, code), grey.mean(2, keepdim=True), grey)
    if slot.sharpness is not None:
        detail = _detail(scaled, tables.inner, height, width)
        other = detail if other is None else torch.where(slot.sharpness.index_select(0, code), detail, other)
    assert other is not None
    mixed = torch.addcmul(scaled, other, slot.rest.index_select(0, code))  # in float64, as `rest` is
    return mixed.float().clamp_(0, _MAX).to(dtype)


def _detail(image: torch.Tensor, inner: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Sharpness's `blurred - image` on the inner pixels, 0 on the border, which torchvision leaves as it is.

    torchvision blurs with a 3 x 3 conv2d of weights 1/13 (5/13 in the centre) and rounds. On integer pixels the
    exact blur is (3 x 3 sum + 4 x centre) / 13, an integer over 13, which is never within 1/26 of a half, while
    float32 rounding moves a sum of nine such products by less than 1e-4: the rounded conv is the rounded exact
    value, and so is the rounded float32 quotient of the exact integer sum computed here (float32 holds integers
    below 2**24 exactly, in any order of summation). A pooling sum instead of a conv2d: the same integers, at a
    fraction of a conv's dispatch cost."""
    batch, channels = image.shape[:2]
    image = image.view(batch, channels, height, width)
    total = F.avg_pool2d(image, 3, stride=1, padding=1, divisor_override=1).add_(image, alpha=4)
    return total.div_(13).round_().sub_(image).mul_(inner).view(batch, channels, height * width)


def _value_maps(flat: torch.Tensor, code: torch.Tensor, slot: SlotTables, tables: PixelTables) -> torch.Tensor:
    """Every pixel (uint8 or int64) through its image and channel's 256-entry table; uint8 pixels come out."""
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
    """torchvision's `autocontrast_image` for uint8 on the 256 values of each channel: a flat channel (min = max)
    stays as it is. The uint8 differences are exact and become float32 in the ops that use them, as torchvision's
    float32 copies of the image would give them."""
    flat = high == low
    inv_scale = (high - low).mul(1.0 / _MAX).masked_fill_(flat, 1.0)
    return (levels - low.masked_fill(flat, 0)).div_(inv_scale).clamp_(0, _MAX).to(torch.uint8)


def _equalize_lut(index: torch.Tensor, high: torch.Tensor, one: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision's `equalize_image` table per channel (PIL's scheme, integer arithmetic throughout) and whether
    it applies: a channel with fewer than 255 pixels below its maximum stays as it is."""
    batch, channels, _ = index.shape
    hist = index.new_zeros(batch, channels, 256).scatter_add_(2, index, one.expand_as(index))
    below = hist.cumsum(2).sub_(hist)  # pixels below each value: torchvision's cum_hist shifted by one
    step = (index < high).sum(2, keepdim=True).div_(255, rounding_mode="floor")
    lut = below.add_(step // 2).div_(step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    return lut.to(torch.uint8), step > 0
