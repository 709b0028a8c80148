"""Training data on the device (`data.on_device`): splits copied once, batches augmented in batched ops with the
worker path's per-sample semantics. Draws come from a device generator seeded by (seed, epoch, step), made for the
global batch with each process keeping its rows: independent of the process count and of resumes, but other values
than the worker path's (same distribution), so the setting is part of the run identity."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import SequentialSampler

from vit_locality.augment.autoaugment_tables import built_once, grey_levels
from vit_locality.augment.batched_autoaugment import apply as apply_autoaugment
from vit_locality.augment.batched_autoaugment import draw as draw_autoaugment
from vit_locality.augment.batched_autoaugment import prepare as prepare_autoaugment
from vit_locality.augment.mixing import COLORJITTER_STRENGTH
from vit_locality.catalog import COLORJITTER
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.data.sampling import ResumableEpoch
from vit_locality.seeding import sample_seed

Batch = tuple[torch.Tensor, torch.Tensor]
Device = torch.device | str | None


def draw_device(generator: torch.Generator | None, device: Device) -> torch.device:
    """Where draws are made: the generator's device, or without one (torch's default generator) `device`."""
    return generator.device if generator is not None else torch.device(device or "cpu")


@dataclass(frozen=True)
class CropFlipDraws:
    """Per image: the crop's top-left corner in the padded image and whether it is flipped."""

    offsets: torch.Tensor  # (B, 2) int64: top, left
    flip: torch.Tensor  # (B,) bool


def draw_crop_flip(batch: int, padding: int, generator: torch.Generator | None, device: Device = None) -> CropFlipDraws:
    """Uniform corners over 2p + 1 positions per axis and fair flips, as RandomCrop and RandomHorizontalFlip."""
    device = draw_device(generator, device)
    offsets = torch.randint(2 * padding + 1, (batch, 2), generator=generator, device=device)
    flip = torch.rand(batch, generator=generator, device=device) < 0.5
    return CropFlipDraws(offsets, flip)


def crop_flip(images: torch.Tensor, draws: CropFlipDraws, padding: int) -> torch.Tensor:
    """Every image cropped from its zero-padded self at its own corner, flipped if drawn: one gather."""
    batch, channels, height, width = images.shape
    padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
    rows, cols = _crop_tables(height, width, padding, str(images.device))
    offsets, flip = draws.offsets.to(images.device), draws.flip.to(images.device)
    flat = rows.index_select(0, offsets[:, 0]) + cols.index_select(0, flip.add(offsets[:, 1], alpha=2))
    index = flat.view(batch, 1, height * width).expand(batch, channels, height * width)
    return padded.view(batch, channels, -1).gather(2, index).view(batch, channels, height, width)


