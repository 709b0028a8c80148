"""Position-embedding locality on codes whose answer is known: Gaussian bumps on the grid of widths 0.5, 1 and 3
patch steps (sharp to broad), and random embeddings."""

from __future__ import annotations

import math

import pytest
import torch
from position_fakes import gaussian_bumps

from vit_locality.extras.instruments.position_embedding import (
    position_locality,
    position_rank_locality,
    position_similarity,
    similarity_at_distances,
)

# width -> (minus Pearson, similarity at 1 step, similarity at >= 4 steps), computed for this grid.
KNOWN = {0.5: (0.503, 0.26, 0.00), 1.0: (0.772, 0.79, 0.00), 3.0: (0.994, 0.98, 0.56)}


@pytest.mark.parametrize("width", sorted(KNOWN))
def test_known_codes(width: float) -> None:
    similarity = position_similarity(gaussian_bumps(width))
    pearson, near, far = KNOWN[width]
    assert position_locality(similarity) == pytest.approx(pearson, abs=0.001)
    assert similarity_at_distances(similarity) == pytest.approx((near, far), abs=0.01)
    assert position_rank_locality(similarity) > 0.97  # every bump code falls with distance


def test_rank_locality_does_not_penalise_sharp_codes_as_pearson_does() -> None:
    sharp, broad = (position_similarity(gaussian_bumps(w)) for w in (0.5, 3.0))
    assert position_locality(sharp) < position_locality(broad) - 0.4  # Pearson prefers the broad code
    assert position_rank_locality(sharp) >= position_rank_locality(broad) - 0.02


def test_length_scale_orders_the_widths() -> None:
    far = [similarity_at_distances(position_similarity(gaussian_bumps(w)))[1] for w in (0.5, 1.0, 3.0)]
    near = [similarity_at_distances(position_similarity(gaussian_bumps(w)))[0] for w in (0.5, 1.0, 3.0)]
    assert near == sorted(near) and far == sorted(far) and far[0] < 0.01 < far[2]


def test_random_embeddings_are_not_local() -> None:
    table = torch.randn(65, 192, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    similarity = position_similarity(table)
    assert abs(position_rank_locality(similarity)) < 0.1 and abs(position_locality(similarity)) < 0.1
    near, far = similarity_at_distances(similarity)
    assert abs(near - far) < 0.05


def test_a_code_that_grows_with_distance_scores_negative() -> None:
    similarity = position_similarity(gaussian_bumps(1.0))
    assert position_rank_locality(-similarity) < -0.97


def test_ties_get_mean_ranks() -> None:
    constant = torch.ones(64, 64, dtype=torch.float64)
    assert math.isnan(position_rank_locality(constant))  # no ordering at all: undefined, not 0
