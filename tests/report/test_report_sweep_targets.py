"""Reports of the sweep a user made: the report targets render an existing sweep without training
it, a sweep without Baseline says so, a cell without runs shows its smoothing as a number, and the summary prints
accuracy at the reports' two decimals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from record_fakes import write_run

from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.tables import ablation_table
from vit_locality.report.summary import format_table

REPO = Path(__file__).resolve().parents[2]


def runs_python(commands: list[list[str]], module_or_script: str) -> list[list[str]]:
    return [cmd for cmd in commands if module_or_script in cmd]


def test_a_report_target_renders_a_given_sweep_and_trains_nothing(tmp_path: Path, spawns) -> None:
    sweep, reports = tmp_path / "sweep", tmp_path / "reports"
    for cell in ("Baseline", "+CM"):
        write_run(sweep, "synthetic", cell, 0, 50.0, 0.40, 0.5, model="vit_tiny")
    before = sorted(path.relative_to(sweep) for path in sweep.rglob("*"))
    done = subprocess.run(  # this Python (PY): rendering installs nothing, whatever the state of .venv
        ["make", "table-ablation", f"SWEEP={sweep}", f"REPORTS={reports}", f"PY={sys.executable}"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pip install" not in done.stdout
    assert sorted(path.relative_to(sweep) for path in sweep.rglob("*")) == before  # nothing trained, nothing written
    tables = sorted(path.name for path in reports.rglob("*.md"))
    assert any("ablation" in name and "synthetic" in name for name in tables), tables


def test_sweep_narrows_by_the_settings_given_and_never_trains(spawns) -> None:
    figures = spawns.make_dry_run("figures", "SWEEP=multirun/demo", "MODEL=vit_tiny_sincos")
    report_commands = runs_python(figures, "vit_locality.report")
    assert [cmd[cmd.index("vit_locality.report") + 1] for cmd in report_commands] == ["figures", "page"]
    for cmd in report_commands:
        assert cmd[cmd.index("vit_locality.report") + 2] == "multirun/demo"
        assert cmd[cmd.index("--model") + 1] == "vit_tiny_sincos" and "--data" not in cmd  # DATA was not given
    assert not runs_python(spawns.make_dry_run("paper", "SWEEP=multirun/demo"), "train.py")
    # Without SWEEP the target trains what is missing first.
    (train,) = runs_python(spawns.make_dry_run("table-ablation"), "train.py")
    assert "-m" in train and "experiment=ablation" in train


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
