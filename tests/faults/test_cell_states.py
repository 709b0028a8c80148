"""Every state a cell can be left in ends complete on the next run, and no record says more than happened.

In-process runs of one tiny cell (the same runner and callbacks as train.py), with real signals where a signal is
what users send.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import stat
from pathlib import Path

import pytest
import torch
from helpers import QUICK, InProcessTraining, Spawner, compose_config, typed

from vit_locality.data import synthetic
from vit_locality.errors import ConfigError
from vit_locality.model.classifier import ViTClassifier
from vit_locality.precheck.names import fitted_name, named_settings
from vit_locality.run import builders
from vit_locality.run.cell import CellInterrupted, run_cell
from vit_locality.run.record_sections import RECORD_VERSION
from vit_locality.store.record import read_record

CELL = [*QUICK, "trainer.max_epochs=2", "stats.pictures=false"]


def _status(run_dir: Path) -> str:
    return json.loads((run_dir / "results.json").read_text())["status"]


def _complete_twice(trains: InProcessTraining, run_dir: Path, args: list[str] = CELL) -> dict:
    """Run the cell again and check it ends complete with both epochs' statistics, once each."""
    record = trains.run_cell_as_train(compose_config(args), run_dir)
    assert record["status"] == "complete" and _status(run_dir) == "complete"
    epochs = [int(row["epoch"]) for row in csv.DictReader((run_dir / "attention_stats.csv").open())]
    assert sorted(set(epochs)) == [0, 1, 2] and len(epochs) == 3 * 4 * 4  # no evaluation doubled or lost
    assert "initial" in record["attention"]
    return record


def test_a_cell_whose_record_was_lost_after_its_last_checkpoint_finishes(
    tmp_path: Path, trains: InProcessTraining
) -> None:
    """Killed during the final probe or the test phase: last.ckpt is at max_epochs and the record says running."""
    run_dir = tmp_path / "run"
    first = trains.run_cell_as_train(compose_config(CELL), run_dir)
    record = json.loads((run_dir / "results.json").read_text())
    record["status"] = "running"
    (run_dir / "results.json").write_text(json.dumps(record))
    again = _complete_twice(trains, run_dir)
    assert again["metrics"]["test/acc1"] == first["metrics"]["test/acc1"]
    assert again["attention"]["initial"] == pytest.approx(first["attention"]["initial"])


def test_a_damaged_record_is_rewritten_by_finishing_the_cell(tmp_path: Path, trains: InProcessTraining) -> None:
    run_dir = tmp_path / "run"
    trains.run_cell_as_train(compose_config(CELL), run_dir)
    (run_dir / "results.json").write_text('{"status": "comp')
    _complete_twice(trains, run_dir)


def test_sigterm_between_fit_and_test_is_recorded_and_resumes(
    tmp_path: Path, monkeypatch, trains: InProcessTraining
) -> None:
    run_dir = tmp_path / "run"
    real = ViTClassifier.on_test_start

    def terminated(self) -> None:  # the signal a scheduler sends, delivered as the test phase starts
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(ViTClassifier, "on_test_start", terminated, raising=False)
    with pytest.raises(CellInterrupted) as stopped:
        trains.run_cell_as_train(compose_config(CELL), run_dir)
    assert stopped.value.exit_code == 143 and _status(run_dir) == "interrupted"
    monkeypatch.setattr(ViTClassifier, "on_test_start", real, raising=False)
    _complete_twice(trains, run_dir)


def test_sigterm_before_the_trainer_exists_leaves_a_record(
    tmp_path: Path, monkeypatch, trains: InProcessTraining
) -> None:
    run_dir = tmp_path / "run"
    real = builders.build_module

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr("vit_locality.run.cell.build_module", terminated)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(CellInterrupted):
        trains.run_cell_as_train(compose_config(CELL), run_dir)
    assert _status(run_dir) == "interrupted"
    assert signal.getsignal(signal.SIGTERM) == before  # the cell's handler does not outlive the cell


def test_no_training_batches_is_refused_before_anything_is_recorded(tmp_path: Path, trains: InProcessTraining) -> None:
    """`trainer.limit_train_batches=0` trains nothing: such a cell would record the untrained model's test figures as
    complete. Refused (the pre-check says so too, tests/precheck/test_trainer_options.py), nothing written."""
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"^trainer\.limit_train_batches=0 is not allowed: .*\(0 trains nothing"):
        trains.run_cell_as_train(compose_config([*CELL, "trainer.limit_train_batches=0"]), run_dir)
    assert not (run_dir / "results.json").exists()


