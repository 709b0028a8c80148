"""The optimiser of the study: AdamW with weight decay on the weight matrices only, and a per-batch linear warm-up
plus cosine schedule whose length is the number of optimiser steps the run really takes. Every expected number is
worked out by hand from the architecture and the schedule's formula."""

from __future__ import annotations

import math
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from helpers import InProcessTraining, typed

from vit_locality.model.classifier import warmup_cosine, warmup_cosine_schedule
from vit_locality.run.builders import build_datamodule, build_module, split_global_batch

# The tiny runs below: 64 synthetic images in global batches of 8 (8 steps an epoch), warm-up 1 epoch, cosine to 0.
TINY_RUN = [
    "data=synthetic",
    "model=vit_tiny",
    "trainer=cpu",
    "protocol=baseline",
    "data.train_size=64",
    "data.test_size=16",
    "data.batch_size=8",
    "data.num_workers=0",
    "optim.lr=0.001",
    "optim.warmup_epochs=1",
    "optim.min_lr_ratio=0.0",
]


def _paper_module():
    cfg = typed(["model=vit_paper", "data=synthetic", "data.num_classes=100", "trainer=cpu"])
    datamodule = build_datamodule(cfg)
    return build_module(cfg, datamodule)


def test_weight_decay_falls_on_the_34_weight_matrices_only() -> None:
    """Decay shrinks weights towards 0; on biases, LayerNorm gains, the CLS token or the position embeddings it
    would only pull the model towards a worse function, so the paper model decays exactly its 34 matrices: per
    block qkv, proj and the two MLP layers (4 x 8 = 32), plus the patch-embedding conv and the head."""
    module = _paper_module()
    # configure_optimizers reads the run length from the trainer; a stand-in with 100 steps over 10 epochs.
    module.trainer = SimpleNamespace(estimated_stepping_batches=100, max_epochs=10)
    config = module.configure_optimizers()
    optimizer = config["optimizer"]
    assert isinstance(optimizer, torch.optim.AdamW) and config["lr_scheduler"]["interval"] == "step"
    decay, no_decay = optimizer.param_groups
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.05, 0.0)  # conf/optim/adamw.yaml
    # 10 steps an epoch, so the 5 warm-up epochs are 50 steps: the first step trains at 1/50 of the peak 1e-3.
    assert decay["lr"] == pytest.approx(1e-3 / 50) and decay["betas"] == (0.9, 0.999)

    names = {id(p): n for n, p in module.model.named_parameters()}
    decayed = {names[id(p)]: tuple(p.shape) for p in decay["params"]}
    matrices = {"patch_embed.weight": (192, 3, 4, 4), "head.weight": (100, 192)}
    for i in range(8):  # Linear weights are (out, in): qkv 192 -> 576, proj 192 -> 192, MLP 192 -> 384 -> 192
        matrices |= {
            f"blocks.{i}.attn.qkv.weight": (576, 192),
            f"blocks.{i}.attn.proj.weight": (192, 192),
            f"blocks.{i}.mlp.0.weight": (384, 192),
            f"blocks.{i}.mlp.2.weight": (192, 384),
        }
    assert decayed == matrices and len(decayed) == 34
    # Per block 110,592 + 36,864 + 73,728 + 73,728 = 294,912; x 8 = 2,359,296; + 9,216 (conv) + 19,200 (head).
    assert 8 * (576 * 192 + 192 * 192 + 384 * 192 + 192 * 384) + 192 * 3 * 4 * 4 + 100 * 192 == 2_387_712
    assert sum(p.numel() for p in decay["params"]) == 2_387_712

    exempt = [names[id(p)] for p in no_decay["params"]]
    assert len(exempt) == len(set(exempt)) == 70  # 8 per block (4 biases, 2 LayerNorms x 2) + 6 outside
    assert set(exempt) | set(decayed) == set(names.values())
    assert all(
        n.endswith(".bias") or ".norm" in n or n.startswith("norm.") or n in ("cls_token", "pos_embed") for n in exempt
    )
    assert {"cls_token", "pos_embed", "norm.weight", "norm.bias", "patch_embed.bias", "head.bias"} <= set(exempt)
    # Per block 576 + 192 + 384 + 192 (biases) + 4 x 192 (norms) = 2,112; x 8 = 16,896; + 192 (conv bias)
    # + 192 (CLS) + 65 x 192 = 12,480 (positions) + 384 (final norm) + 100 (head bias) = 30,244.
    assert sum(p.numel() for p in no_decay["params"]) == 30_244 == 2_417_956 - 2_387_712


