"""Bad configuration fails before anything runs: exit 2, one line naming the key, the value and what is allowed,
no traceback, and no run directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CONF, run_train

from vit_locality.preflight import check_command, explain

CASES = [
    (["aug.cutmix=maybe"], "aug.cutmix='maybe' is not allowed: true or false"),
    (["loss.ls=1.5"], "loss.ls=1.5 is not allowed: a number in [0, 1)"),
    (["loss.ls=-0.1"], "loss.ls=-0.1 is not allowed: a number in [0, 1)"),
    (["data=imagenet"], "data=imagenet is not allowed: one of cifar10, cifar100, synthetic, tiny_imagenet"),
    (["aug.cutmx=true"], "aug.cutmx: no such setting"),
    (["model.depth=0"], "model.depth=0 is not allowed: an integer >= 1"),
    (["model.dim=100", "model.heads=8"], "model.dim=100 is not allowed: a multiple of model.heads=8"),
    (["data=synthetic", "data.image_size=30"], "data.image_size=30 is not allowed: a multiple of 8"),
    (["data.batch_size=1", "aug.cutmix=true"], "data.batch_size=1 is not allowed: >= 2 when aug.cutmix=true"),
    (["trainer.accelerator=cpu", "trainer.devices=4096"], "trainer.devices=4096 is not allowed: at most"),
    (["trainer=ddp_cpu", "data.batch_size=63", "aug.cutmix=false"], "data.batch_size=63 is not allowed: a multiple of"),
    (["-m", "data=synthetic", "loss.ls=0,0.1,1.5"], "loss.ls=1.5 is not allowed"),  # the third cell of a sweep
    (["-m", "experiment=ablation", "data=synthetic", "data.batch_size=1"], "data.batch_size=1 is not allowed"),
]


@pytest.mark.parametrize(("args", "message"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_preflight_names_the_problem(args: list[str], message: str) -> None:
    problems = check_command(args, CONF)
    assert len(problems) == 1 and problems[0].startswith(message), problems
    assert "\n" not in problems[0]


@pytest.mark.parametrize(
    "args",
    [
        ["data=synthetic"],
        ["-m", "experiment=ablation", "seed=0,1"],
        ["-m", "experiment=protocols"],
        ["optim.betas=[0.9,0.99]", "hydra.run.dir=/tmp/x"],
        ["--cfg", "job", "aug.cutmx=1"],  # information requests go straight to Hydra
        ["-m", "hydra/launcher=slurm", "trainer=ddp", "trainer.devices=8"],  # GPUs are on the nodes, not here
    ],
)
def test_preflight_passes_good_commands(args: list[str]) -> None:
    assert check_command(args, CONF) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["aug.cutmx=true"], "error: aug.cutmx: no such setting"),
        (["data=imagenet"], "error: data=imagenet is not allowed"),
        (["-m", "data=synthetic", "loss.ls=0,1.5"], "error: loss.ls=1.5 is not allowed"),
    ],
)
def test_train_py_exits_2_with_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    proc = run_train([*args, f"hydra.run.dir={out_dir}", f"hydra.sweep.dir={out_dir}"], cwd=tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith(message), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not out_dir.exists()  # nothing was created, let alone something that looks complete


def test_base_config_files_are_not_offered_as_options(tmp_path: Path) -> None:
    """A `_`-prefixed file in a group is a base the options build on, not a value a user picks."""
    (tmp_path / "data").mkdir()
    for name in ("_common", "cifar10", "synthetic"):
        (tmp_path / "data" / f"{name}.yaml").write_text("{}\n")
    message = explain(Exception("Could not find 'data/imagenet'"), tmp_path)
    assert message == "data=imagenet is not allowed: one of cifar10, synthetic"
