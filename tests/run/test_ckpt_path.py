"""`ckpt_path=FILE` on train: a new cell from the file's weights (ckpt_mode=weights, the default), or the same cell
resumed from it (ckpt_mode=resume, identity-checked); a missing or damaged file is one line, before any training."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import CONF, QUICK, InProcessTraining, Spawner, compose_config, typed

from vit_locality.config.identity import file_content_hash, identity_hash
from vit_locality.errors import ConfigError
from vit_locality.precheck.gate import check_start
from vit_locality.precheck.preflight import check_command
from vit_locality.run import cell
from vit_locality.run.checkpoints import DamagedCheckpoint, ForeignCheckpoint
from vit_locality.run.start import settings_that_differ

CELL = [*QUICK, "stats.enabled=false"]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, trains: InProcessTraining) -> tuple[Path, dict[str, Any]]:
    """A complete 1-epoch cell: its last.ckpt is the checkpoint the tests start from."""
    run_dir = tmp_path_factory.mktemp("source") / "run"
    record = trains.run_cell_as_train(compose_config(CELL), run_dir)
    return run_dir / "checkpoints" / "last.ckpt", record


def test_a_start_from_weights_is_another_cell_named_by_the_files_content(
    source: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    checkpoint, record = source
    scratch = identity_hash(typed(CELL))
    from_weights = identity_hash(typed([*CELL, f"ckpt_path={checkpoint}"]))
    assert scratch == record["identity_hash"] and from_weights != scratch
    copy = tmp_path / "copy.ckpt"
    shutil.copy(checkpoint, copy)
    assert identity_hash(typed([*CELL, f"ckpt_path={copy}"])) == from_weights  # the content, not the path
    copy.write_bytes(copy.read_bytes() + b"\0")
    assert identity_hash(typed([*CELL, f"ckpt_path={copy}"])) != from_weights
    assert identity_hash(typed([*CELL, f"ckpt_path={checkpoint}", "ckpt_mode=resume"])) == scratch


def test_a_start_from_weights_never_collides_with_the_cell_from_scratch(
    source: tuple[Path, dict[str, Any]], trains: InProcessTraining
) -> None:
    """The from-scratch cell's complete directory is no result for the cell from its weights: refused, not skipped."""
    checkpoint, _ = source
    with pytest.raises(ConfigError, match="already holds a complete run with a different config"):
        trains.run_cell_as_train(compose_config([*CELL, f"ckpt_path={checkpoint}"]), checkpoint.parents[1])


def test_the_cell_trains_on_from_the_checkpoints_weights_and_says_so(
    source: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trains: InProcessTraining
) -> None:
    checkpoint, record = source
    loaded: list[bool] = []
    load = cell.load_start_weights

    def checked_load(module: torch.nn.Module, weights: dict[str, Any], path: str) -> None:
        load(module, weights, path)
        state = torch.load(checkpoint, weights_only=True)["state_dict"]
        loaded.append(all(torch.equal(module.state_dict()[k], state[k]) for k in state))

    monkeypatch.setattr(cell, "load_start_weights", checked_load)
    started = trains.run_cell_as_train(compose_config([*CELL, f"ckpt_path={checkpoint}"]), tmp_path / "run")
    assert loaded == [True]
    assert started["start"] == {
        "ckpt_path": str(checkpoint.resolve()),
        "ckpt_mode": "weights",
        "ckpt_sha256": file_content_hash(str(checkpoint)),
        "ckpt_identity": record["identity_hash"],
    }
    assert started["steps"] == record["steps"]  # a fresh epoch on top of the weights, not a resumed loop


def test_resume_continues_only_the_cell_that_wrote_the_checkpoint(
    source: tuple[Path, dict[str, Any]], tmp_path: Path, trains: InProcessTraining
) -> None:
    checkpoint, record = source
    resumed = trains.run_cell_as_train(
        compose_config([*CELL, f"ckpt_path={checkpoint}", "ckpt_mode=resume"]), tmp_path / "a"
    )
    assert resumed["steps"] == record["steps"]  # its epoch was done: nothing more to train
    assert resumed["metrics"]["test/acc1"] == record["metrics"]["test/acc1"]
    assert resumed["start"]["ckpt_mode"] == "resume" and resumed["identity_hash"] == record["identity_hash"]

    other = compose_config([*CELL, f"ckpt_path={checkpoint}", "ckpt_mode=resume", "seed=1"])
    with pytest.raises(ForeignCheckpoint) as refused:
        trains.run_cell_as_train(other, tmp_path / "b")
    message = str(refused.value)
    assert "the settings that differ: seed 0 there, 1 here" in message and "\n" not in message  # not two hashes
    assert not (tmp_path / "b" / "results.json").exists()  # refused before anything was recorded


def _hash_like(line: str) -> list[str]:
    """Words of `line` that look like an identity hash (16 hex digits)."""
    return [word for word in re.findall(r"[0-9a-f]{16}", line) if not word.isalpha()]


