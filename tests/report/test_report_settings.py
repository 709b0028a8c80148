"""Reports pool only runs that are the same cell.

A learning-rate sweep is one row per learning rate, never "3 runs" of one cell; debug runs and W&B's copies of
results.json never enter a report; the claims and effects read one group per paper cell and list the rest.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from record_fakes import ORDER, config, debug_copy, write_run

from vit_locality.report.__main__ import main
from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.tables import ablation_table
from vit_locality.report.summary import main as summary_main

LRS = (0.001, 0.003, 0.01)


@pytest.fixture
def lr_sweep(tmp_path: Path) -> Path:
    """The paper's 8 cells at lr 0.001, and Modern also at 0.003 and 0.01: one seed each."""
    root = tmp_path / "sweep"
    for cell in ORDER:
        write_run(root, "cifar100", cell, 0, 50.0, 0.3, 0.8, config=config(0), name="_lr0.001")
    for lr, acc in zip(LRS[1:], (60.0, 40.0), strict=True):
        write_run(root, "cifar100", "Modern", 0, acc, 0.01, 0.5, config=config(0, optim__lr=lr), name=f"_lr{lr}")
    return root


def test_a_learning_rate_sweep_is_one_row_per_rate(lr_sweep: Path) -> None:
    agg = aggregate([lr_sweep])
    table = ablation_table(agg, "cifar100", "vit_paper")
    assert table.headers[-1] == "optim.lr"
    modern = [row for row in table.rows if row[0] == "Modern"]
    assert [(row[4], row[5], row[-1]) for row in modern] == [("1", "50.00", "0.001"), ("1", "60.00", "0.003")] + [
        ("1", "40.00", "0.01")
    ]
    assert all(row[-1] == "0.001" for row in table.rows if row[0] != "Modern")  # the value the cell's runs share
    # The claims and effects read the group that agrees with the other cells; the others are listed as left out.
    assert agg.cells("cifar100", "vit_paper")["Modern"].key.variant == "optim.lr=0.001"
    assert [group.key.variant for group in agg.left_out("cifar100", "vit_paper")] == ["optim.lr=0.003", "optim.lr=0.01"]
    assert table.notes[:2] == [
        "Modern [optim.lr=0.003]: its own row, left out of the claims and effects",
        "Modern [optim.lr=0.01]: its own row, left out of the claims and effects",
    ]
    assert "cifar100/vit_paper/Modern is split by optim.lr: 0.001 (seed 0); 0.003 (seed 0); 0.01 (seed 0)" in agg.notes


def test_the_summary_after_a_sweep_shows_the_setting(lr_sweep: Path, capsys: pytest.CaptureFixture) -> None:
    assert summary_main([str(lr_sweep)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "optim.lr" in lines[0]
    modern = [line for line in lines if line.startswith("| Modern ")]
    assert [next(v for v in ("0.001", "0.003", "0.01") if f"| {v} " in line) for line in modern] == [
        str(lr) for lr in LRS
    ]


def test_one_value_in_two_spellings_is_one_group(tmp_path: Path) -> None:
    write_run(tmp_path, "cifar100", "Baseline", 0, 50.0, 0.3, 0.8, config=config(0, loss__ls=0))
    write_run(tmp_path, "cifar100", "Baseline", 1, 52.0, 0.3, 0.8, config=config(1, loss__ls=0.0))
    assert [len(g.runs) for g in aggregate([tmp_path]).variants("cifar100", "vit_paper")["Baseline"]] == [2]


def test_a_debug_run_never_enters_a_report_nor_hides_a_real_one(tmp_path: Path) -> None:
    """The debug run sorts first (outputs/a_debug... would too): the real run is counted, not called its duplicate."""
    real = write_run(tmp_path / "outputs" / "z_real", "cifar100", "Baseline", 0, 50.0, 0.3, 0.8, config=config(0))
    debug = debug_copy(real, 0.99)
    agg = aggregate([tmp_path / "outputs"])
    assert [run.run_dir for run in agg.cells("cifar100", "vit_paper")["Baseline"].runs] == [real]
    assert dict(agg.skipped) == {debug: "a debug run (sweep_name=debug), not counted"}


def test_a_run_below_a_debug_directory_is_left_out(tmp_path: Path) -> None:
    run = write_run(tmp_path / "multirun" / "debug", "cifar100", "Baseline", 0, 50.0, 0.3, 0.8, config=config(0))
    agg = aggregate([tmp_path / "multirun"])
    assert not agg.groups
    assert dict(agg.skipped) == {run: "a debug run (written below a debug/ directory), not counted"}


def test_wandb_copies_of_the_record_are_not_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = write_run(tmp_path / "sweep", "cifar100", "Baseline", 0, 50.0, 0.3, 0.8, config=config(0))
    files = run / "wandb" / "offline-run-20260101_000000-abc" / "files"
    files.mkdir(parents=True)
    shutil.copy(run / "results.json", files / "results.json")
    agg = aggregate([tmp_path / "sweep"])
    assert agg.skipped == [] and [r.run_dir for g in agg.groups.values() for r in g.runs] == [run]
    assert main(["ablation", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    assert "skipped" not in capsys.readouterr().out