def test_warmup_cosine_by_hand() -> None:
    """Warm-up 10 of 110 steps to a floor of 0.1: linear (step + 1) / 10, then 0.1 + 0.9 x (1 + cos(pi t)) / 2
    over the remaining 100 steps, held at the floor past the end."""
    assert warmup_cosine(0, 10, 110, 0.1) == pytest.approx(0.1)  # the first step already trains, at 1/10
    assert warmup_cosine(4, 10, 110, 0.1) == pytest.approx(0.5)
    assert warmup_cosine(9, 10, 110, 0.1) == pytest.approx(1.0)  # the end of warm-up reaches the peak ...
    assert warmup_cosine(10, 10, 110, 0.1) == pytest.approx(1.0)  # ... and the cosine starts there (t = 0)
    assert warmup_cosine(35, 10, 110, 0.1) == pytest.approx(0.1 + 0.45 * (1 + math.sqrt(0.5)))  # t = 1/4
    assert warmup_cosine(60, 10, 110, 0.1) == pytest.approx(0.55)  # t = 1/2: halfway between peak and floor
    assert warmup_cosine(110, 10, 110, 0.1) == pytest.approx(0.1)  # t = 1: the floor
    assert warmup_cosine(500, 10, 110, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(110, 10, 110, 0.0) == pytest.approx(0.0)


def test_warmup_is_given_in_epochs_of_the_run() -> None:
    """CIFAR at batch 128 takes 50,000 // 128 = 390 steps an epoch: 200 epochs are 78,000 steps and a 5-epoch
    warm-up is 1,950 of them, the cosine's midpoint at 1,950 + 76,050 / 2 = 39,975."""
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    factor = warmup_cosine_schedule(optimizer, 78_000, 200, 5.0, 0.0).lr_lambdas[0]
    assert factor(0) == pytest.approx(1 / 1950)
    assert factor(1948) == pytest.approx(1949 / 1950) and factor(1949) == pytest.approx(1.0)
    assert factor(39_975) == pytest.approx(0.5)
    assert factor(78_000) == pytest.approx(0.0)


class _LearningRates(L.Callback):
    """The learning rate of every param group as each batch starts, i.e. the one its optimiser step uses."""

    def __init__(self) -> None:
        self.per_batch: list[list[float]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.per_batch.append([group["lr"] for group in trainer.optimizers[0].param_groups])


def _fit(max_epochs: int, overrides: tuple[str, ...] = (), **trainer_options) -> tuple[L.Trainer, list[list[float]]]:
    """A tiny in-process fit of TINY_RUN (and `overrides`: the module takes accumulation from the config); the trainer
    and the learning rate of each batch."""
    torch.manual_seed(0)
    cfg = typed([*TINY_RUN, *overrides])
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    rates = _LearningRates()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        callbacks=[rates],
        **trainer_options,
    )
    trainer.fit(module, datamodule=datamodule)
    return trainer, rates.per_batch


def test_schedule_steps_every_batch(trains: InProcessTraining) -> None:
    """2 epochs of 8 batches: 16 steps, warm-up 8. Stepped per batch, batch j trains at 1e-3 x f(j): j / 8 of the
    peak rising through the first epoch, then the cosine over 8 steps (f(12) = 1/2, f(15) = (1 + cos(7 pi / 8)) / 2).
    Stepped per epoch, the whole first epoch would train at 1/8 of the peak."""
    trainer, per_batch = _fit(max_epochs=2)
    assert trainer.estimated_stepping_batches == 16 and trainer.global_step == 16
    assert all(len(set(rates)) == 1 for rates in per_batch)  # both param groups follow the schedule
    lr = [rates[0] for rates in per_batch]
    expected = {0: 1 / 8, 1: 2 / 8, 3: 4 / 8, 7: 1.0, 8: 1.0, 12: 0.5, 15: (1 + math.cos(7 * math.pi / 8)) / 2}
    assert {j: lr[j] for j in expected} == pytest.approx({j: 1e-3 * f for j, f in expected.items()})


def test_schedule_length_counts_optimiser_steps(trains: InProcessTraining) -> None:
    """The cosine must end on the run's last optimiser step, so its length is Lightning's
    `estimated_stepping_batches`: epochs x ceil(batches an epoch / accumulation). Here 3 epochs of 5 batches
    (limit_train_batches) with accumulate_grad_batches=2: ceil(5 / 2) = 3 steps an epoch (the epoch's last, odd
    batch steps alone), 9 in all, warm-up round(1 epoch x 9 // 3) = 3. Batch j of epoch e trains after
    3 e + j // 2 steps, at f = 1/3, 2/3, 1, then (1 + cos(pi t)) / 2 for t = 0, 1/6, ..., 5/6.

    Under DDP nothing changes: `data.batch_size` is the global batch, which `builders.split_global_batch` divides
    by the number of processes, and each process reads its 1/W share of the samples (EpochShardSampler). A process
    so takes (N / W) / (B / W) = N / B batches an epoch, the single-process count, and Lightning estimates the
    steps from that process's loader: the schedule has the same length on any number of devices. The last test
    checks the loaders' lengths."""
    trainer, per_batch = _fit(3, limit_train_batches=5, accumulate_grad_batches=2)
    assert trainer.estimated_stepping_batches == 3 * math.ceil(5 / 2) == 9
    assert trainer.global_step == 9  # the estimate is the number of steps taken
    f = [1 / 3, 2 / 3, 1.0, 1.0, (1 + math.sqrt(3) / 2) / 2, 0.75, 0.5, 0.25, (1 - math.sqrt(3) / 2) / 2]
    steps_before = [3 * epoch + j // 2 for epoch in range(3) for j in range(5)]
    assert [rates[0] for rates in per_batch] == pytest.approx([1e-3 * f[s] for s in steps_before])


def test_a_run_without_an_epoch_limit_warms_up_over_epochs_of_its_loader(trains: InProcessTraining) -> None:
    """`trainer.max_epochs=-1` with `max_steps=12`: the run is 12 steps, the warm-up 1 epoch of the loader's 8 steps
    (j + 1) / 8, then the cosine over the last 4 steps: f(8) = 1, f(10) = 1/2. Counted as one epoch of 12 steps, the
    warm-up would end at step 12 and the rate never decay."""
    trainer, per_batch = _fit(-1, max_steps=12)
    assert trainer.global_step == 12
    expected = {0: 1 / 8, 3: 4 / 8, 7: 1.0, 8: 1.0, 10: 0.5, 11: (1 + math.cos(3 * math.pi / 4)) / 2}
    lr = [rates[0] for rates in per_batch]
    assert {j: lr[j] for j in expected} == pytest.approx({j: 1e-3 * f for j, f in expected.items()})


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_each_process_takes_the_single_process_number_of_batches(world_size: int) -> None:
    """512 images in global batches of 64 are 8 steps an epoch; with W processes each loads 64 / W images a step
    from its 512 / W samples: still 8 batches, on every rank, so DDP leaves the schedule's length unchanged."""
    cfg = typed([*TINY_RUN, "data.train_size=512", "data.batch_size=64"])
    for rank in range(world_size):
        datamodule = build_datamodule(cfg)
        split_global_batch(datamodule, world_size)
        assert datamodule.batch_size == 64 // world_size
        datamodule.trainer = SimpleNamespace(
            world_size=world_size, global_rank=rank, strategy=SimpleNamespace(root_device=torch.device("cpu"))
        )
        assert len(datamodule.train_dataloader()) == 512 // 64
