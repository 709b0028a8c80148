"""A cell started from a checkpoint's weights (`ckpt_path`, ckpt_mode=weights) is a setting like any other in the
reports: its own row with a `start` column, never a seed of the cell trained from scratch, never skipped as that
cell's duplicate. A cell resumed (`ckpt_mode=resume`) continues the cell that wrote the checkpoint and counts as it.
A debug run is listed alike by the summary and the reports: skipped, not counted.

The `start` sections come from the code that writes them (run/start.py) on a small checkpoint file; the slow test
trains the cells and starts one from another's last.ckpt, as a user does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import QUICK, InProcessTraining, compose_config
from omegaconf import OmegaConf
from record_fakes import config, debug_copy, write_run

from vit_locality.extras.wandb_publish import scatter_rows
from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.tables import ablation_table
from vit_locality.report.summary import main as summary_main
from vit_locality.run.start import start_point


def start_section(tmp_path: Path, mode: str = "weights", written_by: str = "source-cell") -> tuple[dict, str]:
    """The record's `start` section for a cell started from a small checkpoint, and the file's short hash."""
    checkpoint = tmp_path / f"source-{mode}.ckpt"
    torch.save(
        {"state_dict": {"w": torch.ones(2)}, "global_step": 5, "vit_locality": {"identity_hash": written_by}},
        checkpoint,
    )
    cfg = OmegaConf.create({"ckpt_path": str(checkpoint), "ckpt_mode": mode, "run_name": "r"})
    section = start_point(cfg, tmp_path / "no-run-yet", written_by).section
    return section, section["ckpt_sha256"][:10]


def with_start(run_dir: Path, section: dict, identity: str) -> Path:
    """The run's record as a cell started from a checkpoint writes it: its `start` section and its own identity."""
    record = json.loads((run_dir / "results.json").read_text())
    record.update(start=section, identity_hash=identity)
    record["config"] = {**record["config"], "ckpt_path": section["ckpt_path"], "ckpt_mode": section["ckpt_mode"]}
    (run_dir / "results.json").write_text(json.dumps(record))
    return run_dir


def baseline(root: Path, seed: int, acc: float, mad: float, name: str = "") -> Path:
    return write_run(
        root, "cifar100", "Baseline", seed, acc, mad, 0.8, config=config(seed, aug__cutmix=False), name=name
    )


def test_a_cell_started_from_weights_is_never_a_seed_of_the_cell(tmp_path: Path) -> None:
    """Seed 0 started from the weights of seed 1's run: Baseline counts seed 1 alone, the start is a row of its own."""
    section, short = start_section(tmp_path)
    scratch = baseline(tmp_path / "sweep", 1, 50.0, 0.30)
    started = with_start(baseline(tmp_path / "sweep", 0, 70.0, 0.10, name="_ckpt"), section, "started-hash")
    agg = aggregate([tmp_path / "sweep"])
    counted = agg.cells("cifar100", "vit_paper")["Baseline"]
    assert [run.run_dir for run in counted.runs] == [scratch]
    assert counted.stat("acc1").n == 1 and counted.stat("acc1").mean == 0.5
    assert [(g.key.variant, [r.run_dir for r in g.runs]) for g in agg.left_out("cifar100", "vit_paper")] == [
        (f"start=weights {short}", [started])
    ]
    assert f"cifar100/vit_paper/Baseline is split by start: scratch (seed 1); weights {short} (seed 0)" in agg.notes
    table = ablation_table(agg, "cifar100", "vit_paper")
    assert table.headers[-1] == "start"
    assert [(row[4], row[5], row[-1]) for row in table.rows if row[0] == "Baseline"] == [
        ("1", "50.00", "scratch"),
        ("1", "70.00", f"weights {short}"),
    ]


def test_beside_the_same_seed_from_scratch_it_is_no_duplicate(tmp_path: Path) -> None:
    section, short = start_section(tmp_path)
    scratch = baseline(tmp_path / "sweep", 0, 50.0, 0.30)
    started = with_start(baseline(tmp_path / "sweep", 0, 70.0, 0.10, name="_ckpt"), section, "started-hash")
    agg = aggregate([tmp_path / "sweep"])
    assert agg.skipped == []
    groups = agg.variants("cifar100", "vit_paper")["Baseline"]
    assert [[r.run_dir for r in g.runs] for g in groups] == [[scratch], [started]]
    assert [g.key.variant for g in groups] == ["start=scratch", f"start=weights {short}"]
    rows = {(row[0], row[-1]) for row in scatter_rows(agg)}  # the W&B table of every run says it too
    assert rows == {(scratch.name, "start=scratch"), (started.name, f"start=weights {short}")}


