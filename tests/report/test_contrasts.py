"""Each cell against Baseline with a Welch interval over seeds, on values whose answer is worked out by hand.

Cell and Baseline with 3 runs each and a sample standard deviation of 0.01 each: se = sqrt(2 x 0.0001 / 3) =
0.0081650 and df = 4 exactly, so the 95% interval is the difference +- t(0.975, 4) x se = +- 2.7764 x 0.0081650 =
+- 0.022669.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from record_fakes import write_run

from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.tables import ablation_table
from vit_locality.report.stats.effects import HIGHER, LOWER, NO_DIFFERENCE, NOT_AVAILABLE, contrast

BASELINE = [0.30, 0.31, 0.32]
HALF = 2.7764451 * (2 * 0.0001 / 3) ** 0.5


def test_lower_higher_and_no_difference_by_hand() -> None:
    lower = contrast("+CM", "min_mad", [0.20, 0.21, 0.22], BASELINE)
    assert lower.verdict == LOWER and lower.difference == pytest.approx(-0.10)
    assert (lower.low, lower.high) == pytest.approx((-0.10 - HALF, -0.10 + HALF), abs=1e-6)
    assert contrast("+AA", "min_mad", [0.40, 0.41, 0.42], BASELINE).verdict == HIGHER
    # 0.015 lower but inside +-0.0227: not shown.
    near = contrast("+LS", "min_mad", [0.285, 0.295, 0.305], BASELINE)
    assert near.verdict == NO_DIFFERENCE and near.low < 0 < near.high


def test_one_run_on_either_side_gives_no_difference_at_all() -> None:
    """One seed a cell is an anecdote: no number is printed, so none can be quoted without its spread."""
    for cell, baseline in (([0.1], BASELINE), ([0.1, 0.2], [0.3])):
        alone = contrast("+CM", "min_mad", cell, baseline)
        assert alone.verdict == NOT_AVAILABLE and alone.difference != alone.difference  # NaN


def _mixup_run(root: Path, seed: int, mad: float) -> None:
    """A Baseline-flagged run that mixed with MixUp: a cell beyond the paper's 8 (Baseline+MU)."""
    run_dir = write_run(root, "cifar100", "Baseline", seed, 80.0, mad, 0.9, name="_mu")
    record = json.loads((run_dir / "results.json").read_text())
    record["protocol"] |= {"mixup": True, "mixup_alpha": 1.0}
    record["identity_hash"] += "-mu"
    (run_dir / "results.json").write_text(json.dumps(record))


def test_the_ablation_table_compares_every_cell_and_mixup_with_baseline(tmp_path: Path) -> None:
    for seed, (base, cut, mix) in enumerate(zip(BASELINE, [0.20, 0.21, 0.22], [0.295, 0.305, 0.315], strict=True)):
        write_run(tmp_path, "cifar100", "Baseline", seed, 80.0 + seed, base, 0.9)
        write_run(tmp_path, "cifar100", "+CM", seed, 84.0 + seed, cut, 0.9)
        _mixup_run(tmp_path, seed, mix)
    write_run(tmp_path, "cifar100", "+AA", 0, 85.0, 0.31, 0.9)  # one seed: n/a
    table = ablation_table(aggregate([tmp_path]), "cifar100", "vit_paper")
    part = next(p for p in table.parts if p.stem.endswith("_contrasts"))
    rows = {(row[0], row[1]): row for row in part.rows}
    assert rows[("+CM", "min MAD")][2:] == ["3 / 3", "-0.1000", f"[{-0.10 - HALF:+.4f}, {-0.10 + HALF:+.4f}]", LOWER]
    assert rows[("+CM", "top-1 (%)")][3:] == [
        "+4.000",
        "[+1.733, +6.267]",
        HIGHER,
    ]  # 4 points +- 2.7764 x 0.8165 = 2.267
    assert rows[("Baseline+MU", "min MAD")][-1] == NO_DIFFERENCE
    assert rows[("+AA", "min MAD")][2:] == ["1 / 3", "-", "n/a", NOT_AVAILABLE]
    assert any(p.name.endswith("_contrasts.csv") for p in table.write(tmp_path / "out"))
