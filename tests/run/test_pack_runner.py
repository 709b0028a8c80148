"""A pack's cells are ordinary cells (run/pack.py): each complete with its own record, log, statistics and a final
checkpoint the single-cell code loads; each trains as it would in a pack of its own; a pack stopped mid-epoch resumes
every cell bit for bit; a cell whose loss goes non-finite fails alone while the others end as they would have."""

from __future__ import annotations

import csv
import json
import os
import signal
from pathlib import Path

import pytest
import torch
from helpers import QUICK, settings_for

from vit_locality.config.identity import identity_hash
from vit_locality.model.classifier import ViTClassifier
from vit_locality.run import pack
from vit_locality.run.cell import CellInterrupted
from vit_locality.run.checkpoints import last_checkpoint
from vit_locality.run.pack_state import PACK_ENTRY, pack_checkpoint
from vit_locality.run.start import load_start_weights

PACKED = [
    "sweep.packed=true",  # as hydra/launcher=packed sets it in a job
    *QUICK,
    "trainer.max_epochs=2",
    "data.train_size=128",
    "data.batch_size=32",
    "stats.probe_size=16",
]
PROTOCOLS = {
    "baseline": ["aug.autoaug=false", "aug.cutmix=false", "loss.ls=0"],
    "modern": ["aug.autoaug=true", "aug.cutmix=true", "loss.ls=0.1"],
    "mixup_erasing": ["aug.autoaug=false", "aug.cutmix=false", "aug.mixup=true", "aug.erasing=true", "seed=1"],
}
STEPS_PER_EPOCH = 4  # 128 images in batches of 32


def entries(root: Path, names: list[str] | None = None) -> list[tuple]:
    names = names or list(PROTOCOLS)
    return [(settings_for([*PACKED, *PROTOCOLS[name]]), root / name) for name in names]


def final_state(run_dir: Path) -> dict[str, torch.Tensor]:
    """The cell's final weights and AdamW moments, from its last.ckpt."""
    checkpoint = torch.load(last_checkpoint(run_dir), map_location="cpu", weights_only=True)
    moments = checkpoint[PACK_ENTRY]["moments"]
    state = dict(checkpoint["state_dict"])
    state |= {f"adam.{name}.{i}": pair[i] for name, pair in moments.items() for i in (0, 1)}
    return state


