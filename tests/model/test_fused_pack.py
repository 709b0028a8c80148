"""A pack trains each cell as the cell trains alone: 50 steps of 10 protocols (the 8 grid cells, +MU, +RE), each cell
fed its own batches and its own draws, end within a relative 1e-5 of the lone cells; a fusion that mixes two cells'
smoothing or shares an AdamW moment does not."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from vit_locality.config.protocol import TrainingProtocol
from vit_locality.data.on_device import BatchAugment
from vit_locality.model.classifier import ViTClassifier, adamw_with_decay_groups
from vit_locality.model.fused import FusedViT, clip_per_cell, fused_adamw, pack_loss
from vit_locality.model.vit import VisionTransformer
from vit_locality.seeding import reseed_for_batch

ARCH = {"depth": 2, "dim": 32, "heads": 4, "mlp_ratio": 2.0}
SIZE, CLASSES, BATCH, STEPS, LR, DECAY, CLIP = 16, 10, 16, 50, 2e-3, 0.05, 1.0
MEAN, STD = [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]
PROTOCOLS = [
    {"autoaug": aa, "cutmix": cm, "ls": ls} for aa in (False, True) for cm in (False, True) for ls in (0.0, 0.1)
] + [{"mixup": True}, {"erasing": True, "ls": 0.1}]
SEEDS = list(range(len(PROTOCOLS)))
TOLERANCE = 1e-5


def make_cell(protocol: dict, seed: int) -> ViTClassifier:
    """One ordinary cell: its model initialised from its own seed, its augmentation on the device."""
    trained = TrainingProtocol(**{"policy": "cifar10", **protocol})
    torch.manual_seed(seed)
    return ViTClassifier(
        CLASSES, SIZE, MEAN, STD, ARCH, trained, batch_augment=BatchAugment(SIZE, trained, grouping="select")
    )


def batches() -> tuple[torch.Tensor, torch.Tensor]:
    """Each cell's own batches (cells, steps, B, 3, H, W) uint8: a class colours its image, plus noise."""
    generator = torch.Generator().manual_seed(7)
    labels = torch.randint(CLASSES, (len(PROTOCOLS), STEPS, BATCH), generator=generator)
    colours = torch.randint(256, (CLASSES, 3), generator=generator).float()
    noise = torch.randn(len(PROTOCOLS), STEPS, BATCH, 3, SIZE, SIZE, generator=generator) * 40
    images = (colours[labels][..., None, None] + noise).clamp(0, 255).to(torch.uint8)
    return images, labels


