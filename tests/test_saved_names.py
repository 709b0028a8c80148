"""Today's cells keep their identity hashes and run directory names: a finished cell is found again (skipped, not
rerun) and a checkpoint resumes only under the config that wrote it, whatever changes in how configs are typed."""

from __future__ import annotations

import pytest
from saved_names import CELLS, cell_names, saved


def test_the_saved_set_covers_every_listed_cell() -> None:
    assert [row["overrides"] for row in saved()] == CELLS


@pytest.mark.parametrize("typed", [False, True], ids=["composed", "typed"])
@pytest.mark.parametrize("row", saved(), ids=lambda row: " ".join(row["overrides"]) or "default")
def test_each_cell_keeps_its_saved_identity_hash_and_name(row: dict, typed: bool) -> None:
    """From the composed config and from the cell's typed settings alike."""
    assert cell_names(row["overrides"], typed) == {"identity_hash": row["identity_hash"], "name": row["name"]}