def relative_gap(one: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> float:
    weights = [name for name in one if not name.startswith("adam.")]
    gap = torch.cat([(one[n] - other[n]).flatten() for n in weights]).norm()
    return float(gap / torch.cat([one[n].flatten() for n in weights]).norm())


@pytest.fixture(scope="module")
def packed_grid(trains, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three cells trained as one pack, untouched by the tests that read them."""
    root = tmp_path_factory.mktemp("pack")
    records = trains.run_pack_as_train(entries(root))
    assert all(record is not None and record["status"] == "complete" for record in records)
    return root


def test_each_packed_cell_is_an_ordinary_cell(trains, packed_grid: Path) -> None:
    for name, extra in PROTOCOLS.items():
        run_dir = packed_grid / name
        record = json.loads((run_dir / "results.json").read_text())
        settings = settings_for([*PACKED, *extra])
        alone = settings.model_copy(update={"sweep": settings.sweep.model_copy(update={"packed": False})})
        assert settings.packs and settings.data_on_device and not alone.packs
        assert record["status"] == "complete" and record["packed"] == {"pack_id": "test-pack", "cells": 3}
        assert record["identity_hash"] == identity_hash(settings) != identity_hash(alone)
        assert record["epochs"] == 2 and record["steps"] == 2 * STEPS_PER_EPOCH
        assert 0.0 <= record["metrics"]["test/acc1"] <= 1.0 and "test_epoch/acc1" in record["metrics"]
        assert record["attention"]["final"] and record["attention"]["noise_band"]
        epochs = {int(row["epoch"]) for row in csv.DictReader((run_dir / "attention_stats.csv").open())}
        assert epochs == {0, 1, 2}
        logged = [row for row in csv.DictReader((run_dir / "csv" / "metrics.csv").open()) if row["train/acc1"]]
        assert [float(row["epoch"]) for row in logged] == [1.0, 2.0]
        # the single-cell code reads its checkpoint: a ViTClassifier of the cell's settings loads it strictly
        checkpoint = torch.load(last_checkpoint(run_dir), map_location="cpu", weights_only=True)
        module = ViTClassifier(10, 32, [0.5] * 3, [0.25] * 3, settings.model.architecture(), settings.protocol)
        load_start_weights(module, checkpoint["state_dict"], str(last_checkpoint(run_dir)))
        assert not pack_checkpoint(run_dir).exists()


def test_a_complete_pack_is_skipped_when_its_command_runs_again(trains, packed_grid: Path, caplog) -> None:
    before = {name: (packed_grid / name / "results.json").read_bytes() for name in PROTOCOLS}
    with caplog.at_level("INFO", logger="vit_locality"):
        records = trains.run_pack_as_train(entries(packed_grid))
    assert [record["status"] for record in records] == ["complete"] * 3
    assert {name: (packed_grid / name / "results.json").read_bytes() for name in PROTOCOLS} == before
    assert caplog.text.count("is complete already: skipped") == 3


def test_a_cell_trains_in_a_pack_as_in_a_pack_of_its_own(trains, packed_grid: Path, tmp_path: Path) -> None:
    """Nothing of one cell reaches another: its smoothing, seed, draws and data order are its own."""
    for name in PROTOCOLS:
        trains.run_pack_as_train(entries(tmp_path, [name]))
        gap = relative_gap(final_state(packed_grid / name), final_state(tmp_path / name))
        assert gap < 1e-5, (name, gap)


def stop_at(monkeypatch: pytest.MonkeyPatch, call: int, action) -> None:
    """Run `action(losses)` on the pack's `call`-th loss (counted from 1), as a test seam in pack_loss."""
    calls = {"count": 0}
    real = pack.pack_loss

    def counted(*args, **kwargs):
        losses, logits, references = real(*args, **kwargs)
        calls["count"] += 1
        if calls["count"] == call:
            losses = action(losses)
        return losses, logits, references

    monkeypatch.setattr(pack, "pack_loss", counted)


def test_a_pack_stopped_mid_epoch_resumes_every_cell_bit_exactly(
    trains, packed_grid: Path, tmp_path: Path, monkeypatch, caplog
) -> None:
    def sigterm(losses: torch.Tensor) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGTERM)
        return losses

    stop_at(monkeypatch, STEPS_PER_EPOCH + 2, sigterm)  # epoch 2, its second step
    with pytest.raises(CellInterrupted) as stopped:
        trains.run_pack_as_train(entries(tmp_path))
    assert stopped.value.exit_code == 143
    for name in PROTOCOLS:
        record = json.loads((tmp_path / name / "results.json").read_text())
        assert record["status"] == "interrupted" and record["error"] == "SIGTERM"
        progress = torch.load(pack_checkpoint(tmp_path / name), weights_only=True)[PACK_ENTRY]
        assert (progress["epoch"], progress["step"]) == (1, 2)
    monkeypatch.undo()
    with caplog.at_level("INFO", logger="vit_locality"):
        records = trains.run_pack_as_train(entries(tmp_path))
    assert "pack of 3 cells on cpu, from epoch 2/2, step 3/4" in caplog.text  # not a fresh start
    assert [record["status"] for record in records] == ["complete"] * 3
    for name in PROTOCOLS:
        resumed, unbroken = final_state(tmp_path / name), final_state(packed_grid / name)
        assert resumed.keys() == unbroken.keys()
        assert all(torch.equal(resumed[key], unbroken[key]) for key in unbroken), name
        first = json.loads((packed_grid / name / "results.json").read_text())["metrics"]
        again = json.loads((tmp_path / name / "results.json").read_text())["metrics"]
        assert again == first, name


def test_a_cell_whose_loss_goes_nonfinite_fails_alone(trains, packed_grid: Path, tmp_path: Path, monkeypatch) -> None:
    def poison(losses: torch.Tensor) -> torch.Tensor:
        return losses * torch.tensor([1.0, float("nan"), 1.0])

    stop_at(monkeypatch, 3, poison)
    records = trains.run_pack_as_train(entries(tmp_path))
    assert records[1] is None and records[0] is not None and records[2] is not None
    failed = json.loads((tmp_path / "modern" / "results.json").read_text())
    assert failed["status"] == "failed" and failed["error"].startswith("NonFiniteLossError")
    for name in ("baseline", "mixup_erasing"):  # the others end where they end without the failure
        assert json.loads((tmp_path / name / "results.json").read_text())["status"] == "complete"
        gap = relative_gap(final_state(packed_grid / name), final_state(tmp_path / name))
        assert gap < 1e-5, (name, gap)


@pytest.mark.parametrize(
    ("raised", "status", "error"),
    [
        (KeyboardInterrupt(), "interrupted", "interrupted"),
        (RuntimeError("disk gone"), "failed", "RuntimeError: disk gone"),
    ],
)
def test_a_pack_stopped_outside_its_steps_records_every_cell(
    trains, tmp_path: Path, monkeypatch, raised: BaseException, status: str, error: str
) -> None:
    """A second Ctrl-C (KeyboardInterrupt at once) or an error in the step: no cell is left `running`."""

    def stop(losses: torch.Tensor) -> torch.Tensor:
        raise raised

    stop_at(monkeypatch, 3, stop)
    expected = CellInterrupted if isinstance(raised, KeyboardInterrupt) else RuntimeError
    with pytest.raises(expected) as caught:
        trains.run_pack_as_train(entries(tmp_path))
    if expected is CellInterrupted:
        assert caught.value.exit_code == 130
    for name in PROTOCOLS:
        record = json.loads((tmp_path / name / "results.json").read_text())
        assert (record["status"], record["error"]) == (status, error), name
