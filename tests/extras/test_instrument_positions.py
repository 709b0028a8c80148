"""The position-embedding table of the instruments' report shows the rank locality and the length scale beside the
linear score, on codes whose answer is known (Gaussian bumps of width 0.5 and 3 patch steps; see
tests/extras/test_position_embedding.py: minus Pearson 0.503 / 0.994, similarity at 1 step 0.26 / 0.98, at >= 4 steps
0.00 / 0.56)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from position_fakes import gaussian_bumps

from vit_locality.extras.instrument_tables import Instruments, RunInstruments, positions_table
from vit_locality.extras.instruments.position_embedding import (
    position_locality,
    position_rank_locality,
    position_similarity,
)
from vit_locality.store.record import RunRecord


def measured(width: float, seed: int, min_mad: float) -> RunInstruments:
    run = RunRecord(
        Path(f"run{seed}"), {"seed": seed, "metrics": {}, "attention": {"final": {"min_mad_early": min_mad}}}
    )
    similarity = position_similarity(gaussian_bumps(width))
    return RunInstruments(run, similarity, position_locality(similarity))


def test_positions_table_shows_rank_locality_and_length_scale() -> None:
    found = Instruments("synthetic", "vit_tiny", {})
    found.measured = {"Baseline": [measured(3.0, 0, 0.4)], "+CM": [measured(0.5, 0, 0.1)], "+AA": []}
    table = positions_table(found)
    assert table.headers[2:6] == [
        "position locality",
        "rank locality",
        "similarity at 1 step",
        "similarity at >= 4 steps",
    ]
    rows = {row[0]: row for row in table.rows}
    assert list(rows) == ["Baseline", "+CM"]  # a cell without a usable checkpoint has no row
    # The broad code wins on Pearson (0.994 vs 0.503); by rank both are local, and the length scale tells them
    # apart: the sharp code is 0.26 similar one step away and 0 far away, the broad one still 0.56 far away.
    assert rows["Baseline"][2:7] == ["0.994", "0.997", "0.983", "0.564", "0.400"]
    assert rows["+CM"][2:7] == ["0.503", "0.999", "0.262", "0.000", "0.100"]
    records = {rec["cell"]: rec for rec in table.records}
    assert records["+CM"]["rank_locality"] >= records["Baseline"]["rank_locality"]
    assert (records["+CM"]["similarity_near"], records["+CM"]["similarity_far"]) == pytest.approx((0.26, 0.0), abs=0.01)
    assert records["Baseline"]["similarity_far"] == pytest.approx(0.56, abs=0.01)


def test_positions_table_averages_over_seeds() -> None:
    found = Instruments("synthetic", "vit_tiny", {})
    found.measured = {"+CM": [measured(0.5, 0, 0.1), measured(3.0, 1, 0.3)]}
    (row,) = positions_table(found).rows
    # Similarity at >= 4 steps: 0.000 and 0.564, mean 0.282, sample std 0.564 / sqrt 2 = 0.399.
    assert row[5] == "0.282 ± 0.399 (2)" and row[7] == "0: 0.503, 1: 0.994"


def test_rank_locality_with_ties_by_hand() -> None:
    # 2 x 2 grid, 12 ordered pairs: 8 one step apart, 4 diagonal. Similarities: 0.9 on (0,1), (0,2), (1,3), 0.5 on
    # (2,3) and on the diagonal (1,2), 0.1 on the diagonal (0,3). Mean ranks: similarity 0.1 -> 1.5 (2 pairs),
    # 0.5 -> 4.5 (4), 0.9 -> 9.5 (6); distance 1 -> 4.5 (8), sqrt 2 -> 10.5 (4). Around the mean rank 6.5:
    # covariance sum 6(3)(-2) + 2(-2)(-2) + 2(-5)(4) + 2(-2)(4) = -84, squares 120 and 96: Spearman -84 / sqrt(11520).
    sim = torch.tensor([[1.0, 0.9, 0.9, 0.1], [0.9, 1.0, 0.5, 0.9], [0.9, 0.5, 1.0, 0.5], [0.1, 0.9, 0.5, 1.0]])
    assert position_rank_locality(sim) == pytest.approx(84 / math.sqrt(11520), abs=1e-12)
