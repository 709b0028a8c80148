"""Measure again without training again: the statistics probe never moves a weight, so a complete cell asked with
other `stats` settings is measured from its final checkpoint in seconds, its record gaining that measurement beside
the first; and the cells of a sweep that are one computation train once."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from helpers import QUICK, settings_for

from vit_locality.run.checkpoints import last_checkpoint

TWO_EPOCHS = [*QUICK, "trainer.max_epochs=2", "stats.pictures=false"]


def state_of(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(last_checkpoint(run_dir), map_location="cpu", weights_only=True)
    return {**checkpoint["state_dict"], **{f"adam.{k}": v for k, v in _moments(checkpoint).items()}}


def _moments(checkpoint: dict) -> dict[str, torch.Tensor]:
    state = checkpoint["optimizer_states"][0]["state"]
    return {f"{index}.{name}": value for index, entry in state.items() for name, value in entry.items()}


def test_weights_are_bit_identical_whatever_the_statistics(trains, tmp_path: Path) -> None:
    """Probing at every epoch with 16 images, or not at all: the same weights and Adam moments, bit for bit (the
    probe runs between batches, each of which reseeds from (seed, epoch, batch))."""
    variants = {"probe16": ["stats.probe_size=16", "stats.renormalize=false"], "off": ["stats.enabled=false"]}
    states = {}
    for name, extra in variants.items():
        trains.run_cell_as_train(settings_for([*TWO_EPOCHS, *extra]), tmp_path / name)
        states[name] = state_of(tmp_path / name)
    first = states["probe16"]
    for name, state in states.items():
        assert state.keys() == first.keys()
        assert all(torch.equal(state[key], first[key]) for key in first), name


def _record(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def test_a_complete_cell_is_measured_again_not_trained_again(spawns, tmp_path: Path) -> None:
    first = spawns.run_train([*QUICK, "stats.probe_size=16"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    [run_dir] = (tmp_path / "outputs").iterdir()
    trained = _record(run_dir)
    checkpoint_time = last_checkpoint(run_dir).stat().st_mtime_ns

    again = spawns.run_train([*QUICK, "stats.probe_size=32", "stats.renormalize=false"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [path.name for path in (tmp_path / "outputs").iterdir()] == [run_dir.name]  # the same cell
    output = again.stdout + again.stderr
    assert "not retrained: its final weights measured again" in output
    assert "per-epoch trajectories (attention_stats.csv) stay those measured during training" in output
    record = _record(run_dir)
    assert record["timings"] == trained["timings"] and record["attention"]["final"] == trained["attention"]["final"]
    assert last_checkpoint(run_dir).stat().st_mtime_ns == checkpoint_time
    [measured] = record["attention"]["remeasured"]
    assert measured["probe_images"] == 32 and measured["settings"]["renormalize"] is False
    assert measured["epoch"] == trained["epochs"] and measured["checkpoint"] == "checkpoints/last.ckpt"
    assert len(measured["per_head"]["mad"]) == len(trained["attention"]["final"]["per_head"]["mad"])

    twice = spawns.run_train([*QUICK, "stats.probe_size=32", "stats.renormalize=false"], cwd=tmp_path)
    assert twice.returncode == 0 and "is complete already: skipped" in twice.stdout + twice.stderr
    assert len(_record(run_dir)["attention"]["remeasured"]) == 1  # held already: not measured a third time
    default = spawns.run_train([*QUICK, "stats.probe_size=16"], cwd=tmp_path)
    assert "is complete already: skipped" in default.stdout + default.stderr


def test_an_inert_setting_sweep_trains_each_computation_once(spawns, tmp_path: Path) -> None:
    args = ["-m", *QUICK, "stats.enabled=false", "aug.cutmix=true,false", "aug.cutmix_alpha=0.3,1.0"]
    done = spawns.run_train([*args, f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    directories = sorted(path.name for path in (tmp_path / "sweep").iterdir() if path.is_dir() and "_s0" in path.name)
    assert len(directories) == 3, directories
    assert all(_record(tmp_path / "sweep" / name)["status"] == "complete" for name in directories)
    assert "are one computation" in output and "is complete already: skipped" in output
    assert "aug.cutmix_alpha=0.3 has no effect with aug.cutmix=false" in output
