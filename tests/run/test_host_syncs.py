"""Host syncs per training step: the counter sees every read a GPU would wait for, and every cell's on-device
training steps (real Lightning steps, on the CPU) make none outside the periodic non-finite check and Lightning's
logging steps."""

from __future__ import annotations

from pathlib import Path

import host_syncs as cells
import pytest
import torch
from helpers import InProcessTraining
from host_syncs import HostSyncCounter

import vit_locality.augment.batched_autoaugment as batched
import vit_locality.augment.mixing as mixing


def _ops(counter: HostSyncCounter) -> list[str]:
    return [op for op, _ in counter.events]


def test_counter_sees_each_kind_of_host_read_and_names_its_cause() -> None:
    t = torch.arange(6.0)
    with HostSyncCounter() as counter:
        t.sum().item()
        float(t[1])
        bool(t[2] > 1)
        t.nonzero()
        t[t > 2]
        t.tolist()
        t.cpu()
        torch.unique(t)
    assert _ops(counter) == ["item", "item", "item", "nonzero", "boolean mask index", "tolist", "cpu", "unique"]
    assert all(cause.startswith("tests/run/test_host_syncs.py:") for _, cause in counter.events)
    assert all(
        cause.endswith(" test_counter_sees_each_kind_of_host_read_and_names_its_cause") for _, cause in counter.events
    )


def test_counter_ignores_device_side_work_and_restores_tensor_methods() -> None:
    original = torch.Tensor.tolist
    t = torch.arange(6.0)
    with HostSyncCounter() as counter:
        torch.where(t > 2, t, -t).sum()
        t[torch.tensor([0, 2])]  # integer index: fixed size
        torch.randperm(6)
    assert counter.events == [] and torch.Tensor.tolist is original


def test_host_resident_tensors_are_not_counted() -> None:
    host = torch.tensor(3.0)
    with HostSyncCounter(host_resident=lambda tensor: tensor is host) as counter:
        host.tolist()
        float(host)
        torch.arange(2.0).tolist()
    assert _ops(counter) == ["tolist"]


def test_values_made_on_the_device_are_copies_and_host_tensors_are_free() -> None:
    """`torch.tensor(values, device=...)` is a copy from pageable memory on a GPU; a tensor made with no device, what
    `.cpu()` returns and what is computed from host tensors alone are read without waiting for a device."""
    device_side = torch.arange(4.0)
    with HostSyncCounter() as counter:
        torch.tensor([1.0, 2.0], device=device_side.device)
        torch.as_tensor(3.0, device=device_side.device)
        host = torch.tensor(0.5)
        float(host * 2)
        moved = device_side.cpu()
        moved.sum().item()
        device_side.sum().item()
    assert _ops(counter) == ["from Python values", "from Python values", "cpu", "item"]


@pytest.mark.parametrize("cell", list(cells.CELLS))
def test_every_cell_trains_without_host_syncs_but_the_allowed_ones(
    cell: str, trains: InProcessTraining, tmp_path: Path
) -> None:
    """The real cell as a GPU runs it: no event on a quiet step or a validation batch, at most 0.1 per step at a
    GPU run's schedule, and the non-finite flag read at the logging steps and each epoch's end only."""
    counts = cells.count_cell(cells.CELLS[cell], tmp_path)
    assert cells.unexpected(counts) == []
    per_step, quiet, causes = cells.summary(counts)
    assert quiet == 0 and not causes and per_step <= 0.1, (per_step, quiet, causes)
    train = cells.steps(counts)
    checks = [step for step, c in enumerate(train) for cause in c if cause.endswith(" on_train_batch_end")]
    assert checks == [s for s in range(len(train)) if cells.logging_step(s) or cells.last_step(s)]


def test_a_host_read_in_cutmix_fails_the_count(
    monkeypatch: pytest.MonkeyPatch, trains: InProcessTraining, tmp_path: Path
) -> None:
    """The mutant: CutMix reading its lambda on the host again, as it did before."""
    real = mixing.cutmix_batch

    def reading(*args, **kwargs):
        result = real(*args, **kwargs)
        float(result.kept)
        return result

    monkeypatch.setattr(mixing, "cutmix_batch", reading)
    found = cells.unexpected(cells.count_cell(cells.CELLS["aa0_cm1_ls1"], tmp_path))
    assert len(found) >= cells.STEPS - 3 and all(cause.endswith(" reading") for _, cause in found)


def test_autoaugment_groups_on_a_cpu_and_selects_without_host_reads_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU groups (its host reads are free); the GPU path, `select`, reads nothing on the host."""
    images = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    draws = batched.draw(16, torch.Generator().manual_seed(1))
    grouped = batched.apply(images, draws)  # also fills the magnitude cache, read once from torchvision's tables
    with HostSyncCounter() as counter:
        batched.apply(images, draws)
    assert {"nonzero", "unique_consecutive", "tolist"} <= set(_ops(counter))
    monkeypatch.setitem(batched.GROUPING_BY_DEVICE, "cpu", "select")
    batched.apply(images, draws)  # `select` reads every op's magnitudes: the cache filled once, as on a first batch
    with HostSyncCounter() as counter:
        selected = batched.apply(images, draws)
    assert counter.events == [] and torch.equal(selected, grouped)


def test_epoch_figures_are_read_in_one_copy_per_device_and_dtype() -> None:
    """The progress line and the checkpoint stamp read the epoch's figures: each as float() gives it, and one read
    per (device, dtype), not one per figure; a figure of several numbers is left out."""
    from vit_locality.run.checkpoints import host_numbers

    figures = {
        "val/loss": torch.tensor(0.1234567, dtype=torch.float32) + torch.zeros(()),
        "val/acc1": torch.tensor([0.5]),
        "lr": torch.tensor(1e-3, dtype=torch.float64) * 1,
        "steps": torch.arange(3)[2],
        "per_head": torch.arange(4.0),
    }
    with HostSyncCounter() as counter:
        numbers = host_numbers(figures)
    assert numbers == {name: float(value) for name, value in figures.items() if value.numel() == 1}
    assert _ops(counter) == ["tolist"] * 3  # float32, float64, int64
