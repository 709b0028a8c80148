"""A sweep's verdict comes from its cells' records, under any launcher, for a sweep over any key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import QUICK, QUICK_NAME, run_train

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "launcher", [["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], []], ids=["joblib", "basic"]
)
def test_a_failed_cell_fails_the_sweep_and_every_cell_has_its_own_directory(tmp_path: Path, launcher) -> None:
    """`-m optim.lr=...` (not one of the protocol flags): two cells, two directories; the diverging one fails, the
    other completes, and the launching process prints both and exits 1 though the cells ran in other processes."""
    sweep = tmp_path / "sweep"
    args = ["-m", "optim.lr=0.001,1e30", *QUICK, "sweep.continue_on_error=true", "stats.pictures=false", *launcher]
    proc = run_train([*args, f"hydra.sweep.dir={sweep}"], cwd=tmp_path, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    names = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    base = "synthetic_vit_tiny_aa1_cm1_ls0.1_s0"
    stems = [
        f"{base}{QUICK_NAME}".replace("_trainer", f"_optim.lr-{lr}_trainer") for lr in ("0.001", "1e+30")
    ]  # as Hydra writes 1e30
    assert names == sorted(stems)
    statuses = {name: json.loads((sweep / name / "results.json").read_text())["status"] for name in names}
    assert statuses == {stems[0]: "complete", stems[1]: "failed"}
    assert "1 cell(s) not complete" in proc.stderr and stems[1] in proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith(("Modern", "?"))]
    assert len(table) == 2 and any("failed" in line for line in table)