# spawns: the failed cell's record holds the code's git commit (`git rev-parse`, run/record_sections.py).
def test_a_failure_building_the_callbacks_is_recorded(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "run"

    def broken(cfg, run_dir):
        raise RuntimeError("callback construction failed")

    with pytest.raises(RuntimeError):
        run_cell(typed(CELL), run_dir, broken)
    record = json.loads((run_dir / "results.json").read_text())
    assert record["status"] == "failed" and "callback construction failed" in record["error"]


def test_a_quick_check_is_never_taken_for_the_full_run(tmp_path: Path, trains: InProcessTraining) -> None:
    run_dir = tmp_path / "run"
    trains.run_cell_as_train(compose_config([*CELL, "trainer.limit_train_batches=1"]), run_dir)
    with pytest.raises(ConfigError, match="complete run with a different config"):
        trains.run_cell_as_train(compose_config(CELL), run_dir)
    assert read_record(run_dir).data["steps"] == 2  # the quick check's record is kept, untouched


def test_the_identity_covers_every_setting_that_changes_numbers() -> None:
    from vit_locality.config.identity import identity_hash

    base = identity_hash(typed(CELL))
    for change in (
        "trainer.gradient_clip_val=1.0",
        "trainer.limit_val_batches=1",
        "aug.device=gpu",
        "data.val_size=32",
        "model.compile=true",  # the compiled step's own random stream
    ):
        assert identity_hash(typed([*CELL, change])) != base, change
    for same in (
        *("data.num_workers=3", "callbacks.progress_bar=tqdm", "stats.pictures=true", "model.compile=false"),
        *("stats.probe_size=32", "stats.early_layers=1"),  # how the cell is measured: run/remeasure.py
    ):
        assert identity_hash(typed([*CELL, same])) == base, same


def test_a_complete_run_on_other_data_is_not_reused(tmp_path: Path, monkeypatch, trains: InProcessTraining) -> None:
    run_dir = tmp_path / "run"
    trains.run_cell_as_train(compose_config(CELL), run_dir)
    real = synthetic.generate_synthetic

    def other_labels(*args, **kwargs):
        images, labels = real(*args, **kwargs)
        return images, labels.roll(1)

    monkeypatch.setattr(synthetic, "generate_synthetic", other_labels)
    with pytest.raises(ConfigError, match="measured on other data"):
        trains.run_cell_as_train(compose_config(CELL), run_dir)
    assert _status(run_dir) == "complete"


def test_a_complete_run_that_records_no_data_fingerprint_is_not_reused(
    tmp_path: Path, trains: InProcessTraining
) -> None:
    """Reuse needs evidence of the same data: a record without a fingerprint is refused, never assumed to match."""
    run_dir = tmp_path / "run"
    trains.run_cell_as_train(compose_config(CELL), run_dir)
    record = json.loads((run_dir / "results.json").read_text())
    del record["data_fingerprint"]
    (run_dir / "results.json").write_text(json.dumps(record))
    with pytest.raises(ConfigError, match=r"measured on other data \(its data fingerprint \(none\) differs"):
        trains.run_cell_as_train(compose_config(CELL), run_dir)
    assert _status(run_dir) == "complete"


def test_an_unfinished_attempt_of_another_config_is_set_aside_not_deleted(
    tmp_path: Path, trains: InProcessTraining
) -> None:
    run_dir = tmp_path / "run"
    trains.run_cell_as_train(compose_config([*CELL, "optim.lr=0.01"]), run_dir)
    record = json.loads((run_dir / "results.json").read_text())
    record["status"] = "failed"
    (run_dir / "results.json").write_text(json.dumps(record))
    (run_dir / "checkpoints" / "last.ckpt").unlink()  # its checkpoint would be refused as foreign
    _complete_twice(trains, run_dir)
    kept = list((run_dir / "previous_attempts").glob("*/results.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["config"]["optim"]["lr"] == 0.01


def test_run_files_are_readable_by_the_team(tmp_path: Path, trains: InProcessTraining) -> None:
    previous = os.umask(0o022)
    try:
        run_dir = tmp_path / "run"
        trains.run_cell_as_train(compose_config(CELL), run_dir)
    finally:
        os.umask(previous)
    for name in ("results.json", "attention_stats.csv", "csv/metrics.csv"):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o644, name


def test_resume_keeps_every_metrics_row_once(tmp_path: Path, monkeypatch, trains: InProcessTraining) -> None:
    """SIGTERM in epoch 2 (a real signal, handled by Lightning: interrupted.ckpt), then the same cell again: every
    step's training row of metrics.csv is there exactly once, those logged before the interruption included."""
    run_dir = tmp_path / "run"
    args = [*CELL, "trainer.log_every_n_steps=1"]
    real = ViTClassifier.training_step

    def terminated_at_step_6(self, batch, batch_idx):
        if self.global_step == 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, batch, batch_idx)

    monkeypatch.setattr(ViTClassifier, "training_step", terminated_at_step_6)
    with pytest.raises(CellInterrupted):
        trains.run_cell_as_train(compose_config(args), run_dir)
    assert (run_dir / "checkpoints" / "interrupted.ckpt").exists()
    logged = [int(r["step"]) for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open()) if r.get("train/loss")]
    assert 0 in logged  # epoch 1's rows were on disk before the interruption
    monkeypatch.setattr(ViTClassifier, "training_step", real)
    _complete_twice(trains, run_dir, args)
    steps = [int(r["step"]) for r in csv.DictReader((run_dir / "csv" / "metrics.csv").open()) if r.get("train/loss")]
    assert sorted(steps) == list(range(8))


def test_run_directory_names_show_every_setting_the_command_changes() -> None:
    def suffix(overrides: list[str]) -> str:
        return fitted_name("", named_settings(overrides), "0" * 16).removesuffix("_id-00000000")

    assert suffix(["optim.lr=0.003", "data=synthetic", "aug.cutmix=true", "seed=1", "data.num_workers=4"]) == (
        "_optim.lr-0.003"
    )
    assert suffix(["aug.policy=svhn", "aug.cutmix_alpha=0.5"]) == "_aug.cutmix_alpha-0.5_aug.policy-svhn"
    assert "/" not in suffix(["data.root=/a/b"]) + suffix(["optim.betas=[0.9,0.99]"])
    assert "=" not in suffix(["optim.betas=[0.9,0.99]"])


def test_an_interruption_never_checkpoints_non_finite_weights(
    tmp_path: Path, monkeypatch, trains: InProcessTraining
) -> None:
    """On a GPU a NaN is noticed only every 25 steps: a signal in between must not save the poisoned weights."""
    run_dir = tmp_path / "run"
    real = ViTClassifier.training_step

    def poisoned_then_terminated(self, batch, batch_idx):
        if self.global_step == 6:
            with torch.no_grad():
                self.model.head.weight.fill_(float("nan"))
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, batch, batch_idx)

    monkeypatch.setattr(ViTClassifier, "training_step", poisoned_then_terminated)
    monkeypatch.setattr(ViTClassifier, "_note_nonfinite", lambda self, loss: None)  # as on a GPU between checks
    with pytest.raises(CellInterrupted):
        trains.run_cell_as_train(compose_config(CELL), run_dir)
    assert not (run_dir / "checkpoints" / "interrupted.ckpt").exists()
    assert (run_dir / "checkpoints" / "last.ckpt").exists()  # epoch 1's, the resume point


