"""A sweep's verdict comes from its cells' records, under any launcher, for a sweep over any key."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from helpers import QUICK, QUICK_NAME, REPO, run_train
from omegaconf import OmegaConf
from test_results import complete_payload

from vit_locality.config.resolvers import register_resolvers
from vit_locality.config.schema import register_schemas
from vit_locality.paths import CONF_DIR
from vit_locality.run.record import write_record
from vit_locality.run.sweep_verdict import VERDICT_FILE, SweepVerdict, read_verdict, report_verdict, sweep_dir_of


@pytest.mark.slow
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
    verdict = json.loads((sweep / VERDICT_FILE).read_text())
    assert {Path(cell["run"]).name: cell["status"] for cell in verdict["cells"]} == statuses
    assert "1 cell(s) not complete" in proc.stderr and stems[1] in proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith(("Modern", "?"))]
    assert len(table) == 2 and any("failed" in line for line in table)


def _cell(sweep: Path, name: str, status: str | None) -> Path:
    """A cell's directory as Hydra sets it up (`.hydra/overrides.yaml`), with a record of `status` (None: none)."""
    run_dir = sweep / name
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "overrides.yaml").write_text("[]\n")
    if status is not None:
        write_record(run_dir, complete_payload(), status=status)
    return run_dir


def _end_of_multirun(sweep: Path, callback: SweepVerdict) -> None:
    callback.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))


def test_two_cells_one_failed_is_status_1_naming_it(tmp_path: Path, capsys) -> None:
    sweep, started = tmp_path / "sweep", time.time()
    callback = SweepVerdict()
    callback.on_multirun_start(OmegaConf.create({}))
    _cell(sweep, "good", "complete")
    _cell(sweep, "bad", "failed")
    _end_of_multirun(sweep, callback)
    written = json.loads((sweep / VERDICT_FILE).read_text())
    assert {Path(cell["run"]).name: cell["status"] for cell in written["cells"]} == {
        "good": "complete",
        "bad": "failed",
    }
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["cell", "status", "top-1", "(%)", "min", "MAD", "run"] and len(table) == 3
    assert any("failed" in line and line.rstrip().endswith("bad") for line in table)
    assert report_verdict(sweep, since=started) == 1
    assert capsys.readouterr().err.strip() == "error: 1 cell(s) not complete: bad (failed)"


def test_every_cell_complete_is_status_0(tmp_path: Path, capsys) -> None:
    sweep, started = tmp_path / "sweep", time.time()
    callback = SweepVerdict()
    callback.on_multirun_start(OmegaConf.create({}))
    _cell(sweep, "one", "complete")
    _cell(sweep, "two", "complete")
    _end_of_multirun(sweep, callback)
    assert report_verdict(sweep, since=started) == 0 and capsys.readouterr().err == ""


def test_cells_of_earlier_commands_and_earlier_verdicts_do_not_count(tmp_path: Path, capsys) -> None:
    sweep = tmp_path / "sweep"
    old = _cell(sweep, "old", "failed")
    an_hour_ago = time.time() - 3600
    os.utime(old / ".hydra" / "overrides.yaml", (an_hour_ago, an_hour_ago))
    callback = SweepVerdict()
    callback.on_multirun_start(OmegaConf.create({}))
    _cell(sweep, "new", None)  # failed before writing anything
    _end_of_multirun(sweep, callback)
    verdict = read_verdict(sweep, since=an_hour_ago)
    assert verdict is not None and verdict.incomplete == [(sweep / "new", "no record")]
    assert read_verdict(sweep, since=time.time() + 60) is None  # a verdict older than the command is not its own
    assert report_verdict(sweep, since=time.time() + 60) == 0
    assert "wrote no verdict.json" in capsys.readouterr().err


def test_the_entry_point_finds_the_sweep_directory_hydra_uses(tmp_path: Path) -> None:
    register_resolvers()  # as the entry point does before it asks
    register_schemas()
    assert sweep_dir_of(["data=synthetic"], CONF_DIR) is None  # no -m: no sweep
    assert sweep_dir_of(["-m", "seed=0,1", "sweep_name=demo"], CONF_DIR) == Path("multirun/demo")
    where = tmp_path / "here"
    assert sweep_dir_of(["-m", "seed=0,1", f"hydra.sweep.dir={where}"], CONF_DIR) == where
    assert REPO.is_dir()