def alone(images: torch.Tensor, labels: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """Each cell trained by itself, step by step as its training_step does: reseed, the protocol's loss, AdamW."""
    states = []
    for index, protocol in enumerate(PROTOCOLS):
        cell = make_cell(protocol, SEEDS[index])
        optimizer = adamw_with_decay_groups(cell.model, LR, DECAY, (0.9, 0.999))
        for step in range(STEPS):
            reseed_for_batch(SEEDS[index], 0, step, torch.device("cpu"))
            loss = cell.augmented_loss(images[index, step], labels[index, step])[0]
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(cell.parameters(), CLIP)
            optimizer.step()
        states.append(cell.model.state_dict())
    return states


def train_pack(
    images: torch.Tensor,
    labels: torch.Tensor,
    smoothing_order: Callable[[torch.Tensor], torch.Tensor] = lambda s: s,
    share_moment: bool = False,
) -> FusedViT:
    """The cells trained as one pack: the same cells, one fused model stacked from theirs, one AdamW."""
    cells = [make_cell(protocol, seed) for protocol, seed in zip(PROTOCOLS, SEEDS, strict=True)]
    model = FusedViT(len(cells), CLASSES, SIZE, **ARCH)
    model.load_cells([cell.model.state_dict() for cell in cells])
    optimizer = fused_adamw(model, LR, DECAY, (0.9, 0.999))
    smoothing = smoothing_order(torch.tensor([cell.protocol.ls for cell in cells]))
    for step in range(STEPS):

        def reseed(index: int, step: int = step) -> None:
            reseed_for_batch(SEEDS[index], 0, step, torch.device("cpu"))

        losses = pack_loss(model, cells, images[:, step], labels[:, step], smoothing, reseed)[0]
        optimizer.zero_grad()
        losses.sum().backward()
        clip_per_cell(list(model.parameters()), CLIP)
        optimizer.step()
        if share_moment:  # a broken fusion: one first moment for all cells
            for state in optimizer.state.values():
                state["exp_avg"].copy_(state["exp_avg"].mean(dim=0, keepdim=True).expand_as(state["exp_avg"]))
    return model


def without_key_bias(name: str, value: torch.Tensor) -> torch.Tensor:
    """A parameter, less the keys' part of a qkv bias: softmax ignores a shift shared by a query's scores, so its
    gradient is zero in exact arithmetic and rounding noise that AdamW scales to +-lr a step, in any two runs."""
    if not name.endswith("attn.qkv.bias"):
        return value.flatten()
    dim = ARCH["dim"]
    return torch.cat([value[:dim], value[2 * dim :]])


def distances(model: FusedViT, states: list[dict[str, torch.Tensor]]) -> list[float]:
    """Each cell's relative distance from its lone twin, its parameters as one vector (without_key_bias)."""
    result = []
    for index, state in enumerate(states):
        mine = model.cell_state_dict(index)
        gap = torch.cat([without_key_bias(name, mine[name] - value) for name, value in state.items()]).norm()
        size = torch.cat([without_key_bias(name, value) for name, value in state.items()]).norm()
        result.append(float(gap / size))
    return result


def logit_distances(model: FusedViT, states: list[dict[str, torch.Tensor]], images: torch.Tensor) -> list[float]:
    """Each cell's relative distance from its lone twin in logits on its first batch (the key bias included)."""
    inputs = (images[:, 0].float() - 127.5) / 64.0
    with torch.no_grad():
        fused = model(inputs)
        result = []
        for index, state in enumerate(states):
            lone = VisionTransformer(CLASSES, SIZE, **ARCH)
            lone.load_state_dict(state)
            alone_logits = lone(inputs[index])
            result.append(float((fused[index] - alone_logits).norm() / alone_logits.norm()))
    return result


@pytest.fixture(scope="module")
def data_and_alone(trains: object) -> tuple[torch.Tensor, torch.Tensor, list[dict[str, torch.Tensor]]]:
    """50 steps of each lone cell: a training loop (the slow tier)."""
    images, labels = batches()
    return images, labels, alone(images, labels)


def test_a_cells_state_is_a_lone_models_state() -> None:
    cells = [VisionTransformer(CLASSES, SIZE, **ARCH) for _ in range(3)]
    model = FusedViT(3, CLASSES, SIZE, **ARCH)
    model.load_cells([cell.state_dict() for cell in cells])
    assert sum(p.numel() for p in model.parameters()) == 3 * sum(p.numel() for p in cells[0].parameters())
    lone = VisionTransformer(CLASSES, SIZE, **ARCH)
    lone.load_state_dict(model.cell_state_dict(1))  # strict: same names and shapes
    images = torch.randn(3, 5, 3, SIZE, SIZE)
    fused = model(images)
    for index, cell in enumerate(cells):
        torch.testing.assert_close(fused[index], cell(images[index]), rtol=1e-5, atol=1e-6)


def test_each_cell_of_a_pack_ends_where_it_ends_alone(data_and_alone: tuple) -> None:
    images, labels, states = data_and_alone
    model = train_pack(images, labels)
    gaps, logit_gaps = distances(model, states), logit_distances(model, states, images)
    assert max(gaps) < TOLERANCE and max(logit_gaps) < TOLERANCE, (gaps, logit_gaps)


@pytest.mark.parametrize(
    "broken",
    [
        {"smoothing_order": lambda s: s.roll(1)},  # one cell's label smoothing applied to another
        {"share_moment": True},  # one AdamW first moment shared by the cells
    ],
    ids=["smoothing of another cell", "shared AdamW moment"],
)
def test_a_broken_fusion_is_seen(data_and_alone: tuple, broken: dict) -> None:
    images, labels, states = data_and_alone
    assert max(distances(train_pack(images, labels, **broken), states)) > 100 * TOLERANCE