def test_every_attempt_of_a_cell_continues_one_wandb_run(tmp_path: Path) -> None:
    """The W&B run id comes from the cell's identity and directory: a resumed cell logs into the same run."""
    from vit_locality.run.builders import wandb_run_id

    cfg = typed(CELL)
    assert wandb_run_id(cfg, tmp_path / "a") == wandb_run_id(typed(CELL), tmp_path / "a")
    assert wandb_run_id(cfg, tmp_path / "a") != wandb_run_id(cfg, tmp_path / "b")
    assert wandb_run_id(cfg, tmp_path / "a") != wandb_run_id(typed([*CELL, "seed=1"]), tmp_path / "a")


def test_the_record_says_what_was_measured_on_and_cutmix_prob(tmp_path: Path, trains: InProcessTraining) -> None:
    run_dir = tmp_path / "run"
    args = [*CELL, "data.val_size=32", "stats.probe_size=48", "aug.cutmix_prob=0.5", "trainer.max_epochs=1"]
    record = trains.run_cell_as_train(compose_config(args), run_dir)
    # 256 training images, 32 of them held out for validation; 64 test images; the probe takes 32 of the 32.
    assert record["measured_on"] == {"eval_split": "val", "eval_images": 32, "test_images": 64, "probe_images": 32}
    assert json.loads((run_dir / "results.json").read_text())["record_version"] == RECORD_VERSION
    assert record["attention"]["final"]["probe_images"] == 32
    assert record["protocol"]["cutmix_prob"] == 0.5
    assert "cutmix(alpha=1.0, p=0.5)" in record["protocol"]["description"]


def test_cutmix_prob_mixes_about_that_share_of_batches(monkeypatch) -> None:
    """p=0.5: of 400 batches about half are mixed (binomial: 200 +- 3 sd = 170..230); p=1 draws nothing at all."""
    import vit_locality.augment.mixing as module

    mixed = []
    real = module.cutmix_this_batch  # the coin, a device tensor (CutMix is drawn every batch, used or not)

    def counting(*args, **kwargs):
        coin = real(*args, **kwargs)
        if bool(coin):
            mixed.append(1)
        return coin

    monkeypatch.setattr(module, "cutmix_this_batch", counting)
    cfg = typed([*CELL, "aug.cutmix_prob=0.5"])
    from vit_locality.run.builders import build_datamodule, build_module

    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    classifier = build_module(cfg, datamodule)
    images = torch.zeros(4, 3, 32, 32, dtype=torch.uint8)
    labels = torch.arange(4)
    torch.manual_seed(0)
    for _ in range(400):
        classifier.training_loss(images, labels)
    assert 170 <= len(mixed) <= 230
    always = build_module(typed([*CELL, "aug.cutmix_prob=1.0"]), datamodule)
    state = torch.random.get_rng_state()
    module.cutmix_this_batch(always.protocol.cutmix_prob)
    assert torch.equal(state, torch.random.get_rng_state())
