"""`hydra/launcher=packed` as a user runs it: the card's 8-cell grid trains as one pack and leaves 8 ordinary
complete records that the report reads as any sweep's; a cell that fits no pack trains alone after saying why; a
SIGTERM to the whole process group mid-epoch stops the pack resumably, and the same command ends every cell where an
unbroken run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import QUICK, REPO, TRAIN_THREADS, Spawner, wait_for_step

from vit_locality.run.checkpoints import last_checkpoint

GRID = ["aug.cutmix=true,false", "aug.autoaug=true,false", "loss.ls=0,0.1"]
PACKED = ["hydra/launcher=packed", *QUICK, "stats.probe_size=16", "stats.pictures=false"]
# train.py with the pack's every step followed by a pause and the count of steps written to a file: a test can then
# signal the pack after a known step. Sleeping and writing draw no random numbers, so the results are untouched.
PACED_PACK = """
import sys, time
from pathlib import Path
from vit_locality.run import pack
progress, pause = Path(sys.argv[1]), float(sys.argv[2])
real, count = pack.pack_loss, [0]
def paced(*args, **kwargs):
    result = real(*args, **kwargs)
    count[0] += 1
    progress.write_text(str(count[0]))
    time.sleep(pause)
    return result
pack.pack_loss = paced
sys.argv = [sys.argv[0], *sys.argv[3:]]
from vit_locality.train import cli
cli()
"""


def records(sweep: Path) -> dict[str, dict]:
    return {path.parent.name: json.loads(path.read_text()) for path in sweep.glob("*/results.json")}


def test_the_grid_trains_as_one_pack_of_ordinary_cells(spawns: Spawner, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    done = spawns.run_train(["-m", *GRID, *PACKED, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = records(sweep)
    assert len(found) == 8 and all(record["status"] == "complete" for record in found.values())
    assert len({record["packed"]["pack_id"] for record in found.values()}) == 1
    assert {record["packed"]["cells"] for record in found.values()} == {8}
    assert "pack 1 of 1: 8 cells" in done.stderr + done.stdout
    out = tmp_path / "reports"
    report = subprocess.run(
        [sys.executable, "-m", "vit_locality.report", "ablation", str(sweep), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    table = next(out.glob("ablation_*.md")).read_text()
    for cell in ("Baseline", "+AA", "+CM", "+LS", "-AA", "-CM", "-LS", "Modern"):
        assert f"| {cell} " in table, cell
    again = spawns.run_train(["-m", *GRID, *PACKED, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert again.returncode == 0 and (again.stdout + again.stderr).count("is complete already: skipped") == 8


def test_a_cell_that_fits_no_pack_trains_alone(spawns: Spawner, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    done = spawns.run_train(["-m", "model.drop_path=0,0.1", *PACKED, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "trains alone (model.drop_path > 0 (stochastic depth is not fused))" in done.stdout + done.stderr
    found = records(sweep).values()
    assert sorted(("packed" in record, record["status"]) for record in found) == [
        (False, "complete"),
        (True, "complete"),
    ]


def start_paced(args: list[str], cwd: Path, log: Path, progress: Path) -> subprocess.Popen:
    """train.py in a process group of its own, pausing 0.3 s after each pack step (PACED_PACK)."""
    env = {**os.environ, "OMP_NUM_THREADS": TRAIN_THREADS, "WANDB_MODE": "offline"}
    return subprocess.Popen(
        [sys.executable, "-c", PACED_PACK, str(progress), "0.3", *args],
        cwd=cwd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def test_sigterm_to_the_group_mid_epoch_resumes_every_cell_exactly(spawns: Spawner, tmp_path: Path) -> None:
    cells = ["aug.cutmix=true,false", "trainer.max_epochs=2"]  # 4 steps an epoch: stopped after epoch 2's step 2
    unbroken = tmp_path / "unbroken"
    done = spawns.run_train(["-m", *PACKED, *cells, f"hydra.sweep.dir={unbroken}"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    sweep, log, progress = tmp_path / "sweep", tmp_path / "stopped.log", tmp_path / "steps"
    proc = start_paced(["-m", *PACKED, *cells, f"hydra.sweep.dir={sweep}"], tmp_path, log, progress)
    wait_for_step(progress, 6, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 143, log.read_text()[-3000:]
    assert {record["status"] for record in records(sweep).values()} == {"interrupted"}
    again = spawns.run_train(["-m", *PACKED, *cells, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "pack of 2 cells on cpu, from epoch 2/2, step 3/4" in again.stdout + again.stderr  # not a fresh start
    reference, resumed = records(unbroken), records(sweep)
    assert resumed.keys() == reference.keys() and len(resumed) == 2
    for name, record in resumed.items():
        assert record["status"] == "complete" and record["metrics"] == reference[name]["metrics"], name
        a = torch.load(last_checkpoint(unbroken / name), weights_only=True)["state_dict"]
        b = torch.load(last_checkpoint(sweep / name), weights_only=True)["state_dict"]
        assert [key for key in a if not torch.equal(a[key], b[key])] == [], name


@pytest.mark.parametrize("value", ["0", "x"])
def test_cells_per_pack_must_be_a_positive_integer(spawns: Spawner, tmp_path: Path, value: str) -> None:
    done = spawns.run_train(
        ["-m", "seed=0,1", *PACKED, f"hydra.launcher.cells_per_pack={value}", f"hydra.sweep.dir={tmp_path / 's'}"],
        tmp_path,
    )
    assert done.returncode != 0
    assert "hydra.launcher.cells_per_pack" in done.stderr and "an integer >= 1" in done.stderr
    assert not list((tmp_path / "s").glob("*/results.json"))
