"""A report counts each trained run once and reads the measurement asked for (the paper's by default).

The previous release trained a cell again for each `stats` variant, into a directory of its own under a hash that
counted the `stats` section; this release measures a complete cell again from its checkpoint and keeps the new
measurement beside the first (`attention.remeasured`). Either way, the report reads one measurement per run: the
paper's (renormalised, 512 probe images, 2 early layers) unless options ask for another, never raw attention as the
paper's cell. Records are written by tests/record_fakes.py; every expected figure is a number written here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from record_fakes import FLAGS, ORDER, config, write_run
from saved_names import composed

from vit_locality.config.identity import identity_hash, record_training_identity
from vit_locality.config.settings import RunSettings
from vit_locality.precheck.gate import resolved
from vit_locality.report.__main__ import main
from vit_locality.report.load.aggregate import Aggregate, aggregate
from vit_locality.report.load.measurement import MeasurementChoice, choose_measurements
from vit_locality.report.render.figures import emergence_series
from vit_locality.report.render.tables import BAND_HEADERS, ablation_table
from vit_locality.report.summary import main as summary_main
from vit_locality.store.record import read_record

RAW = MeasurementChoice.from_options(raw_attention=True)
PROBE_32 = MeasurementChoice.from_options(probe_size=32)
DATA, MODEL = "cifar100", "vit_paper"
WAY_OUT = "to measure it from its checkpoint, without training"


@pytest.fixture(scope="module")
def cell_config() -> dict[str, Any]:
    """A Baseline cell's resolved config as a record keeps it (`config`), stats at their defaults."""
    settings = RunSettings.from_values(resolved(composed(["data=synthetic", "model=vit_tiny", "protocol=baseline"])))
    return json.loads(json.dumps(settings.as_record()))


def stats_config(base: dict[str, Any], seed: int, **stats: Any) -> dict[str, Any]:
    """The cell's config for `seed` with these `stats` settings."""
    changed = copy.deepcopy(base)
    changed["seed"] = seed
    changed["stats"] |= stats
    return changed


