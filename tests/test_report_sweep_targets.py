"""Reports of the sweep a user made (issue #42, item 3): the report targets render an existing sweep without training
it, a sweep without Baseline says so, a cell without runs shows its smoothing as a number, and the summary prints
accuracy at the reports' two decimals."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_report import write_run

from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.tables import ablation_table
from vit_locality.report.summary import format_table

REPO = Path(__file__).resolve().parents[1]


def dry_run(*args: str) -> list[str]:
    """The commands `make -n` would run (install's own lines left out)."""
    out = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "vit_locality.report" in line or "train.py" in line]


def test_report_targets_render_a_given_sweep_and_train_nothing(spawns) -> None:
    assert dry_run("table-ablation", "SWEEP=multirun/demo") == [
        ".venv/bin/python -m vit_locality.report ablation multirun/demo   --out reports"
    ]
    assert dry_run("figures", "SWEEP=multirun/demo", "MODEL=vit_tiny_sincos") == [
        ".venv/bin/python -m vit_locality.report figures multirun/demo  --model vit_tiny_sincos --out reports",
        ".venv/bin/python -m vit_locality.report page multirun/demo  --model vit_tiny_sincos --out reports",
    ]
    assert not any("train.py" in line for line in dry_run("paper", "SWEEP=multirun/demo"))
    # Without SWEEP the targets train what is missing first, as before.
    assert "train.py -m experiment=ablation" in dry_run("table-ablation")[0]


def test_a_sweep_without_baseline_says_so(tmp_path: Path) -> None:
    write_run(tmp_path, "synthetic", "Modern", 0, 50.0, 0.40, 0.5, model="vit_tiny")
    write_run(tmp_path, "synthetic", "+CM", 0, 40.0, 0.40, 0.5, model="vit_tiny")
    table = ablation_table(aggregate([tmp_path]), "synthetic", "vit_tiny")
    against = next(part for part in table.parts if part.stem.endswith("_contrasts"))
    assert "(no Baseline cell in this sweep)" in against.markdown()
    assert "(no complete runs)" not in table.markdown()


def test_cells_without_runs_show_the_paper_s_smoothing(tmp_path: Path) -> None:
    write_run(tmp_path, "synthetic", "Baseline", 0, 50.0, 0.40, 0.5, model="vit_tiny")
    rows = {row[0]: row for row in ablation_table(aggregate([tmp_path]), "synthetic", "vit_tiny").rows}
    assert [rows[cell][3] for cell in ("Baseline", "+LS", "Modern", "-LS")] == ["0", "0.1", "0.1", "0"]


def test_the_summary_prints_accuracy_at_two_decimals() -> None:
    text = format_table([{"cell": "Baseline", "top-1 (%)": 81.2, "min MAD early": 0.47612}])
    assert "81.20 " in text and "81.2000" not in text and "0.4761" in text
