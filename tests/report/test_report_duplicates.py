"""A report counts a run once: records of one cell, seed and config whose identity hashes differ only by how a
value was spelled (`loss.ls=0` against the Baseline preset's 0.0, written before the schemas typed it)."""

from __future__ import annotations

from pathlib import Path

from record_fakes import complete_payload

from vit_locality.report.load.aggregate import aggregate_runs
from vit_locality.store.record import scan_records, write_record


def _baseline(ls: float, identity: str, lr: float = 0.001) -> dict:
    config = {"seed": 0, "optim": {"lr": lr}, "loss": {"ls": ls}, "trainer": {"max_epochs": 1}}
    protocol = {"autoaug": False, "cutmix": False, "ls": ls}
    return complete_payload(identity_hash=identity, protocol=protocol, config=config)


def test_one_run_spelled_two_ways_is_counted_once(tmp_path: Path) -> None:
    write_record(tmp_path / "ablation" / "baseline", _baseline(0, "aaaa"), status="complete")
    write_record(tmp_path / "protocols" / "baseline", _baseline(0.0, "bbbb"), status="complete")
    found = aggregate_runs(scan_records([tmp_path]))
    assert sum(len(group.runs) for group in found.groups.values()) == 1
    assert [why for _, why in found.skipped] == [
        f"duplicate of {tmp_path / 'ablation' / 'baseline'} (the same config and seed)"
    ]


def test_runs_that_differ_in_a_setting_are_not_duplicates(tmp_path: Path) -> None:
    write_record(tmp_path / "a", _baseline(0.0, "aaaa"), status="complete")
    write_record(tmp_path / "b", _baseline(0.0, "bbbb", lr=0.003), status="complete")
    found = aggregate_runs(scan_records([tmp_path]))
    assert sum(len(group.runs) for group in found.groups.values()) == 2 and found.skipped == []
