"""The paper's claims judged in the paper's convention, and under both distance conventions.

Every expected value is arithmetic on the numbers written here: a MAD of 0.02 on the unit square is 0.02 / sqrt 2 =
0.01414 on the diagonal scale.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from record_fakes import FLAGS, ORDER, write_run

from vit_locality.attention.metrics import mean_attention_distance, patch_distance_matrix
from vit_locality.attention.units import to_display
from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.tables import ablation_table, protocols_table
from vit_locality.report.stats.claim_units import paper_value
from vit_locality.store.record import RunRecord

CUTMIX = [cell for cell in ORDER if FLAGS[cell][1]]


def record(min_mad: float, units: str = "unit", early: int = 2, **changes: Any) -> RunRecord:
    """A run record whose final statistics were measured with `units`; `changes` replace top-level sections."""
    final = {
        "min_mad_early": min_mad,
        "mean_entropy_early": 0.5,
        "early_layers": early,
        "probe_images": 512,
        "settings": {"renormalize": True, "units": units, "probe_size": 512},
    }
    data: dict[str, Any] = {
        "seed": 0,
        "data": {"name": "cifar100", "image_size": 32},
        "model": {"name": "vit_paper", "patch_size": 4},
        "attention": {"final": final},
        "status": "complete",
    }
    data.update(changes)
    return RunRecord(Path("run"), data)


# ---- the metric's diagonal option ---------------------------------------------------------------------------------


def test_diagonal_units_divide_the_unit_square_by_sqrt_2() -> None:
    unit, diagonal = patch_distance_matrix(8, "unit"), patch_distance_matrix(8, "diagonal")
    assert diagonal[0, 1] == pytest.approx(1 / (8 * math.sqrt(2)))  # one patch step: 0.0884
    assert diagonal[0, 63] == pytest.approx(7 / 8)  # opposite corners: 7 sqrt 2 / 8 over sqrt 2
    assert torch.allclose(diagonal * math.sqrt(2), unit)
    uniform = torch.full((1, 1, 65, 65), 1 / 65)
    stored = float(mean_attention_distance(uniform)[0])
    assert to_display(stored, "diagonal", 8) == pytest.approx(0.51706 / math.sqrt(2), abs=1e-5)


# ---- one record brought to the paper's convention ----------------------------------------------------------------


def test_raw_weights_are_not_comparable_and_the_config_fills_a_missing_setting() -> None:
    raw = record(0.02)
    raw.data["attention"]["final"]["settings"]["renormalize"] = False
    assert (
        paper_value(raw).reason == "stats.renormalize=false: raw weights scale each query's MAD by its own patch share"
    )
    unstated = record(0.02)
    del unstated.data["attention"]["final"]["settings"]["renormalize"]
    assert paper_value(unstated).reason == "the record does not state stats.renormalize"
    unstated.data["config"] = {"stats": {"renormalize": True}}
    assert paper_value(unstated).comparable


def test_other_early_layers_are_re_read_from_the_first_two() -> None:
    # Minimum over 3 layers is layer 2's 0.01; the paper's first 2 layers give 0.05.
    per_layer = [{"layer": i, "mad_min": v} for i, v in ((2, 0.01), (0, 0.06), (1, 0.05))]
    three = record(0.01, early=3)
    three.data["attention"]["final"]["per_layer"] = per_layer
    assert paper_value(three).value == pytest.approx(0.05)
    one = record(0.06, early=1)
    one.data["attention"]["final"]["per_head"] = {"mad": [[0.07, 0.06], [0.09, 0.05]]}
    assert paper_value(one).value == pytest.approx(0.05)
    bare = record(0.01, early=3)
    assert paper_value(bare).reason == "stats.early_layers=3 and no per-layer figures to take the first 2 from"


# ---- claims over a sweep ---------------------------------------------------------------------------------------------


def write_sweep(root: Path, mad: dict[str, float], seeds: int = 1) -> None:
    for cell in ORDER:
        for seed in range(seeds):
            write_run(root, "cifar100", cell, seed, 50.0, mad[cell] + 0.001 * seed, 0.5)


def edit(run_dir: Path, change: Any) -> None:
    path = run_dir / "results.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def claims(root: Path) -> dict[str, dict[str, Any]]:
    part = ablation_table(aggregate([root]), "cifar100", "vit_paper").parts[0]
    return {
        rec["claim"]: {**rec, "row": row, "notes": part.notes} for rec, row in zip(part.records, part.rows, strict=True)
    }


PAPER_LIKE = {cell: 0.02 if cell in CUTMIX else 0.3 for cell in ORDER}


def test_the_claims_list_the_probe_sizes(tmp_path: Path) -> None:
    write_sweep(tmp_path, PAPER_LIKE)
    found = claims(tmp_path)
    local = found["a_cutmix_local"]
    assert (local["run_value"], local["run_verdict"]) == (pytest.approx(0.02), "holds")
    assert (
        "probe images per run: 64 (8 runs); the size sets the noise of a mean, not what it measures" in local["notes"]
    )


def test_a_record_that_cannot_be_judged_is_not_comparable(tmp_path: Path) -> None:
    write_sweep(tmp_path, PAPER_LIKE, seeds=2)

    def unstated(data: dict) -> None:  # silent on renormalisation: read, but not comparable with the paper
        del data["attention"]["final"]["settings"]["renormalize"]
        data.get("config", {}).get("stats", {}).pop("renormalize", None)

    edit(next(tmp_path.glob("*_aa0_cm1_ls0_s0")), unstated)
    found = claims(tmp_path)
    why = "+CM seed 0: the record does not state stats.renormalize"
    for key in ("a_cutmix_local", "a_other_not_local", "a_separation"):
        assert found[key]["run_verdict"] == found[key]["mean_verdict"] == "not comparable"
        assert found[key]["row"][2] == why and found[key]["run_reason"] == why
    # Accuracy claims do not read MAD; (d) for +LS needs +CM, so it cannot be judged either.
    assert found["c_cutmix_gain"]["run_verdict"] == "fails" and found["d_ls_keeps"]["run_verdict"] == "not comparable"
    table = protocols_table(aggregate([tmp_path]))
    assert table.rows[0][8:10] == ["holds, 2 seeds"] * 2  # claim (b) reads Baseline and Modern only


def test_others_not_local_fails_below_the_bound(tmp_path: Path) -> None:
    # -CM at 0.15 < 0.210: "every non-CutMix cell not local" fails on either scale, the separation still holds
    # (two seeds a cell: with one, a comparison of cells has no verdict).
    write_sweep(tmp_path, {**PAPER_LIKE, "-CM": 0.15}, seeds=2)
    found = claims(tmp_path)
    other = found["a_other_not_local"]
    assert (other["run_value"], other["run_verdict"], other["run_diagonal_verdict"]) == (0.15, "fails", "fails")
    assert found["a_separation"]["run_verdict"] == "holds" and found["a_cutmix_local"]["run_verdict"] == "holds"


def test_verdicts_that_depend_on_the_convention_are_flagged(tmp_path: Path) -> None:
    # -CM at 0.25: not local over the image side (>= 0.210), but 0.25 / sqrt 2 = 0.177 < 0.210 over the diagonal.
    # +CM at 0.03: above 0.024 over the side, 0.0212 <= 0.024 over the diagonal.
    write_sweep(tmp_path, {**PAPER_LIKE, "-CM": 0.25, "+CM": 0.03})
    found = claims(tmp_path)
    other, local = found["a_other_not_local"], found["a_cutmix_local"]
    assert (other["run_verdict"], other["run_diagonal_verdict"]) == ("holds", "fails")
    assert other["row"][6:] == [
        "fails, 1 seed: 0.177 (-CM)",
        "fails, 1 seed: 0.177 (-CM)",
        "differ (per run, per cell mean)",
    ]
    assert (local["run_verdict"], local["run_diagonal_verdict"]) == ("fails", "holds")
    assert local["row"][6:] == [
        "holds, 1 seed: 0.021 (+CM)",
        "holds, 1 seed: 0.021 (+CM)",
        "differ (per run, per cell mean)",
    ]
    assert found["a_separation"]["conventions"] == "agree"  # a ratio of two values: scale-free


def test_cutmix_prob_zero_counts_as_baseline(tmp_path: Path) -> None:
    # A run flagged aug.cutmix=true that never mixed (cutmix_prob=0) and stayed non-local is Baseline-like: counted
    # as +CM it would push +CM to 0.3 and fail "CutMix cells local".
    write_sweep(tmp_path, PAPER_LIKE)
    run = write_run(tmp_path, "cifar100", "+CM", 1, 50.0, 0.3, 0.5)
    edit(run, lambda d: d["protocol"].update(cutmix_prob=0.0))
    cells = aggregate([tmp_path]).cells("cifar100", "vit_paper")
    assert sorted(r.seed for r in cells["Baseline"].runs) == [0, 1] and [r.seed for r in cells["+CM"].runs] == [0]
    found = claims(tmp_path)
    assert found["a_cutmix_local"]["run_verdict"] == "holds" and found["a_cutmix_local"]["run_value"] == 0.02