def edit(run_dir: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    path = run_dir / "results.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return run_dir


def measured(data: dict[str, Any], probe: int = 512, renormalize: bool = True) -> None:
    """The record's training measurement made on `probe` images (the split holds 10000), renormalised or not."""
    final = data["attention"]["final"]
    final["probe_images"] = probe
    final["settings"] |= {"probe_size": probe, "renormalize": renormalize}
    data["measured_on"] = {"eval_split": "test", "eval_images": 10000, "probe_images": probe}


def old_variant(
    root: Path, base: dict[str, Any], seed: int, acc: float, mad: float, renormalize: bool = True, probe: int = 512
) -> Path:
    """A Baseline run as the previous release left a `stats` variant: its own directory, its hash counting `stats`."""
    cfg = stats_config(base, seed, renormalize=renormalize, probe_size=probe)
    old_hash = identity_hash(RunSettings.from_record(cfg), previous_release=True)
    run_dir = write_run(root, DATA, "Baseline", seed, acc, mad, 0.8, config=cfg, name=f"_id-{old_hash[:8]}")

    def change(data: dict[str, Any]) -> None:
        measured(data, probe, renormalize)
        data["identity_hash"] = old_hash

    return edit(run_dir, change)


def other_cells(root: Path) -> None:
    """The other 7 cells, one seed each, paper-like and measured the paper's way: CutMix 0.02, the others 0.4."""
    for cell in ORDER[1:]:
        run_dir = write_run(root, DATA, cell, 0, 60.0, 0.02 if FLAGS[cell][1] else 0.4, 0.5)
        edit(run_dir, measured)


@pytest.fixture
def three_variants(tmp_path: Path, cell_config: dict[str, Any]) -> dict[str, Path]:
    """Baseline seed 0 in the previous release's three variants (default; stats.renormalize=false;
    stats.probe_size=32), Baseline seed 1 by default alone, and the other cells."""
    root = tmp_path / "sweep"
    runs = {
        "default": old_variant(root, cell_config, 0, 50.0, 0.30),
        "raw": old_variant(root, cell_config, 0, 50.2, 0.45, renormalize=False),
        "probe32": old_variant(root, cell_config, 0, 50.4, 0.22, probe=32),
        "seed1": old_variant(root, cell_config, 1, 52.0, 0.32),
    }
    other_cells(root)
    return {"root": root, **runs}


def claim(agg: Aggregate, key: str) -> dict[str, Any]:
    part = next(p for p in ablation_table(agg, DATA, MODEL).parts if p.stem.endswith("_claims"))
    return next(record for record in part.records if record["claim"] == key)


def baseline_row(agg: Aggregate) -> list[str]:
    rows = [row for row in ablation_table(agg, DATA, MODEL).rows if row[0] == "Baseline"]
    assert len(rows) == 1  # one row: the stats variants are measurements of one cell, never rows of their own
    return rows[0]


def test_the_variants_hold_one_training_identity(three_variants: dict[str, Path]) -> None:
    """The premise: the three directories' hashes differ as the previous release made them, their training doesn't."""
    records = [read_record(three_variants[name]) for name in ("default", "raw", "probe32")]
    assert len({record.identity_hash for record in records}) == 3
    assert len({record_training_identity(record.data) for record in records}) == 1


def test_one_row_per_cell_read_in_the_paper_s_measurement(three_variants: dict[str, Path]) -> None:
    agg = aggregate([three_variants["root"]])
    (group,) = agg.variants(DATA, MODEL)["Baseline"]
    assert [run.run_dir for run in group.runs] == [three_variants["default"], three_variants["seed1"]]
    row = baseline_row(agg)
    # runs, top-1 (mean of 50.0 and 52.0), min MAD (mean of 0.30 and 0.32).
    assert (row[4], row[5].split(" ")[0], row[7].split(" ")[0]) == ("2", "51.00", "0.310")
    assert agg.skipped == []  # neither a duplicate nor left out: other measurements of runs counted once
    assert any(three_variants["raw"].name in note and three_variants["probe32"].name in note for note in agg.notes)
    # Claim (a) reads the default measurement: the lowest cell without CutMix is Baseline's seed 0 at 0.30.
    other = claim(agg, "a_other_not_local")
    assert (other["run_verdict"], other["run_value"]) == ("holds", 0.30)


def test_the_summary_lists_each_trained_run_once(three_variants: dict[str, Path], capsys: Any) -> None:
    assert summary_main([str(three_variants["root"])]) == 0
    printed = capsys.readouterr().out
    baseline = [line for line in printed.splitlines() if line.startswith("| Baseline ")]
    assert len(baseline) == 2 and str(three_variants["default"]) in printed and "| 0.3000 " in baseline[0]


def test_raw_attention_reads_the_renormalize_false_variant(three_variants: dict[str, Path]) -> None:
    agg = aggregate([three_variants["root"]], choice=RAW)
    (group,) = agg.variants(DATA, MODEL)["Baseline"]
    assert [run.run_dir for run in group.runs] == [three_variants["raw"], three_variants["seed1"]]
    assert [run.headline().min_mad for run in group.runs][0] == 0.45
    assert [round(run.headline().acc1, 4) for run in group.runs] == [0.502, 0.52]  # seed 1's accuracy still counts
    assert claim(agg, "a_other_not_local")["run_verdict"] == "not comparable"
    # Seed 1 and the other cells hold no raw measurement: named once, with the way out.
    (note,) = [note for note in agg.notes if note.startswith("no measurement with")]
    assert "cifar100/vit_paper/Baseline seed 1" in note and "stats.renormalize=false" in note and WAY_OUT in note


def test_the_renormalize_false_variant_alone_is_never_the_paper_s_cell(tmp_path: Path, cell_config: dict) -> None:
    root = tmp_path / "sweep"
    raw = old_variant(root, cell_config, 0, 50.2, 0.45, renormalize=False)
    agg = aggregate([root])
    (run,) = agg.cells(DATA, MODEL)["Baseline"].runs
    assert run.run_dir == raw and run.headline().acc1 == 0.502 and run.final_attention == {}
    assert any(note.startswith("no measurement with stats.probe_size=512 stats.renormalize=true") for note in agg.notes)


@pytest.fixture
def remeasured(tmp_path: Path, cell_config: dict[str, Any]) -> Path:
    """A record of this release: trained and measured on 512 images, measured again on 32 from its checkpoint."""
    cfg = stats_config(cell_config, 0)
    run_dir = write_run(tmp_path / "sweep", DATA, "Baseline", 0, 50.0, 0.30, 0.8, config=cfg)

    def change(data: dict[str, Any]) -> None:
        measured(data)
        data["identity_hash"] = identity_hash(RunSettings.from_record(cfg))
        data["attention"]["noise_band"] = {"surround_pref": 0.04}
        per_head = data["attention"]["final"]["per_head"]
        per_head["mad_control"] = [[v + 0.01 for v in row] for row in per_head["mad"]]
        per_head["surround_pref"] = [[0.01 for _ in row] for row in per_head["mad"]]
        again = copy.deepcopy(data["attention"]["final"])
        again |= {"min_mad_early": 0.28, "probe_images": 32, "checkpoint": "checkpoints/last.ckpt"}
        again |= {"at": "2026-01-01T00:00:00+00:00", "settings": {**again["settings"], "probe_size": 32}}
        data["attention"]["remeasured"] = [again]

    return edit(run_dir, change)


def test_the_default_reads_final_and_probe_size_32_the_remeasured_entry(remeasured: Path) -> None:
    band = ablation_table(aggregate([remeasured.parent]), DATA, MODEL).headers.index(BAND_HEADERS[0])
    (paper,) = aggregate([remeasured.parent]).cells(DATA, MODEL)["Baseline"].runs
    assert paper.headline().min_mad == 0.30 and paper.final_attention["probe_images"] == 512
    assert baseline_row(aggregate([remeasured.parent]))[band] == "0.0400"
    small = aggregate([remeasured.parent], choice=PROBE_32)
    (run,) = small.cells(DATA, MODEL)["Baseline"].runs
    assert run.headline().min_mad == 0.28 and run.final_attention["probe_images"] == 32
    # The noise band, the initial pair and the trajectory belong to the training measurement: not read with this one.
    assert baseline_row(small)[band] == "-"
    notes: list[str] = []
    assert emergence_series(run, notes) == {} and "left out of the emergence figure" in notes[0]


def test_a_run_without_the_asked_measurement_keeps_its_accuracy(tmp_path: Path, cell_config: dict, capsys: Any) -> None:
    root = tmp_path / "sweep"
    old_variant(root, cell_config, 0, 50.0, 0.30)
    other_cells(root)
    assert main(["ablation", str(root), "--out", str(tmp_path / "out"), "--probe-size", "32"]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("| Baseline "))
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert (cells[4], cells[5], cells[7], cells[8]) == ("1", "50.00", "-", "-")  # accuracy; no MAD, no entropy
    overrides = "stats.probe_size=32 stats.renormalize=true stats.early_layers=2"
    (note,) = [line for line in printed.splitlines() if line.startswith("note: no measurement with")]
    assert note.startswith(f"note: no measurement with {overrides} for cifar100/vit_paper/Baseline seed 0,")
    assert note.endswith(f"run the cell's command again with {overrides} {WAY_OUT}")


def test_a_record_of_the_previous_release_reads_as_before(tmp_path: Path) -> None:
    """No other measurement anywhere: the run itself, not a copy, on whatever probe it was measured (64 here)."""
    run = read_record(write_run(tmp_path, DATA, "Baseline", 0, 50.0, 0.30, 0.8, config=config(0)))
    assert choose_measurements([run]).runs == [run] and choose_measurements([run]).runs[0] is run
    asked = MeasurementChoice.from_options(probe_size=64)
    assert choose_measurements([run], asked).runs[0] is run


def test_variants_whose_config_this_release_cannot_read_are_one_run(tmp_path: Path) -> None:
    """Their training identity is the hash each carries; their cell, seed and settings still make them one run."""
    root = tmp_path / "sweep"
    paper = edit(write_run(root, DATA, "Baseline", 0, 50.0, 0.30, 0.8, config=config(0), name="_a"), measured)
    raw_config = config(0, stats__renormalize=False)
    raw = write_run(root, DATA, "Baseline", 0, 50.0, 0.45, 0.8, config=raw_config, name="_b")
    edit(raw, lambda data: measured(data, renormalize=False))
    for choice, counted in ((MeasurementChoice(), paper), (RAW, raw)):
        agg = aggregate([root], choice=choice)
        assert [run.run_dir for run in agg.cells(DATA, MODEL)["Baseline"].runs] == [counted] and agg.skipped == []