def test_a_cell_all_of_whose_runs_started_from_weights_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """No from-scratch run beside it: the table still shows the start, so it never reads as trained from scratch."""
    section, short = start_section(tmp_path)
    for seed in (0, 1):
        with_start(baseline(tmp_path / "sweep", seed, 60.0, 0.2), section, f"started-{seed}")
    agg = aggregate([tmp_path / "sweep"])
    group = agg.cells("cifar100", "vit_paper")["Baseline"]
    assert len(group.runs) == 2 and group.key.variant == f"start=weights {short}"
    table = ablation_table(agg, "cifar100", "vit_paper")
    assert table.headers[-1] == "start" and table.rows[0][-1] == f"weights {short}"
    assert summary_main([str(tmp_path / "sweep")]) == 0
    header, _, *rows = capsys.readouterr().out.splitlines()[:4]
    column = [part.strip() for part in header.split("|")].index("start")
    assert [[part.strip() for part in row.split("|")][column] for row in rows] == [f"weights {short}"] * 2


def test_a_resumed_cell_counts_as_the_cell_it_continues(tmp_path: Path) -> None:
    """`ckpt_mode=resume` runs only the checkpoint's own cell on (its identity checked): a seed of that cell."""
    scratch = baseline(tmp_path / "sweep", 1, 50.0, 0.30)
    resumed = baseline(tmp_path / "sweep", 0, 52.0, 0.28)
    section, _ = start_section(tmp_path, "resume", written_by=f"hash-{resumed.name}")
    with_start(resumed, section, f"hash-{resumed.name}")
    agg = aggregate([tmp_path / "sweep"])
    groups = agg.variants("cifar100", "vit_paper")["Baseline"]
    assert [sorted(r.run_dir for r in g.runs) for g in groups] == [sorted([scratch, resumed])]
    assert agg.skipped == []


def test_the_summary_shows_what_tells_the_rows_apart(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    section, short = start_section(tmp_path)
    baseline(tmp_path / "sweep", 0, 50.0, 0.30)
    with_start(baseline(tmp_path / "sweep", 0, 70.0, 0.10, name="_ckpt"), section, "started-hash")
    assert summary_main([str(tmp_path / "sweep")]) == 0
    lines = capsys.readouterr().out.splitlines()
    column = [part.strip() for part in lines[0].split("|")].index("start")
    starts = [[part.strip() for part in line.split("|")][column] for line in lines[2:] if line.startswith("| Baseline")]
    assert sorted(starts) == ["scratch", f"weights {short}"]


def test_the_summary_lists_a_debug_run_as_the_reports_do(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    real = baseline(tmp_path / "outputs" / "main", 0, 50.0, 0.30)
    debug = debug_copy(real, 0.99)
    below = baseline(tmp_path / "outputs" / "debug" / "plain", 1, 40.0, 0.30)
    assert summary_main([str(tmp_path / "outputs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("| Baseline")] and not any("99.0000" in line for line in lines)
    assert sum(line.startswith("| Baseline") for line in lines) == 1
    agg = aggregate([tmp_path / "outputs"])
    for run_dir, why in agg.skipped:
        assert f"skipped {run_dir}: {why}" in lines
    assert {run_dir for run_dir, _ in agg.skipped} == {debug, below}


def test_a_trained_cell_started_from_another_seeds_checkpoint(tmp_path: Path, trains: InProcessTraining) -> None:
    """Trained as a user trains: seed 1 from scratch, then seed 0 from seed 1's last.ckpt and seed 0 from scratch."""
    cell = [*QUICK, "stats.probe_size=64"]
    sweep = tmp_path / "sweep"
    trains.run_cell_as_train(compose_config([*cell, "seed=1"]), sweep / "s1")
    checkpoint = sweep / "s1" / "checkpoints" / "last.ckpt"
    started = trains.run_cell_as_train(compose_config([*cell, "seed=0", f"ckpt_path={checkpoint}"]), sweep / "s0_ckpt")
    trains.run_cell_as_train(compose_config([*cell, "seed=0"]), sweep / "s0")
    short = started["start"]["ckpt_sha256"][:10]
    agg = aggregate([sweep])
    assert agg.skipped == []
    groups = agg.variants("synthetic", "vit_tiny")["Modern"]
    names = ("s0", "s1", "s0_ckpt")
    assert [(g.key.variant, sorted(r.run_dir.name for r in g.runs)) for g in groups] == [
        ("start=scratch", ["s0", "s1"]),
        (f"start=weights {short}", ["s0_ckpt"]),
    ]
    # Every record carries the surround preference's noise band, measured at initialisation on fixed seeds: the same
    # band for every run of one architecture and probe set, whatever the run's seed or start.
    bands = [json.loads((sweep / name / "results.json").read_text())["attention"]["noise_band"] for name in names]
    assert len({band["surround_pref"] for band in bands}) == 1 and bands[0]["surround_pref"] > 0
    assert all(band["seeds"] == [9001, 9002, 9003, 9004] and band["heads"] == 16 for band in bands)
