"""What a verdict rests on: claim (b) as a conjunction judged in order, half-way values decided by one rounding rule
in every convention and precision, "not informative" whichever way a claim on uniform heads would go, and the
number of seeds beside every verdict.

Sweeps are written by tests/claim_fakes.py; every expected value is arithmetic on the numbers written here.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from claim_fakes import PAPER_EXACT, claims, float32, more_local, uniform_heads, write_sweep
from record_fakes import ORDER

from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.stats.claims import more_local as judge_more_local

# ---- claim (b): the fixed bounds first, on any number of seeds --------------------------------------------------


@pytest.mark.parametrize(
    ("baseline", "modern", "expected"),
    [
        # A fixed bound fails on one seed: the claim fails whatever more seeds would show.
        ([0.316], [0.300], "fails, 1 seed (Modern 0.300 above 0.024)"),
        ([0.200], [0.008], "fails, 1 seed (Baseline 0.200 below 0.210)"),
        ([0.200], [0.300], "fails, 1 seed (Baseline 0.200 below 0.210; Modern 0.300 above 0.024)"),
        # One cell with one seed, the other with two: the bound still decides.
        ([0.316], [0.300, 0.302], "fails, 1-2 seeds (Modern 0.302 above 0.024)"),
        # The bounds hold on one seed: only the comparison of the two cells waits for a second.
        ([0.316], [0.008], "one seed: no verdict, 1 seed (the fixed bounds hold; the comparison needs 2 seeds"),
        # Two seeds each: the bounds, then the comparison.
        ([0.316, 0.320], [0.008, 0.006], "holds, 2 seeds"),
        ([0.316, 0.320], [0.300, 0.006], "fails, 2 seeds (Modern 0.300 above 0.024)"),
    ],
)
def test_claim_b_judges_its_fixed_bounds_on_any_number_of_seeds(
    tmp_path: Path, baseline: list[float], modern: list[float], expected: str
) -> None:
    write_sweep(tmp_path, {"Baseline": baseline, "Modern": modern})
    assert more_local(tmp_path)[0].startswith(expected)
    verdict = judge_more_local(aggregate([tmp_path]).cells("cifar100", "vit_paper"), "run").verdict
    assert verdict == expected.split(",")[0]


# ---- half-way values: one rule in every convention and precision ------------------------------------------------


@pytest.mark.parametrize("cast", [float, float32], ids=["float64", "float32"])
def test_a_half_way_value_is_decided_alike_in_every_convention(tmp_path: Path, cast) -> None:
    # Half up at the bound's three decimals: 0.0245 is 0.025, above 0.024 (fails); 0.2095 is 0.210 (holds). Over the
    # image side: +CM's run at 0.0245, -CM's at 0.2095. Over the diagonal: runs whose diagonal values are 0.0245 and
    # 0.2095 (unit square x sqrt 2), in a second sweep.
    side = {**PAPER_EXACT, "+CM": [0.0245, 0.020], "-CM": [0.2095, 0.214]}
    found = claims(write_sweep(tmp_path / "side", side, cast))
    assert found["a_cutmix_local"]["run_verdict"] == "fails", found["a_cutmix_local"]["run_value"]
    assert found["a_other_not_local"]["run_verdict"] == "holds", found["a_other_not_local"]["run_value"]
    root2 = math.sqrt(2.0)
    # -CM stays above 0.210 x sqrt 2 = 0.297 on the image side's own scale, so only the diagonal reading is at stake.
    diagonal = {
        **{cell: [v * root2 for v in values] for cell, values in PAPER_EXACT.items()},
        "+CM": [0.0245 * root2, 0.020],
        "-CM": [0.2095 * root2, 0.300],
    }
    found = claims(write_sweep(tmp_path / "diagonal", diagonal, cast))
    cutmix, other = found["a_cutmix_local"], found["a_other_not_local"]
    assert cutmix["run_diagonal_value"] == pytest.approx(0.0245, abs=1e-8)
    assert cutmix["run_diagonal_verdict"] == "fails", cutmix["run_diagonal_value"]
    assert other["run_diagonal_value"] == pytest.approx(0.2095, abs=1e-8)
    assert other["run_diagonal_verdict"] == "holds", other["run_diagonal_value"]


# ---- verdicts that show what they rest on -----------------------------------------------------------------------


def test_a_claim_on_uniform_heads_is_not_informative_whichever_way_it_goes(tmp_path: Path) -> None:
    # The new user's first sweep: one epoch, every head still at uniform attention's 0.517. "CutMix cells local"
    # would fail (0.507 > 0.024), the gains would fail (every cell at 50%): none of it is about a trained ViT.
    write_sweep(tmp_path, {cell: [0.5] for cell in ORDER}, acc=dict.fromkeys(ORDER, 50.0))
    for run_dir in tmp_path.iterdir():
        uniform_heads(run_dir, (0.003, -0.004))
    found = claims(tmp_path)
    for key in ("a_cutmix_local", "a_other_not_local", "a_separation", "c_cutmix_gain", "c_autoaug_gain"):
        claim = found[key]
        assert claim["run_verdict"] == claim["mean_verdict"] == "not informative: attention still uniform", key
        assert claim["run_diagonal_verdict"] == claim["run_verdict"], key
    assert found["d_ls_keeps"]["run_verdict"] == "not informative: attention still uniform"
    assert more_local(tmp_path)[0].startswith("not informative: attention still uniform, 1 seed (Baseline seed 0")


def test_every_verdict_cell_says_how_many_seeds_it_rests_on(tmp_path: Path) -> None:
    # One seed a cell, the demo's design: "(a) every non-CutMix cell >= 0.210" holds on one run each.
    found = claims(write_sweep(tmp_path / "one", {cell: values[:1] for cell, values in PAPER_EXACT.items()}))
    other = found["a_other_not_local"]
    assert other["row"][3] == other["row"][5] == "holds, 1 seed"
    assert other["row"][6] == "fails, 1 seed: 0.148 (-CM)"  # 0.210 / sqrt 2 over the diagonal
    assert other["run_seeds"] == "1"
    assert found["c_cutmix_gain"]["row"][3] == "holds, 1 seed"
    # Two seeds in most cells, three in one: the range is shown.
    mad = {**PAPER_EXACT, "+CM": [0.024, 0.020, 0.022]}
    found = claims(write_sweep(tmp_path / "two", mad))
    assert found["a_cutmix_local"]["row"][3] == "holds, 2-3 seeds" and found["a_cutmix_local"]["run_seeds"] == "2-3"
    assert found["d_autoaug_keeps"]["row"][3] == "holds, 2-3 seeds"  # it reads Baseline, +AA and +CM
