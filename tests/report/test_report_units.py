"""Every report reads distances as every record since the previous release stores them, on the unit square; a record
from before the one stored unit (`settings.units` grid, pixels or diagonal) is left out, with the reason."""

from __future__ import annotations

import json
from pathlib import Path

from record_fakes import write_run

from vit_locality.report.load.aggregate import UNITS_NOTE, aggregate
from vit_locality.report.render.tables import ablation_table
from vit_locality.report.summary import main as summary_main


def test_a_record_in_other_units_is_left_out_of_every_report(tmp_path: Path, capsys) -> None:
    for seed in range(2):
        write_run(tmp_path, "cifar100", "Baseline", seed, 50.0, 0.30 + 0.02 * seed, 0.9)
    old = write_run(tmp_path, "cifar100", "+CM", 0, 50.0, 0.64, 0.9)
    data = json.loads((old / "results.json").read_text())
    data["attention"]["final"]["settings"]["units"] = "pixels"
    (old / "results.json").write_text(json.dumps(data))
    agg = aggregate([tmp_path])
    why = "distances stored in stats.units=pixels, from before the one stored unit: not read"
    assert (old, why) in agg.skipped
    assert "+CM" not in agg.cells("cifar100", "vit_paper")
    assert any(note.startswith(UNITS_NOTE) for note in ablation_table(agg, "cifar100", "vit_paper").notes)
    assert summary_main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert f"skipped {old}: {why}" in printed and f"min MAD early: {UNITS_NOTE}" in printed
