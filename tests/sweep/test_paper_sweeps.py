"""The saved paper sweeps (conf/experiment) run as multiruns and feed the report end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import QUICK, QUICK_NAMED, REPO, Spawner

from vit_locality.precheck.names import fitted_name
from vit_locality.store.record import scan_records


def run_report(args: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "vit_locality.report", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_ablation_experiment_renders_the_paper_table(tmp_path: Path, spawns: Spawner) -> None:
    """The 8-cell grid: one run directory per cell, named by its flags, then the report; no pictures per run (the
    report does not read them; test_train_cli.py checks them)."""
    sweep = tmp_path / "ablation"
    args = ["-m", "experiment=ablation", *QUICK, "stats.pictures=false", f"hydra.sweep.dir={sweep}"]
    proc = spawns.run_train(args, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = scan_records([sweep]).complete
    assert len(runs) == 8 and all(run.config["sweep_name"] == "ablation" for run in runs)
    run_dirs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(run_dirs) == 8
    seen = set()
    for run_dir in run_dirs:
        record = json.loads((run_dir / "results.json").read_text())
        flags = record["protocol"]
        aa, cm, ls = int(flags["autoaug"]), int(flags["cutmix"]), flags["ls"]
        base = f"synthetic_vit_tiny_aa{aa}_cm{cm}_ls{ls:g}_s0"
        assert run_dir.name == fitted_name(base, QUICK_NAMED, record["identity_hash"])
        assert record["status"] == "complete"
        seen.add((aa, cm, ls))
    assert seen == {(a, c, s) for a in (0, 1) for c in (0, 1) for s in (0.0, 0.1)}

    out = tmp_path / "reports"
    report = run_report(["all", str(sweep), "--out", str(out)])
    assert report.returncode == 0, report.stderr[-3000:]
    table = (out / "ablation_synthetic_vit_tiny.md").read_text()
    for cell in ("Baseline", "+AA", "+CM", "+LS", "Modern", "-AA", "-CM", "-LS"):
        assert f"| {cell} " in table
    for stem in ("plane", "layers", "emergence"):
        for suffix in ("png", "pdf"):
            files = list(out.glob(f"{stem}*.{suffix}"))
            assert files and all(f.stat().st_size > 1000 for f in files), (stem, suffix)

    # Running the same sweep again trains nothing: every cell is complete with the same config.
    again = spawns.run_train(args, cwd=tmp_path)
    assert again.returncode == 0 and (again.stdout + again.stderr).count("complete already") == 8


def test_protocols_experiment_sweeps_baseline_and_modern(tmp_path: Path, spawns: Spawner) -> None:
    sweep = tmp_path / "protocols"
    proc = spawns.run_train(["-m", "experiment=protocols", *QUICK, f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = sorted(run.protocol.cell_name for run in scan_records([sweep]).complete)
    assert cells == ["Baseline", "Modern"]
    report = run_report(["protocols", str(sweep), "--out", str(tmp_path / "reports")])
    assert report.returncode == 0 and "synthetic" in report.stdout
