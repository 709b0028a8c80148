"""SIGTERM or Ctrl-C at a random step in the middle of an epoch, then the same command: the run ends on the weights,
and the figures, of a run never stopped. The signal goes to the whole process group (as `timeout`, `scancel` and a
terminal's Ctrl-C send it), data workers included. And how Ctrl-C becomes that stop (vit_locality/run/interrupts.py)."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest
import torch
from helpers import QUICK, Spawner, wait_for_step

from vit_locality.extras.instruments.loading import model_from_checkpoint
from vit_locality.run.interrupts import SigtermGate

STEPS_PER_EPOCH, EPOCHS = 8, 3
EXACT = [
    *[a for a in QUICK if not a.startswith(("data.train_size", "trainer.max_epochs", "data.batch_size"))],
    "data.train_size=256",
    "data.batch_size=32",
    f"trainer.max_epochs={EPOCHS}",
    "trainer.deterministic=true",
    "stats.pictures=false",
]
WORKERS = [*[a for a in EXACT if not a.startswith("data.num_workers")], "data.num_workers=2"]
ON_DEVICE = [*EXACT, "data.on_device=true"]


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def _checkpoint(run_dir: Path, name: str) -> dict:
    return torch.load(run_dir / "checkpoints" / name, map_location="cpu", weights_only=True)


def _mid_epoch_step(rng: random.Random) -> int:
    """A step inside epoch 2 or 3, never at an epoch boundary (which last.ckpt covers already)."""
    return rng.choice([s for s in range(STEPS_PER_EPOCH + 1, EPOCHS * STEPS_PER_EPOCH) if s % STEPS_PER_EPOCH])


def _unbroken(spawns: Spawner, args: list[str], run_dir: Path, cwd: Path) -> Path:
    proc = spawns.run_train([*args, f"hydra.run.dir={run_dir}"], cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def test_the_first_ctrl_c_during_fit_is_handed_to_the_sigterm_handler_and_the_second_raises(monkeypatch) -> None:
    gate, handled = SigtermGate(), []
    monkeypatch.setattr(signal, "getsignal", lambda signum: lambda *_: handled.append(signum))
    with pytest.raises(KeyboardInterrupt):
        gate.on_sigint(signal.SIGINT, None)  # outside fit: at once, as Python's own handler
    with gate.deferring():
        gate.on_sigint(signal.SIGINT, None)
        assert handled == [signal.SIGTERM] and gate.sigint_received
        with pytest.raises(KeyboardInterrupt):
            gate.on_sigint(signal.SIGINT, None)
    fresh = SigtermGate()
    monkeypatch.setattr(signal, "getsignal", lambda signum: fresh)  # Lightning's handler not (or no longer) in place
    with fresh.deferring(), pytest.raises(KeyboardInterrupt):
        fresh.on_sigint(signal.SIGINT, None)
    assert not fresh.sigint_received


@pytest.fixture(scope="module")
def unbroken_runs(tmp_path_factory: pytest.TempPathFactory, spawns: Spawner) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("unbroken")
    return {
        "workers": _unbroken(spawns, WORKERS, root / "workers", root),
        "on_device": _unbroken(spawns, ON_DEVICE, root / "od", root),
    }


@pytest.mark.parametrize(
    ("path", "sig", "code"),
    [("workers", signal.SIGTERM, 143), ("workers", signal.SIGINT, 130), ("on_device", signal.SIGTERM, 143)],
)
def test_a_signal_mid_epoch_resumes_to_the_unbroken_weights(
    path: str, sig: signal.Signals, code: int, unbroken_runs: dict[str, Path], tmp_path: Path, spawns: Spawner
) -> None:
    args = [*(WORKERS if path == "workers" else ON_DEVICE), f"hydra.run.dir={tmp_path / 'run'}"]
    step = _mid_epoch_step(random.Random())
    log, progress, run_dir = tmp_path / "stopped.log", tmp_path / "step", tmp_path / "run"
    proc = spawns.start_paced_train(args, tmp_path, log, progress, pause_s=0.3)
    wait_for_step(progress, step, proc)
    os.killpg(proc.pid, sig)  # during the pause after `step`: the stop comes at that batch's end
    assert proc.wait(timeout=120) == code, f"signalled after step {step}\n" + log.read_text()[-3000:]
    assert _record(run_dir)["status"] == "interrupted"
    saved = _checkpoint(run_dir, "interrupted.ckpt")
    assert saved["global_step"] == step

    resumed = spawns.run_train(args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    output = resumed.stdout + resumed.stderr
    assert f"after its batch {step % STEPS_PER_EPOCH}" in output and "not resumable" not in output, output[-3000:]
    record, reference = _record(run_dir), _record(unbroken_runs[path])
    assert record["status"] == "complete" and record["steps"] == EPOCHS * STEPS_PER_EPOCH
    a = _checkpoint(unbroken_runs[path], "last.ckpt")["state_dict"]
    b = _checkpoint(run_dir, "last.ckpt")["state_dict"]
    assert a.keys() == b.keys()
    assert [k for k in a if not torch.equal(a[k], b[k])] == [], f"signalled after step {step}"
    assert record["metrics"] == reference["metrics"], f"signalled after step {step}"


def _as_the_previous_release_wrote_it(path: Path) -> None:
    """Rewrite a checkpoint into the layout of the release before settings became one object: compared with a run of
    that release on the same cell, its hyper-parameters are the only entry that differs (the architecture with all
    seven keys, the protocol without `device`, the optimiser's values as floats and its betas a tuple)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    hparams["model"] = {"stem": "patch", "pos_init": "learned", **hparams["model"]}
    hparams["protocol"] = {key: value for key, value in hparams["protocol"].items() if key != "device"}
    optim = hparams["optim"]
    hparams["optim"] = {**{k: float(v) for k, v in optim.items() if k != "betas"}, "betas": tuple(optim["betas"])}
    torch.save(checkpoint, path)


def test_a_cell_the_previous_release_stopped_resumes_and_one_it_finished_is_skipped(
    unbroken_runs: dict[str, Path], tmp_path: Path, spawns: Spawner
) -> None:
    args = [*WORKERS, f"hydra.run.dir={tmp_path / 'run'}"]
    step = _mid_epoch_step(random.Random())
    log, progress, run_dir = tmp_path / "stopped.log", tmp_path / "step", tmp_path / "run"
    proc = spawns.start_paced_train(args, tmp_path, log, progress, pause_s=0.3)
    wait_for_step(progress, step, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 143, log.read_text()[-3000:]
    for name in ("interrupted.ckpt", "last.ckpt"):
        _as_the_previous_release_wrote_it(run_dir / "checkpoints" / name)

    resumed = spawns.run_train(args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"after its batch {step % STEPS_PER_EPOCH}" in resumed.stdout + resumed.stderr
    a = _checkpoint(unbroken_runs["workers"], "last.ckpt")["state_dict"]
    b = _checkpoint(run_dir, "last.ckpt")["state_dict"]
    assert [k for k in a if not torch.equal(a[k], b[k])] == [], f"signalled after step {step}"
    assert _record(run_dir)["metrics"] == _record(unbroken_runs["workers"])["metrics"]

    _as_the_previous_release_wrote_it(run_dir / "checkpoints" / "last.ckpt")
    model = model_from_checkpoint(_checkpoint(run_dir, "last.ckpt"))  # the report's instruments read it too
    assert all(torch.equal(value, b[f"model.{key}"]) for key, value in model.state_dict().items())
    again = spawns.run_train(args, cwd=tmp_path)
    assert again.returncode == 0 and "is complete already: skipped" in again.stdout + again.stderr
