"""A sweep's verdict comes from its cells' records, under any launcher, for a sweep over any key."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import QUICK, Spawner
from omegaconf import OmegaConf
from record_fakes import complete_payload

from vit_locality.precheck.names import ID_SUFFIX, fitted_name
from vit_locality.store.record import write_record
from vit_locality.sweep.command import COMMAND_ENV, CommandContext, current_command, new_command_id
from vit_locality.sweep.verdict import (
    VERDICT_FILE,
    SweepVerdict,
    note_cell,
    read_verdict,
    report_verdict,
    started_sweep_dir,
)


@pytest.mark.parametrize(
    "launcher", [["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], []], ids=["joblib", "basic"]
)
def test_a_failed_cell_fails_the_sweep_and_every_cell_has_its_own_directory(
    tmp_path: Path, launcher, spawns: Spawner
) -> None:
    """`-m optim.lr=...` (not one of the protocol flags): two cells, two directories; the diverging one fails, the
    other completes, and the launching process prints both and exits 1 though the cells ran in other processes."""
    sweep = tmp_path / "sweep"
    args = ["-m", "optim.lr=0.001,1e30", *QUICK, "sweep.continue_on_error=true", "stats.pictures=false", *launcher]
    proc = spawns.run_train([*args, f"hydra.sweep.dir={sweep}"], cwd=tmp_path, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    names = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    base = "synthetic_vit_tiny_aa1_cm1_ls0.1_s0"
    quick = {"data.batch_size": "64", "data.test_size": "64", "data.train_size": "256", "trainer.max_epochs": "1"}
    # each name shows the learning rate the command set (1e30 as `1e+30`), then the cell's identity hash
    stems = [fitted_name(base, dict(sorted({**quick, "optim.lr": lr}.items())), "0" * 16) for lr in ("0.001", "1e+30")]
    stems = [stem.removesuffix("_id-00000000") for stem in stems]
    assert sorted(ID_SUFFIX.sub("", name) for name in names) == sorted(stems)
    statuses = {ID_SUFFIX.sub("", n): json.loads((sweep / n / "results.json").read_text())["status"] for n in names}
    assert statuses == {stems[0]: "complete", stems[1]: "failed"}
    statuses = {name: statuses[ID_SUFFIX.sub("", name)] for name in names}
    verdict = json.loads((sweep / VERDICT_FILE).read_text())
    assert {Path(cell["run"]).name: cell["status"] for cell in verdict["cells"]} == statuses
    assert "1 cell(s) not complete" in proc.stderr and stems[1] + "_id-" in proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith(("Modern", "?"))]
    assert len(table) == 2 and any("failed" in line for line in table)


def _cell(sweep: Path, name: str, status: str | None, callback: SweepVerdict | None = None) -> Path:
    """A cell's directory as Hydra sets it up (`.hydra/overrides.yaml`), with a record of `status` (None: none),
    started by the command of `callback` (None: by no command of this test)."""
    run_dir = sweep / name
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "overrides.yaml").write_text("[]\n")
    if callback is not None:
        note_cell(sweep, callback.command_id, run_dir)  # what on_job_start does where the job runs
    if status is not None:
        write_record(run_dir, complete_payload(), status=status)
    return run_dir


def _command(monkeypatch) -> SweepVerdict:
    """A command as the entry point starts one: its own id in the environment, then Hydra's callback."""
    monkeypatch.setenv(COMMAND_ENV, CommandContext(new_command_id()).to_json())
    callback = SweepVerdict()
    callback.on_multirun_start(OmegaConf.create({}))
    return callback


def _end_of_multirun(sweep: Path, callback: SweepVerdict) -> None:
    callback.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))


def test_two_cells_one_failed_is_status_1_naming_it(tmp_path: Path, capsys, monkeypatch) -> None:
    sweep = tmp_path / "sweep"
    callback = _command(monkeypatch)
    _cell(sweep, "good", "complete", callback)
    _cell(sweep, "bad", "failed", callback)
    _end_of_multirun(sweep, callback)
    written = json.loads((sweep / VERDICT_FILE).read_text())
    assert {Path(cell["run"]).name: cell["status"] for cell in written["cells"]} == {
        "good": "complete",
        "bad": "failed",
    }
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["cell", "status", "top-1", "(%)", "min", "MAD", "run"] and len(table) == 3
    assert any("failed" in line and line.rstrip().endswith("bad") for line in table)
    assert report_verdict(sweep, callback.command_id) == 1
    assert capsys.readouterr().err.strip() == "error: 1 cell(s) not complete: bad (failed)"