@built_once
def _crop_tables(height: int, width: int, padding: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Row part per top, (top + y) x padded width; column part per left x 2 + flipped, left + x or left + W - 1 - x."""
    corners = torch.arange(2 * padding + 1).view(-1, 1)
    rows = (corners + torch.arange(height)) * (width + 2 * padding)
    xs = torch.arange(width)
    cols = torch.stack([corners + xs, corners + xs.flip(0)], 1).view(-1, 1, width)
    return rows.unsqueeze(2).to(device), cols.to(device)


@dataclass(frozen=True)
class ColorJitterDraws:
    """Per image: the order of brightness, contrast, saturation and their factors, as v2.ColorJitter draws them."""

    order: torch.Tensor  # (B, 3) int64, a permutation of 0 (brightness), 1 (contrast), 2 (saturation)
    factors: torch.Tensor  # (B, 3) float32 in [1 - s, 1 + s], indexed by op


def draw_color_jitter(
    batch: int, generator: torch.Generator | None, strength: float = COLORJITTER_STRENGTH, device: Device = None
) -> ColorJitterDraws:
    """A uniformly random order (argsort of uniforms) and independent float32 uniform factors."""
    device = draw_device(generator, device)
    order = torch.rand(batch, 3, generator=generator, device=device).argsort(dim=1)
    factors = torch.empty(batch, 3, device=device).uniform_(1 - strength, 1 + strength, generator=generator)
    return ColorJitterDraws(order, factors)


def _blend(images: torch.Tensor, other: torch.Tensor | float, factor: torch.Tensor) -> torch.Tensor:
    """factor x image + (1 - factor) x other, rounded as torchvision's `image.mul(f).add_(other, alpha=1 - f)`."""
    keep = factor.to(torch.float32).view(-1, 1, 1, 1)
    rest = (1.0 - factor).to(torch.float32).view(-1, 1, 1, 1).double()
    if isinstance(other, torch.Tensor):
        other = other.double()
    mixed = ((images * keep).double() + other * rest).to(torch.float32)
    return mixed.clamp_(0, 255).to(torch.uint8)


def color_jitter(images: torch.Tensor, draws: ColorJitterDraws) -> torch.Tensor:
    """Each image through its three ops in its own order, each result truncated to uint8 as torchvision does."""
    factors = draws.factors.to(images.device, torch.float64)
    order = draws.order.to(images.device)
    out = images
    for slot in range(3):
        op = order[:, slot]
        factor = factors.gather(1, op.unsqueeze(1)).squeeze(1)
        bright = _blend(out, 0.0, factor)
        grey = grey_levels(out)
        contrast = _blend(out, grey.mean(dim=(1, 2, 3), keepdim=True), factor)
        saturation = _blend(out, grey, factor)
        pick = op.view(-1, 1, 1, 1)
        out = torch.where(pick == 0, bright, torch.where(pick == 1, contrast, saturation))
    return out


ERASING_RATIO = (0.3, 3.3)  # torchvision's RandomErasing aspect ratios (height / width), drawn log-uniformly
ERASING_TRIES = 10  # torchvision's tries at a box that fits


def draw_erasing(
    batch: int,
    height: int,
    width: int,
    prob: float,
    scale: tuple[float, float],
    generator: torch.Generator | None,
    device: Device = None,
) -> torch.Tensor:
    """torchvision's RandomErasing draws as (B, 4) top, left, height, width (all 0: none): the first of ten
    boxes that fits, at a uniform corner."""
    device = draw_device(generator, device)
    erased = torch.rand(batch, generator=generator, device=device) < prob
    share = torch.empty(batch, ERASING_TRIES, device=device).uniform_(*scale, generator=generator)
    log_low, log_high = math.log(ERASING_RATIO[0]), math.log(ERASING_RATIO[1])
    ratio = torch.empty(batch, ERASING_TRIES, device=device).uniform_(log_low, log_high, generator=generator).exp()
    area = share.double() * (height * width)
    tall, wide = (area * ratio).sqrt().round().long(), (area / ratio).sqrt().round().long()
    fits = (tall < height) & (wide < width)
    first = fits.long().argmax(dim=1, keepdim=True)  # the first try that fits
    tall, wide = tall.gather(1, first).squeeze(1), wide.gather(1, first).squeeze(1)
    corner = torch.rand(batch, 2, generator=generator, device=device)
    top, left = (corner[:, 0] * (height - tall + 1)).long(), (corner[:, 1] * (width - wide + 1)).long()
    kept = erased & fits.any(dim=1)  # an image none of whose tries fits is left whole, as torchvision does
    return torch.stack([top, left, tall, wide], dim=1) * kept[:, None]


def erase(images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Every image with its box (draw_erasing) set to 0, torchvision's default value."""
    top, left, tall, wide = boxes.to(images.device).unbind(1)
    rows = torch.arange(images.shape[-2], device=images.device)[None]
    cols = torch.arange(images.shape[-1], device=images.device)[None]
    in_rows = (rows >= top[:, None]) & (rows < (top + tall)[:, None])
    in_cols = (cols >= left[:, None]) & (cols < (left + wide)[:, None])
    return images.masked_fill((in_rows[:, :, None] & in_cols[:, None, :])[:, None], 0)


class BatchAugment:
    """The protocol's per-sample training augmentation for whole batches: crop + flip, the policy, erasing."""

    def __init__(self, image_size: int, protocol: TrainingProtocol, grouping: str | None = None) -> None:
        self.padding = image_size // 8
        self.policy = protocol.policy if protocol.autoaug else None
        self.erasing = (protocol.erasing_prob, protocol.erasing_scale) if protocol.erasing else None
        self.grouping = grouping  # AutoAugment's (batched_autoaugment.apply); None: the device's default

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator | None, world: int = 1, rank: int = 0
    ) -> torch.Tensor:
        """Draw for the global batch and augment this process's rows: rank, rank + world, ... Without a generator
        the draws come from torch's default one on the images' device (inside a compiled step)."""
        device = draw_device(generator, images.device)
        total = len(images) * world
        rows = torch.arange(len(images), device=device) * world + rank if world > 1 else None
        mine = (lambda drawn: drawn) if rows is None else (lambda drawn: drawn[rows])
        crop = draw_crop_flip(total, self.padding, generator, device)
        images = crop_flip(images, CropFlipDraws(mine(crop.offsets), mine(crop.flip)), self.padding)
        if self.policy == COLORJITTER:
            jitter = draw_color_jitter(total, generator, device=device)
            images = color_jitter(images, ColorJitterDraws(mine(jitter.order), mine(jitter.factors)))
        elif self.policy is not None:
            drawn = draw_autoaugment(total, generator, device, policy=self.policy)
            images = apply_autoaugment(images, drawn if rows is None else drawn.rows(rows), self.grouping)
        if self.erasing is not None:
            boxes = draw_erasing(total, *images.shape[-2:], *self.erasing, generator, device)
            images = erase(images, mine(boxes))
        return images

    def prepare(self, device: torch.device, height: int, width: int) -> None:
        """Build the per-device tables before the first batch, so no step builds one."""
        _crop_tables(height, width, self.padding, str(device))
        if self.policy is not None and self.policy != COLORJITTER:
            prepare_autoaugment(self.policy, device, height, width)

    def __repr__(self) -> str:
        return f"BatchAugment(padding={self.padding}, policy={self.policy!r})"


class DeviceTrainLoader(ResumableEpoch):
    """The training loader: full per-process batches of augmented images on the device, its own `sampler`
    (ResumableEpoch); `shuffle=False` gives data set order and shows Lightning a SequentialSampler."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        batch_size: int,
        seed: int,
        augment: BatchAugment | None,
        epoch: int = 0,
        world: int = 1,
        rank: int = 0,
        shuffle: bool = True,
    ) -> None:
        self.images, self.labels = images, labels
        self.batch_size, self.seed, self.augment = batch_size, seed, augment
        self.epoch, self.num_replicas, self.rank = epoch, world, rank
        self.shuffle = shuffle
        self.sampler: ResumableEpoch | SequentialSampler = self if shuffle else SequentialSampler(range(len(labels)))
        if augment is not None and images.ndim == 4:
            augment.prepare(images.device, *images.shape[-2:])

    def resume_from(self, epoch: int, steps: int) -> None:
        """Start at step `steps` (of all processes) the next time epoch `epoch` is iterated."""
        super().resume_from(epoch, steps * self.batch_size * self.num_replicas)

    def __len__(self) -> int:
        return math.ceil(len(self.labels) / self.num_replicas) // self.batch_size  # full batches only, as drop_last

    def __iter__(self) -> Iterator[Batch]:
        device = self.images.device
        global_batch = self.batch_size * self.num_replicas
        if self.shuffle:
            skipped, order = self.next_shard(len(self.labels))
        else:
            skipped, order = 0, torch.arange(len(self) * global_batch)[self.rank :: self.num_replicas]
        order = order.to(device)
        first = skipped // global_batch
        generator = torch.Generator(device=device)
        for step in range(first, len(self)):
            at = (step - first) * self.batch_size
            index = order[at : at + self.batch_size]
            images = self.images[index]
            if self.augment is not None:
                # a sample seed of epoch + 2**31, an epoch no run reaches: apart from every order and global seed
                generator.manual_seed(sample_seed(self.seed, self.epoch + 2**31, step))
                images = self.augment(images, generator, self.num_replicas, self.rank)
            yield images, self.labels[index]


class DeviceEvalLoader:
    """An evaluation split in batches from the device; under DDP every W-th image, padded with the first ones as
    DistributedSampler pads."""

    def __init__(
        self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, world: int = 1, rank: int = 0
    ) -> None:
        size = len(labels)
        total = math.ceil(size / world) * world
        index = torch.arange(total, device=images.device) % max(size, 1)
        self.index = index[rank:total:world]
        self.images, self.labels, self.batch_size = images, labels, batch_size

    def __len__(self) -> int:
        return math.ceil(len(self.index) / self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        for start in range(0, len(self.index), self.batch_size):
            index = self.index[start : start + self.batch_size]
            yield self.images[index], self.labels[index]


class DeviceArrays:
    """The splits a cell reads, copied to one device once (a tensor shared by two splits once)."""

    def __init__(self, device: torch.device, train: Batch, evaluation: Batch, test: Batch) -> None:
        self.device = device
        splits = (train, evaluation, test)
        copies = {id(t): t for split in splits for t in split}
        copies = {key: tensor.to(device) for key, tensor in copies.items()}
        self.train, self.evaluation, self.test = ((copies[id(x)], copies[id(y)]) for x, y in splits)
