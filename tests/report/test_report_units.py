"""Every report reads each run in one convention, converted from its own record, whatever units it was stored in.

Two sweeps of the same runs: one recorded in unit-square distances, one with some cells recorded in pixels
(x 32: 4 px patches on 32 px images), in patch steps (x 8) or over the diagonal (/ sqrt 2), results.json and
attention_stats.csv alike. Every table, figure series and summary row must read the same in both.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from record_fakes import ORDER, write_run

from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.figures import emergence_series
from vit_locality.report.render.tables import ablation_table, protocols_table
from vit_locality.report.summary import main as summary_main
from vit_locality.report.summary import summary_rows
from vit_locality.store.record import scan_records

PER_UNIT = {"unit": 1.0, "grid": 8.0, "pixels": 32.0, "diagonal": 1 / math.sqrt(2.0)}  # recorded = unit x this
MAD = {cell: [0.02, 0.03] if "CM" in cell and cell != "-CM" or cell == "Modern" else [0.30, 0.32] for cell in ORDER}
ACC = {cell: [50.0 + i, 57.0 + i] for i, cell in enumerate(ORDER)}
# The issue's case first: +CM in pixels beside a Baseline in the unit square; the other cells in every other unit.
MIXED = {"+CM": "pixels", "+AA": "grid", "Modern": "diagonal", "-AA": "pixels", "-LS": "grid", "+LS": "diagonal"}


def store_in(run_dir: Path, units: str, patch_recorded: bool = True) -> None:
    """Rewrite a unit-square run as one measured in `units`: the record's distances and the CSV's `mad` column."""
    k = PER_UNIT[units]
    path = run_dir / "results.json"
    data = json.loads(path.read_text())
    final = data["attention"]["final"]
    final["min_mad_early"] *= k
    final["per_head"]["mad"] = [[v * k for v in layer] for layer in final["per_head"]["mad"]]
    for row in final["per_layer"]:
        for key in ("mad_min", "mad_mean", "mad_max"):
            row[key] *= k
    final["settings"]["units"] = units
    if patch_recorded:
        data["model"]["patch_size"], data["data"]["image_size"] = 4, 32
    path.write_text(json.dumps(data))
    stats = run_dir / "attention_stats.csv"
    with stats.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    with stats.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**row, "mad": float(row["mad"]) * k} for row in rows)


def write_sweep(root: Path, units: dict[str, str]) -> Path:
    for cell in ORDER:
        for seed in range(2):
            run_dir = write_run(root, "cifar100", cell, seed, ACC[cell][seed], MAD[cell][seed], 0.5)
            store_in(run_dir, units.get(cell, "unit"))
    return root


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("units")
    return write_sweep(root / "unit", {}), write_sweep(root / "mixed", MIXED)


def test_every_table_reads_mixed_units_as_one(sweeps: tuple[Path, Path]) -> None:
    unit, mixed = (aggregate([root]) for root in sweeps)
    same, other = ablation_table(unit, "cifar100", "vit_paper"), ablation_table(mixed, "cifar100", "vit_paper")
    assert other.rows == same.rows  # the cells' min MAD, e.g. +CM 0.025 ± 0.007, never 0.800 beside 0.310
    for mine, theirs in zip(same.parts, other.parts, strict=True):
        assert theirs.rows == mine.rows, theirs.stem  # claims, main effects, contrasts
    assert protocols_table(mixed).rows == protocols_table(unit).rows
    contrasts = {(row[0], row[1]): row for row in other.parts[2].rows}
    # +CM against Baseline: (0.02 + 0.03) / 2 - (0.30 + 0.32) / 2 = -0.2850, not +0.8 - 0.31 in mixed units.
    assert (contrasts["+CM", "min MAD"][3], contrasts["+CM", "min MAD"][5]) == ("-0.2850", "lower")
    assert "MAD in fractions of the image side (unit square)" in other.parts[2].notes[-1]
    assert any(note.startswith("MAD in fractions of the image side") for note in other.notes)


def test_contrast_rows_match_the_issue_case(tmp_path: Path) -> None:
    # Baseline 2 seeds in the unit square, +CM 2 seeds in pixels, trained identically: the +CM row is 0, not +16.
    for seed in range(2):
        write_run(tmp_path / "unit", "cifar100", "Baseline", seed, 50.0, 0.517 + 0.001 * seed, 0.9)
        store_in(write_run(tmp_path / "unit", "cifar100", "+CM", seed, 50.0, 0.517 + 0.001 * seed, 0.9), "pixels")
    table = ablation_table(aggregate([tmp_path]), "cifar100", "vit_paper")
    row = next(row for row in table.parts[2].rows if row[:2] == ["+CM", "min MAD"])
    assert row[3] == "+0.0000" and row[5] == "no difference shown"
    shown = {row[0]: row[7] for row in table.rows}
    assert shown["Baseline"] == shown["+CM"] == "0.518 ± 0.001 (2)"  # not 16.544


def test_figure_series_and_summary_read_one_convention(sweeps: tuple[Path, Path], capsys) -> None:
    unit, mixed = (aggregate([root]).cells("cifar100", "vit_paper") for root in sweeps)
    for cell in ORDER:
        for mine, theirs in zip(unit[cell].runs, mixed[cell].runs, strict=True):
            assert emergence_series(theirs) == pytest.approx(emergence_series(mine), rel=1e-12)
            for key in ("mad_min", "mad_mean", "mad_max"):  # the layers figure's rows
                assert [row[key] for row in theirs.final_attention["per_layer"]] == pytest.approx(
                    [row[key] for row in mine.final_attention["per_layer"]]
                )
            heads = [v for layer in theirs.final_attention["per_head"]["mad"] for v in layer]
            assert heads == pytest.approx([v for layer in mine.final_attention["per_head"]["mad"] for v in layer])
    rows = [summary_rows(scan_records([root]).complete) for root in sweeps]
    assert [r["min MAD early"] for r in rows[1]] == pytest.approx([r["min MAD early"] for r in rows[0]], rel=1e-12)
    assert summary_main([str(sweeps[1])]) == 0
    printed = capsys.readouterr().out
    assert "min MAD early: MAD in fractions of the image side (unit square)" in printed
    assert "min MAD converted to fractions of the image side (unit square) (stats.units=pixels, / 32" in printed


def test_a_run_that_cannot_be_converted_is_never_shown_beside_the_others(tmp_path: Path) -> None:
    # +CM seed 1 in pixels without a recorded patch or image size: its 0.96 px cannot be brought to the unit square.
    for seed in range(2):
        write_run(tmp_path, "cifar100", "Baseline", seed, 50.0, 0.30 + 0.02 * seed, 0.9)
    store_in(write_run(tmp_path, "cifar100", "+CM", 0, 50.0, 0.02, 0.9), "pixels")
    store_in(write_run(tmp_path, "cifar100", "+CM", 1, 50.0, 0.03, 0.9), "pixels", patch_recorded=False)
    agg = aggregate([tmp_path])
    table = ablation_table(agg, "cifar100", "vit_paper")
    shown = {row[0]: row for row in table.rows}
    assert shown["+CM"][7] == "0.020" and shown["+CM"][4] == "2"  # the convertible run's MAD; both runs' accuracy
    why = "not shown: stats.units=pixels, and the record holds no model.patch_size or data.image_size"
    assert any(why in note and "+CM" in note for note in agg.notes)
    contrast = next(row for row in table.parts[2].rows if row[:2] == ["+CM", "min MAD"])
    assert contrast[5] == "n/a"  # one comparable run left: no difference without its spread


def test_each_statistic_declares_whether_it_is_a_distance() -> None:
    """By declaration, never by a pattern of its name: a new unit-free statistic named `mad_share` stays unit-free."""
    from vit_locality.attention.probe import STAT_KEYS
    from vit_locality.attention.stats_log import CSV_FIELDS
    from vit_locality.attention.units import is_distance

    per_layer = [f"{key}_{reduction}" for key in ("mad", "entropy") for reduction in ("min", "mean", "max")]
    columns = {*STAT_KEYS, *CSV_FIELDS, *per_layer, "mad_range"}
    distances = {"mad", "mad_std", "mad_control", "surround_pref", "mad_range", "mad_layer_range"}
    assert {column for column in columns if is_distance(column)} == distances | {"mad_min", "mad_mean", "mad_max"}
    assert not is_distance("mad_share") and not is_distance("control_mass")
