"""Today's cells keep their identity hashes and run directory names: a finished cell is found again (skipped, not
rerun) and a checkpoint resumes only under the config that wrote it, whatever changes in how configs are typed; a
directory named before names held the identity hash is still the cell's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from saved_names import CELLS, cell_names, composed, saved

from vit_locality.config.settings import RunSettings
from vit_locality.precheck.gate import resolved
from vit_locality.precheck.names import cell_name


def test_the_saved_set_covers_every_listed_cell() -> None:
    assert [row["overrides"] for row in saved()] == CELLS


@pytest.mark.parametrize("typed", [False, True], ids=["record", "typed"])
@pytest.mark.parametrize("row", saved(), ids=lambda row: " ".join(row["overrides"]) or "default")
def test_each_cell_keeps_its_saved_identity_hash_and_name(row: dict, typed: bool) -> None:
    """From the cell's settings and from its record's config alike."""
    assert cell_names(row["overrides"], typed) == {"identity_hash": row["identity_hash"], "name": row["name"]}
    assert row["name"].endswith("_id-" + row["identity_hash"][:8])


@pytest.mark.parametrize("row", saved(), ids=lambda row: " ".join(row["overrides"]) or "default")
def test_a_directory_named_before_ids_is_found_by_its_record(row: dict, tmp_path: Path) -> None:
    """A sweep written before names held ids: its cell's directory, found by the identity its record says, is the
    cell's name, so a re-run skips or resumes it; a directory of another identity under that name is not."""
    cfg = composed(row["overrides"])
    settings, base = RunSettings.from_values(resolved(cfg)), str(cfg.run_name)
    old = tmp_path / row["old_name"]
    old.mkdir()
    (old / "results.json").write_text(json.dumps({"identity_hash": "0" * 16, "status": "complete"}))
    assert cell_name(base, row["overrides"], settings, tmp_path) == row["name"]  # another cell's: not this one
    (old / "results.json").write_text(json.dumps({"identity_hash": row["identity_hash"], "status": "complete"}))
    assert cell_name(base, row["overrides"], settings, tmp_path) == row["old_name"]