def test_every_cell_complete_is_status_0(tmp_path: Path, capsys, monkeypatch) -> None:
    sweep = tmp_path / "sweep"
    callback = _command(monkeypatch)
    _cell(sweep, "one", "complete", callback)
    _cell(sweep, "two", "complete", callback)
    _end_of_multirun(sweep, callback)
    assert report_verdict(sweep, callback.command_id) == 0 and capsys.readouterr().err == ""


def test_cells_of_other_commands_and_their_verdicts_do_not_count(tmp_path: Path, capsys, monkeypatch) -> None:
    """Two commands overlapping in one sweep directory: the second starts its cell after the first started, and
    that cell is still running when the first ends. Each command judges its own cells, in its own verdict."""
    sweep = tmp_path / "sweep"
    _cell(sweep, "old", "failed")  # an earlier command's
    first = _command(monkeypatch)
    _cell(sweep, "first-a", "complete", first)
    second = _command(monkeypatch)
    running = _cell(sweep, "second-a", "running", second)
    _cell(sweep, "first-b", None, first)  # failed before writing anything
    _end_of_multirun(sweep, first)
    verdict = read_verdict(sweep, first.command_id)
    assert verdict is not None and verdict.incomplete == [((sweep / "first-b").resolve(), "no record")]
    assert [run.name for run, _ in verdict.cells] == ["first-a", "first-b"]
    write_record(running, complete_payload(), status="complete")
    _end_of_multirun(sweep, second)
    assert report_verdict(sweep, second.command_id) == 0
    assert report_verdict(sweep, first.command_id) == 1  # its own verdict, not the one written after it
    assert read_verdict(sweep, new_command_id()) is None  # a command that wrote none finds none
    assert report_verdict(sweep, new_command_id()) == 0
    assert "wrote no verdict" in capsys.readouterr().err


def test_the_entry_point_finds_the_sweep_directory_hydra_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict reads the sweep directory Hydra's master config resolved, noted in the command's context when the
    multirun starts, with no composition of its own; the command's id stays the entry point's."""
    command = CommandContext(new_command_id(), cell_count=2, sweep=True)
    monkeypatch.setenv(COMMAND_ENV, command.to_json())
    assert started_sweep_dir() is None  # no multirun started: no sweep
    where = tmp_path / "here"
    callback = SweepVerdict()
    callback.on_multirun_start(OmegaConf.create({"hydra": {"sweep": {"dir": str(where)}, "launcher": {}}}))
    assert started_sweep_dir() == where
    assert current_command() == replace(command, sweep_dir=str(where)) and callback.command_id == command.command_id


def test_a_multirun_started_without_the_entry_point_gets_an_id_its_jobs_inherit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hydra's callback started by another caller (no context in the environment) makes the command's id and hands
    it on, so that its jobs note their cells under it."""
    monkeypatch.setenv(COMMAND_ENV, "")  # none, and restored after the callback publishes one
    callback = SweepVerdict()
    callback.on_multirun_start(OmegaConf.create({}))
    assert callback.command_id and current_command().command_id == callback.command_id


def _wait_for_a_cell(sweep: Path, part: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until Hydra has set up a cell whose name holds `part`; the process is killed if none comes."""
    deadline = time.monotonic() + timeout
    while not any(part in mark.parent.parent.name for mark in sweep.glob("*/.hydra/overrides.yaml")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no cell {part} appeared in {sweep}")
        time.sleep(0.05)


@pytest.mark.parametrize(
    "launcher", [[], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"]], ids=["basic", "joblib"]
)
def test_two_commands_in_one_sweep_directory_each_judge_their_own_cells(
    tmp_path: Path, launcher, spawns: Spawner
) -> None:
    """The second command starts its cell while the first runs, and is still training when the first ends: the
    first exits 0 on its own cell, and each command's verdict lists its own cell only."""
    sweep = tmp_path / "sweep"
    common = ["-m", *QUICK, "stats.enabled=false", *launcher, f"hydra.sweep.dir={sweep}"]
    first = spawns.start_train([*common, "seed=1"], cwd=tmp_path, log=tmp_path / "first.log")
    _wait_for_a_cell(sweep, "_s1_", first)
    second = spawns.start_train([*common, "seed=2", "trainer.max_epochs=6"], cwd=tmp_path, log=tmp_path / "second.log")
    try:
        assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()[-3000:]
        second_running = second.poll() is None
        assert second.wait(timeout=600) == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()
    verdicts = [json.loads(path.read_text()) for path in sorted(sweep.glob(".verdict-*.json"))]
    seeds = sorted(tuple(sorted(Path(cell["run"]).name.split("_")[6] for cell in v["cells"])) for v in verdicts)
    assert seeds == [("s1",), ("s2",)], verdicts
    assert second_running or "error:" not in (tmp_path / "first.log").read_text()