def test_a_resume_of_another_cells_checkpoint_is_refused_by_the_pre_check(
    source: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """check_start (precheck/gate.py): the checkpoint's own cell passes; another config is one ConfigError
    naming the settings that differ (never two hashes); weights mode is not its concern."""
    checkpoint, _ = source
    resume = [f"ckpt_path={checkpoint}", "ckpt_mode=resume"]
    check_start(typed([*CELL, *resume]))  # the cell that wrote it
    check_start(typed([*CELL, f"ckpt_path={checkpoint}", "seed=1"]))  # a new cell from its weights
    with pytest.raises(ConfigError) as refused:
        check_start(typed([*CELL, *resume, "seed=1", "optim.lr=0.003"]))
    line = str(refused.value)
    assert line == (
        f"ckpt_path={str(checkpoint)!r} with ckpt_mode=resume: the checkpoint is another cell's; the settings that "
        "differ: optim.lr 0.001 there, 0.003 here, seed 0 there, 1 here; resume only continues the cell that wrote it "
        "(ckpt_mode=weights starts a new cell from its weights)"
    )
    assert refused.value.exit_code == 2 and _hash_like(line) == []

    lonely = tmp_path / "lonely.ckpt"  # no record beside it to name the settings
    shutil.copy(checkpoint, lonely)
    with pytest.raises(ConfigError) as refused:
        check_start(typed([*CELL, f"ckpt_path={lonely}", "ckpt_mode=resume", "seed=1"]))
    assert f"another cell's (no record of it at {tmp_path.parent / 'results.json'}" in str(refused.value)
    assert _hash_like(str(refused.value)) == []


def test_a_refused_resume_names_a_start_from_weights(source: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """A cell started from weights has the file in its identity: resuming its checkpoint under a from-scratch config
    names that start, rather than calling the settings the same."""
    checkpoint, _ = source
    cell_dir = tmp_path / "started"
    shutil.copytree(checkpoint.parents[1], cell_dir)
    record = json.loads((cell_dir / "results.json").read_text())
    record["config"].update(ckpt_path="/elsewhere/first.ckpt", ckpt_mode="weights")
    (cell_dir / "results.json").write_text(json.dumps(record))
    copied = cell_dir / "checkpoints" / "last.ckpt"
    cfg = typed([*CELL, f"ckpt_path={copied}", "ckpt_mode=resume"])
    assert settings_that_differ(cfg, copied) == (
        "; the settings that differ: start weights of /elsewhere/first.ckpt there, scratch here"
    )


def test_the_pre_check_refuses_a_checkpoint_without_identity_or_not_a_checkpoint(tmp_path: Path) -> None:
    unstamped = tmp_path / "unstamped.ckpt"
    torch.save({"global_step": 3, "state_dict": {"w": torch.zeros(2)}}, unstamped)
    with pytest.raises(ConfigError, match="the checkpoint records no config .a cell of this project did not write it."):
        check_start(typed([*CELL, f"ckpt_path={unstamped}", "ckpt_mode=resume"]))
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError) as refused:
        check_start(typed([*CELL, f"ckpt_path={damaged}", "ckpt_mode=resume"]))
    assert str(refused.value).startswith(f"ckpt_path={str(damaged)!r} is not allowed: a readable checkpoint file (")
    assert "\n" not in str(refused.value)
    check_start(typed([*CELL, f"ckpt_path={damaged}"]))  # weights mode: the cell names the damage


def test_a_damaged_checkpoint_is_refused_before_training(tmp_path: Path, trains: InProcessTraining) -> None:
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(b"not a checkpoint")
    for mode in ("weights", "resume"):
        with pytest.raises(DamagedCheckpoint, match="damaged") as refused:
            trains.run_cell_as_train(
                compose_config([*CELL, f"ckpt_path={damaged}", f"ckpt_mode={mode}"]), tmp_path / mode
            )
        assert refused.value.exit_code == 2
        assert not (tmp_path / mode / "results.json").exists()


def test_a_missing_file_or_mode_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.ckpt"
    allowed = "null or a checkpoint file this user can read"
    assert check_command([f"ckpt_path={missing}"], CONF) == [
        f"ckpt_path={str(missing)!r} is not allowed: {allowed} (no such file)"
    ]
    assert check_command([f"ckpt_path={tmp_path}"], CONF) == [
        f"ckpt_path={str(tmp_path)!r} is not allowed: {allowed} (a directory)"
    ]
    (problem,) = check_command(["ckpt_mode=restart"], CONF)
    assert "ckpt_mode" in problem and "\n" not in problem
    assert check_command(["ckpt_mode=resume"], CONF) == [
        "ckpt_mode='resume' is not allowed: only with ckpt_path=FILE (the checkpoint to resume from)"
    ]
    assert check_command([], CONF) == []


def test_train_refuses_a_missing_file_in_one_line_with_status_2(tmp_path: Path, spawns: Spawner) -> None:
    proc = spawns.run_train([*CELL, f"ckpt_path={tmp_path / 'nowhere.ckpt'}"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: ckpt_path=") and not (tmp_path / "outputs").exists()


def test_train_names_the_cell_by_the_checkpoints_content(
    source: tuple[Path, dict[str, Any]], tmp_path: Path, spawns: Spawner
) -> None:
    checkpoint, _ = source
    proc = spawns.run_train([*CELL, f"ckpt_path={checkpoint}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = (tmp_path / "outputs").iterdir()
    assert f"_s0_ckpt-{file_content_hash(str(checkpoint))[:10]}_" in run_dir.name  # the from-scratch cell's lacks it
    assert json.loads((run_dir / "results.json").read_text())["start"]["ckpt_mode"] == "weights"


# --- a checkpoint replaced while the cell starts ----------------------------------------------------------------------


def _other_weights(checkpoint: Path, out: Path) -> Path:
    """A checkpoint of the same cell with other weights (one tensor shifted): what an epoch-boundary write leaves."""
    content = torch.load(checkpoint, weights_only=True)
    first = next(iter(content["state_dict"]))
    content["state_dict"][first] = content["state_dict"][first] + 1.0
    torch.save(content, out)
    return out


def test_a_checkpoint_replaced_after_the_identity_is_built_is_not_what_the_cell_is_named_for(
    source: tuple[Path, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trains: InProcessTraining
) -> None:
    """`os.replace` of ckpt_path right after the identity is built: the cell trains from the bytes its identity and
    record name (read once), never from what the file holds by the time the weights are read."""
    checkpoint, _ = source
    given = tmp_path / "start.ckpt"
    shutil.copy(checkpoint, given)
    original = torch.load(given, weights_only=True)["state_dict"]
    named_for = file_content_hash(str(given))
    args = [*CELL, f"ckpt_path={given}", "data.num_workers=1"]
    expected_identity = identity_hash(typed(args))
    replacement = _other_weights(checkpoint, tmp_path / "other.ckpt")
    built = cell.identity_hash

    def identity_then_replaced(cfg: Any) -> str:
        identity = built(cfg)
        os.replace(replacement, given)  # the file changes between the identity and the load
        return identity

    loaded: list[bool] = []
    load = cell.load_start_weights

    def checked_load(module: torch.nn.Module, weights: dict[str, Any], path: str) -> None:
        load(module, weights, path)
        loaded.append(all(torch.equal(module.state_dict()[k], original[k]) for k in original))

    monkeypatch.setattr(cell, "identity_hash", identity_then_replaced)
    monkeypatch.setattr(cell, "load_start_weights", checked_load)
    run_dir = tmp_path / "run"
    record = trains.run_cell_as_train(compose_config(args), run_dir)
    assert file_content_hash(str(given)) != named_for  # the file did change under the cell
    assert loaded == [True]  # the weights the cell is named for, not the replacement's
    assert record["identity_hash"] == expected_identity and record["start"]["ckpt_sha256"] == named_for
    stamped = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["vit_locality"]["identity_hash"]
    assert stamped == expected_identity  # its checkpoints resume under the same identity


REPLACED_AFTER_NAMING = """
import os, sys
from vit_locality.run import cell
from vit_locality.run.start import settings_that_differ
staged, target = sys.argv[1], sys.argv[2]
real = cell.run_cell
def replaced_then_run(*args, **kwargs):
    os.replace(staged, target)  # after Hydra named the run directory, before the cell reads the file
    return real(*args, **kwargs)
cell.run_cell = replaced_then_run
sys.argv = [sys.argv[0], *sys.argv[3:]]
from vit_locality.train import cli
cli()
"""


def test_a_checkpoint_replaced_after_the_cell_was_named_is_refused_in_one_line(
    source: tuple[Path, dict[str, Any]], tmp_path: Path, spawns: Spawner
) -> None:
    checkpoint, _ = source
    given = tmp_path / "start.ckpt"
    shutil.copy(checkpoint, given)
    named_for = file_content_hash(str(given))[:10]
    staged = _other_weights(checkpoint, tmp_path / "staged.ckpt")
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "2"}
    args = [*CELL, f"ckpt_path={given}", "data.num_workers=1"]
    proc = subprocess.run(
        [sys.executable, "-c", REPLACED_AFTER_NAMING, str(staged), str(given), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    (line,) = [line for line in output.splitlines() if "changed after the cell was named" in line]
    now_holds = file_content_hash(str(given))[:10]
    assert f"_ckpt-{named_for}" in line and f"named for content {named_for}, the file now holds {now_holds}" in line
    outputs = tmp_path / "outputs"  # the directory Hydra named for the old content, if it is kept at all
    assert not list(outputs.rglob("results.json")) and not list(outputs.rglob("*.ckpt"))
