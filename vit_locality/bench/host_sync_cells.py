"""Host syncs per training step of every cell on the on-device data path, counted by `HostSyncCounter` over real
Lightning training steps (`Trainer.fit`, on the CPU: the counter sees on a CPU what would stall a GPU).

A step's segment runs from one `on_train_batch_start` to the next, so it holds the step itself, its hooks and the
fetch of the next batch (Lightning fetches one ahead; the on-device loader augments there); the first step's
also holds the first batch's fetch. The non-finite check
runs every `CHECK_EVERY` steps as on a GPU, and Lightning logs every `LOG_EVERY` steps: those steps may add the
syncs named in `ALLOWED`, the others must add none. AutoAugment runs sync-free (`select`), as on a GPU: a CPU run
groups by default, its host reads being free.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

import vit_locality.augment.batched_autoaugment as batched
from vit_locality.bench.common import bench_config
from vit_locality.bench.host_syncs import HostSyncCounter
from vit_locality.run.builders import build_datamodule, build_module

# The 8 cells (aug.autoaug x aug.cutmix x loss.ls), then CutMix on half the batches, then MixUp.
CELLS: dict[str, tuple[str, ...]] = {
    f"aa{int(aa)}_cm{int(cm)}_ls{int(ls)}": (f"aug.autoaug={aa}", f"aug.cutmix={cm}", f"loss.ls={0.1 if ls else 0}")
    for aa in (False, True)
    for cm in (False, True)
    for ls in (False, True)
} | {
    "aa1_cm0.5_ls1": ("aug.autoaug=true", "aug.cutmix=true", "aug.cutmix_prob=0.5", "loss.ls=0.1"),
    "aa0_mixup_ls0": ("aug.autoaug=false", "aug.cutmix=false", "aug.mixup=true", "loss.ls=0"),
}
BATCH, STEPS = 8, 8  # one epoch of 8 steps
CHECK_EVERY, LOG_EVERY = 4, 3
# Syncs a step may have, by the function that asks: the periodic non-finite check, Lightning's logging. On the
# first step only, reads of tensors that are on the host in a GPU run too (no sync there): the epoch's order (drawn
# on the CPU once per epoch) and torchvision's AutoAugment magnitude tables (read once per process, then cached).
ALLOWED = ("on_train_batch_end", "to_item")
ALLOWED_FIRST = ("epoch_order", "_magnitude")


class _Steps(Callback):
    """Start a counter segment at every training step and one for what follows training (teardown)."""

    def __init__(self, counter: HostSyncCounter) -> None:
        self.counter = counter

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.counter.mark(0)  # the first batch's fetch belongs to the first step

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.counter.mark(batch_idx)

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.counter.mark("after")


def count_cell(overrides: tuple[str, ...], model: str = "vit_tiny") -> list[Counter[str]]:
    """Per training step, {"op at cause": count} of one epoch of `STEPS` steps of the cell on on-device data."""
    cfg = bench_config(
        model,
        torch.device("cpu"),
        [
            *overrides,
            "data.on_device=true",
            f"data.train_size={BATCH * STEPS}",
            "data.test_size=16",
            f"data.batch_size={BATCH}",
            "data.num_workers=0",
            "model.compile=false",
        ],
    )
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    module.hparams.nonfinite_check_every = CHECK_EVERY  # the GPU's way: a flag on the device, read now and then
    counter = HostSyncCounter()
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        log_every_n_steps=LOG_EVERY,
        callbacks=[_Steps(counter)],
    )
    torch.manual_seed(0)
    gpu_grouping = {"cpu": "select"}  # count the AutoAugment a GPU runs (a CPU groups: its host reads are free)
    saved, batched.GROUPING_BY_DEVICE = batched.GROUPING_BY_DEVICE, gpu_grouping
    try:
        with counter:
            trainer.fit(module, datamodule=datamodule)
    finally:
        batched.GROUPING_BY_DEVICE = saved
    return [counter.by_cause(counter.segments.get(step, [])) for step in range(STEPS)]


def expected_steps(step: int) -> bool:
    """Whether training step `step` (0-based) may sync: a non-finite check or a logging step."""
    global_step = step + 1  # after the optimizer step, when on_train_batch_end runs
    return global_step % CHECK_EVERY == 0 or (step + 1) % LOG_EVERY == 0 or step == STEPS - 1


def unexpected(counts: list[Counter[str]]) -> list[tuple[int, str]]:
    """(step, "op at cause") of every sync outside the allowed ones on the steps that may have them."""
    found = []
    for step, counter in enumerate(counts):
        for cause in counter:
            allowed = expected_steps(step) and any(cause.endswith(f" {name}") for name in ALLOWED)
            allowed = allowed or (step == 0 and any(cause.endswith(f" {name}") for name in ALLOWED_FIRST))
            if not allowed:
                found.append((step, cause))
    return found


def summary(counts: list[Counter[str]]) -> tuple[float, float, Counter[str]]:
    """(syncs per step over the epoch, per step on the steps that may have none, the causes on those steps). The
    quiet steps leave out the first (it also fetches the first batch and fills one-time caches)."""
    quiet = [step for step in range(1, STEPS) if not expected_steps(step)]
    causes: Counter[str] = sum((counts[step] for step in quiet), Counter())
    total = sum(sum(counter.values()) for counter in counts)
    return total / STEPS, sum(causes.values()) / len(quiet), causes


def main() -> None:
    """Print every cell's syncs per step: `python -m vit_locality.bench.host_sync_cells`."""
    for name, overrides in CELLS.items():
        counts = count_cell(overrides)
        mean, quiet, causes = summary(counts)
        extra = len(unexpected(counts))
        print(f"{name}: {mean:.2f} per step, {quiet:.2f} on quiet steps, {extra} unexpected; {dict(causes)}")
        print(name, file=sys.stderr)
        for step, counter in enumerate(counts):
            print(f"  step {step}: {dict(counter)}", file=sys.stderr)


if __name__ == "__main__":
    main()
