"""Tags added to a complete cell: its record and its W&B run take them, and nothing is trained again."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from helpers import QUICK, InProcessTraining, compose_config, typed
from wandb_fakes import of_kind, wandb_records

from vit_locality.config.identity import identity_hash
from vit_locality.run import cell

CELL = [*QUICK, "stats.enabled=false"]


def no_training(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("a complete cell was trained again")


@pytest.fixture
def complete_cell(tmp_path: Path, trains: InProcessTraining) -> tuple[Path, dict[str, Any]]:
    run_dir = tmp_path / "run"
    trains.run_cell_as_train(compose_config([*CELL, "tags=[first]"]), run_dir)
    return run_dir, json.loads((run_dir / "results.json").read_text())


def test_new_tags_reach_the_record_without_retraining(
    complete_cell: tuple[Path, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    trains: InProcessTraining,
) -> None:
    run_dir, before = complete_cell
    monkeypatch.setattr(cell, "build_trainer", no_training)
    cfg = typed([*CELL, "tags=[first,paper,v2]"])
    assert identity_hash(cfg) == before["identity_hash"]  # tags are outside the identity
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        returned = trains.run_cell_as_train(cfg, run_dir)
    after = json.loads((run_dir / "results.json").read_text())
    assert after["tags"] == ["first", "paper", "v2"]
    (update,) = after["label_updates"]
    assert update["tags_added"] == ["paper", "v2"] and update["at"].endswith("+00:00")
    untouched = {k: v for k, v in after.items() if k not in ("tags", "label_updates")}
    assert untouched == {k: v for k, v in before.items() if k != "tags"}  # every result number as it was
    assert list(after)[-1] == "status" and after["status"] == "complete"
    assert returned["tags"] == after["tags"]
    lines = [r.getMessage() for r in caplog.records if "not retrained" in r.getMessage()]
    assert lines == [f"{cfg.run_name} is complete already, not retrained: tags paper, v2 added to results.json"]


def test_tags_already_there_or_fewer_change_nothing(
    complete_cell: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, trains: InProcessTraining
) -> None:
    run_dir, before = complete_cell
    monkeypatch.setattr(cell, "build_trainer", no_training)
    for tags in ("tags=[first]", "tags=[]"):  # tags are only ever added
        trains.run_cell_as_train(compose_config([*CELL, tags]), run_dir)
        assert json.loads((run_dir / "results.json").read_text()) == before


def test_a_setting_inside_the_identity_is_no_tag_update(
    complete_cell: tuple[Path, dict[str, Any]], trains: InProcessTraining
) -> None:
    """Only settings outside the identity ride along: another seed is another cell, refused in this directory."""
    run_dir, _ = complete_cell
    with pytest.raises(Exception, match="already holds a complete run with a different config"):
        trains.run_cell_as_train(compose_config([*CELL, "tags=[first,paper]", "seed=1"]), run_dir)


def test_the_cells_wandb_run_takes_the_new_tags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, trains: InProcessTraining
) -> None:
    """Offline: the tag update is a second offline run of the same id (what `wandb sync` merges), tagged with the
    cell's own tags and the new ones, and logging no metric."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    wandb_cell = [*CELL, "logger=wandb"]
    trains.run_cell_as_train(compose_config([*wandb_cell, "tags=[first]"]), run_dir)
    wandb.teardown()
    (first_run,) = (run_dir / "wandb").glob("offline-run-*")
    (first_record,) = of_kind(wandb_records(next(first_run.glob("run-*.wandb"))), "run")

    monkeypatch.setattr(cell, "build_trainer", no_training)
    with caplog.at_level(logging.INFO, logger="vit_locality"):
        trains.run_cell_as_train(compose_config([*wandb_cell, "tags=[first,paper]"]), run_dir)
    wandb.teardown()
    (second_run,) = set((run_dir / "wandb").glob("offline-run-*")) - {first_run}
    records = wandb_records(next(second_run.glob("run-*.wandb")))
    run_records = of_kind(records, "run")
    assert {r.run_id for r in run_records} == {first_record.run_id}
    assert list(run_records[-1].tags) == [*first_record.tags, "paper"]
    assert of_kind(records, "history") == []  # nothing trained, nothing logged
    (line,) = [r.getMessage() for r in caplog.records if "not retrained" in r.getMessage()]
    assert line.endswith(
        f"tags paper added to results.json; W&B run {first_record.run_id} tagged (saved offline in "
        f"{second_run}, upload with wandb sync)"
    )


def test_a_record_holding_another_data_sets_labels_fingerprint_is_refused_not_tagged(
    complete_cell: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, trains: InProcessTraining
) -> None:
    """Tags go only into a record measured on this data: one whose labels fingerprint is another data set's is
    refused, and its file stays byte for byte."""
    run_dir, before = complete_cell
    forged = {**before, "data_fingerprint": {**before["data_fingerprint"], "labels_sha256": "0f1e2d3c4b5a6978"}}
    forged["status"] = forged.pop("status")  # still written last
    (run_dir / "results.json").write_text(json.dumps(forged, indent=2))
    written = (run_dir / "results.json").read_bytes()
    monkeypatch.setattr(cell, "build_trainer", no_training)
    with pytest.raises(Exception, match=r"measured on other data \(the labels of all splits together"):
        trains.run_cell_as_train(compose_config([*CELL, "tags=[first,paper]"]), run_dir)
    assert (run_dir / "results.json").read_bytes() == written
