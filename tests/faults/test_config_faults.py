"""Bad configuration fails before anything runs: exit 2, one line naming the key, the value and what is allowed,
no traceback, and no run directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import CONF, Spawner
from hydra.errors import MissingConfigException

from vit_locality.precheck import gate as config
from vit_locality.precheck import preflight
from vit_locality.precheck.composer import Composer
from vit_locality.precheck.preflight import check_command
from vit_locality.precheck.refusals import explain

NAME_RULE = "letters, digits and _ . + - (it names a directory)"

CASES = [
    (["aug.cutmix=maybe"], "aug.cutmix='maybe' is not allowed: true or false"),
    (["loss.ls=1.5"], "loss.ls=1.5 is not allowed: a number in [0, 1)"),
    (["loss.ls=-0.1"], "loss.ls=-0.1 is not allowed: a number in [0, 1)"),
    (["data=imagenet"], "data=imagenet is not allowed: one of cifar10, cifar100, glyphs, synthetic, tiny_imagenet"),
    (["aug.cutmx=true"], "aug.cutmx: no such setting"),
    (["model.depth=0"], "model.depth=0 is not allowed: an integer in [1, 64]"),
    (["model.dim=100", "model.heads=8"], "model.dim=100 is not allowed: a multiple of model.heads=8"),
    (["data=synthetic", "data.image_size=30"], "data.image_size=30 is not allowed: a multiple of 8"),
    (["data.batch_size=1", "aug.cutmix=true"], "data.batch_size=1 is not allowed: >= 2 when aug.cutmix=true"),
    # data.batch_size a multiple of the devices: the machine has too few of them, not the batch a wrong size
    (
        ["trainer.accelerator=cpu", "trainer.devices=4096", "data.batch_size=4096"],
        "trainer.devices=4096 is not allowed: at most",
    ),
    (["trainer=ddp_cpu", "data.batch_size=63", "aug.cutmix=false"], "data.batch_size=63 is not allowed: a multiple of"),
    (["-m", "data=synthetic", "loss.ls=0,0.1,1.5"], "loss.ls=1.5 is not allowed"),  # the third cell of a sweep
    (["-m", "experiment=ablation", "data=synthetic", "data.batch_size=1"], "data.batch_size=1 is not allowed"),
    # statistics
    (["stats.probe_size=0"], "stats.probe_size=0 is not allowed: an integer >= 1"),
    (["stats.probe_size=-1"], "stats.probe_size=-1 is not allowed: an integer >= 1"),
    (["stats.early_layers=0"], "stats.early_layers=0 is not allowed: an integer in [1, 8]"),
    (["stats.early_layers=-1"], "stats.early_layers=-1 is not allowed: an integer in [1, 8]"),
    (["model=vit_tiny", "stats.early_layers=5"], "stats.early_layers=5 is not allowed: an integer in [1, 4]"),
    (["stats.units=bogus"], "stats.units='bogus' is not allowed: one of unit, grid, pixels"),
    (["stats.batch_size=0"], "stats.batch_size=0 is not allowed: an integer >= 1"),
    (["stats.every_n_epochs=0"], "stats.every_n_epochs=0 is not allowed: an integer >= 1"),
    (["stats.enabled=maybe"], "stats.enabled='maybe' is not allowed: true or false"),
    # data
    (["data=synthetic", "data.test_size=0"], "data.test_size=0 is not allowed: an integer >= 1"),
    (["data=synthetic", "data.num_classes=0"], "data.num_classes=0 is not allowed: an integer >= 2"),
    (["data=synthetic", "data.num_classes=1"], "data.num_classes=1 is not allowed: an integer >= 2"),
    (["data=synthetic", "data.period=1"], "data.period=1 is not allowed: a number of pixels >= 2, finite"),
    (["data=synthetic", "data.train_size=-5"], "data.train_size=-5 is not allowed: an integer >= 1"),
    (["data=synthetic", "data.noise=inf"], "data.noise=inf is not allowed: a number >= 0, finite"),
    (["data.eval_batch_size=0"], "data.eval_batch_size=0 is not allowed: an integer >= 1, or null"),
    (["data.eval_batch_size=-1"], "data.eval_batch_size=-1 is not allowed: an integer >= 1, or null"),
    (["data.val_size=-1"], "data.val_size=-1 is not allowed: an integer in [0, 49999]"),
    (["data.val_size=50000"], "data.val_size=50000 is not allowed: an integer in [0, 49999]"),
    (["data=tiny_imagenet", "data.val_size=100000"], "data.val_size=100000 is not allowed: an integer in [0, 99999]"),
    (["data=synthetic", "data.train_size=300", "data.val_size=300"], "data.val_size=300 is not allowed: an integer in"),
    (["data.download=maybe"], "data.download='maybe' is not allowed: true or false"),
    (["data=synthetic", "data.train_size=100"], "data.batch_size=128 is not allowed: at most the 100 training images"),
    (
        ["data=synthetic", "data.train_size=200", "data.val_size=100"],
        "data.batch_size=128 is not allowed: at most the 100 training images left after data.val_size=100",
    ),
    # optimiser and augmentation
    (["optim.lr=inf"], "optim.lr=inf is not allowed: > 0, finite"),
    (["optim.weight_decay=inf"], "optim.weight_decay=inf is not allowed: >= 0, finite"),
    (["optim.warmup_epochs=inf"], "optim.warmup_epochs=inf is not allowed: >= 0, finite"),
    (["optim.betas=[2,3]"], "optim.betas=[2, 3] is not allowed: two numbers in [0, 1)"),
    (["optim.betas=[0.9]"], "optim.betas=[0.9] is not allowed: two numbers in [0, 1)"),
    (["optim.min_lr_ratio=-5"], "optim.min_lr_ratio=-5 is not allowed: a number in [0, 1]"),
    (["aug.cutmix_alpha=inf"], "aug.cutmix_alpha=inf is not allowed: > 0, finite"),
    (["model.mlp_ratio=nan"], "model.mlp_ratio=nan is not allowed: > 0, finite"),
    # trainer
    (["trainer.precision=bogus"], "trainer.precision='bogus' is not allowed: one of auto, 32-true, bf16-mixed"),
    (["trainer.strategy=bogus"], "trainer.strategy='bogus' is not allowed: one of auto, ddp, ddp_spawn"),
    (["trainer.accelerator=bogus"], "trainer.accelerator='bogus' is not allowed: one of auto, cpu, cuda, gpu"),
    (["trainer.num_nodes=0"], "trainer.num_nodes=0 is not allowed: an integer >= 1"),
    (["trainer.num_nodes=abc"], "trainer.num_nodes='abc' is not allowed: an integer"),  # the schema's type
    (["trainer.log_every_n_steps=0"], "trainer.log_every_n_steps=0 is not allowed: an integer >= 1"),
    (["trainer.check_val_every_n_epoch=0"], "trainer.check_val_every_n_epoch=0 is not allowed: an integer >= 1"),
    (["trainer.gradient_clip_val=-1"], "trainer.gradient_clip_val=-1 is not allowed: null or a number >= 0"),
    (["trainer.deterministic=maybe"], "trainer.deterministic='maybe' is not allowed: true, false or warn"),
    (["trainer.limit_train_batches=1.5"], "trainer.limit_train_batches=1.5 is not allowed: null, a count"),
    (["trainer.devices=0"], "trainer.devices=0 is not allowed: an integer >= 1, -1 or auto"),
    # callbacks, logger, sweep
    (["callbacks.progress_bar=bogus"], "callbacks.progress_bar='bogus' is not allowed: one of tqdm, rich, none"),
    (["callbacks.checkpoint_every_n_epochs=0"], "callbacks.checkpoint_every_n_epochs=0 is not allowed: an integer"),
    (["callbacks.checkpoint_every_n_epochs=-1"], "callbacks.checkpoint_every_n_epochs=-1 is not allowed: an integer"),
    (["sweep.continue_on_error=maybe"], "sweep.continue_on_error='maybe' is not allowed: true or false"),
    (["seed=4294967296"], "seed=4294967296 is not allowed: an integer in [0, 4294967295]"),
    (["seed=-3"], "seed=-3 is not allowed: an integer in [0, 4294967295]"),
    (
        ["logger=wandb", "logger.wandb.mode=onlin"],
        "logger.wandb.mode='onlin' is not allowed: one of auto, online, offline, disabled",
    ),
    # names that become directories
    (["sweep_name=../../x"], f"sweep_name='../../x' is not allowed: {NAME_RULE}"),
    (["sweep_name=a/b"], f"sweep_name='a/b' is not allowed: {NAME_RULE}"),
    (["model.name=a/b"], f"model.name='a/b' is not allowed: {NAME_RULE}"),
    (["model.name=.."], f"model.name='..' is not allowed: {NAME_RULE}"),
    (["run_name=../x"], f"run_name='../x' is not allowed: {NAME_RULE}"),
    (["data.name=../x"], "data.name='../x' is not allowed: one of cifar10, cifar100, tiny_imagenet, synthetic"),
    # how the command line itself is written
    (["loss.ls=0,0.1"], "loss.ls=0,0.1 is not allowed without -m: one value"),
    (
        ["-m", "optim.lr=interval(0,1)"],
        "optim.lr=interval(0,1) is not allowed: a list a,b,c, range(...) or, with a search sweeper, interval(a, b)",
    ),
    (["-m", "hydra.run.dir=a,b"], "hydra.run.dir=a,b is not allowed: one value"),
    (["+seed=3"], "+seed: seed is set already"),
    (["~seed"], "seed: missing, and the run needs it"),
    (["~logger.wandb"], "~logger.wandb: nothing to delete"),
    (["~stats.pictures"], "stats.pictures: missing, and the run needs it (deleted with ~stats.pictures?)"),
    # the schema's types and choices, in every cell (a cell's values never leave a later cell untyped)
    (["optim.lr=abc"], "optim.lr='abc' is not allowed: a number"),
    (["-m", "stats.units=grid,miles"], "stats.units='miles' is not allowed: one of unit, grid, pixels"),
    (["-m", "seed=0,1", "callbacks.progress_bar=none,bar"], "callbacks.progress_bar='bar' is not allowed: one of"),
    (["data.train_size=3"], "data.train_size: no such setting"),  # a synthetic-only key on CIFAR-100
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
        ["trainer.precision=16", "trainer.strategy=ddp_spawn", "trainer.deterministic=warn", "optim.betas=[0,0.5]"],
        ["logger=wandb", "logger.wandb.mode=disabled", "++data.val_size=100", "++stats.pictures=false"],
        ["data=synthetic", "data.val_size=4872", "seed=4294967295", "sweep_name=paper-v2.1", "model.name=vit_b+"],
        ["data.eval_batch_size=null", "trainer.gradient_clip_val=1.0", "trainer.limit_train_batches=0.25"],
    ],
)
def test_preflight_passes_good_commands(args: list[str]) -> None:
    assert check_command(args, CONF) == []


def test_every_cell_of_a_long_sweep_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """601 cells, the last one bad: the pre-check once stopped looking after 512. Hydra composes every cell (about
    0.1-0.25 s each on these cores), so here the cells that differ only in their seed share one composition, the
    seed set on a copy: the test is about the cells the plan visits and checks, which stay the real ones."""
    real_compose = Composer._compose
    composed: dict[tuple[str, ...], tuple] = {}
    seeds_checked: list[int] = []

    def compose_once_per_seedless_cell(self, overrides):  # noqa: ANN001, ANN202
        overrides = list(overrides)
        seed = next((int(o.split("=", 1)[1]) for o in overrides if o.startswith("seed=")), None)
        rest = tuple(o for o in overrides if not o.startswith("seed="))
        if rest not in composed:
            composed[rest] = real_compose(self, rest)
        cfg, hydra_cfg = (node.copy() for node in composed[rest])
        if seed is not None:
            cfg.seed = seed
            seeds_checked.append(seed)
        return cfg, hydra_cfg

    monkeypatch.setattr(Composer, "_compose", compose_once_per_seedless_cell)
    seeds = ",".join(str(seed) for seed in range(600))
    assert check_command(["-m", "data=synthetic", f"seed={seeds},-1"], CONF) == [
        "seed=-1 is not allowed: an integer in [0, 4294967295]"
    ]
    assert seeds_checked == [*range(600), -1]


def test_output_directory_below_a_file(tmp_path: Path) -> None:
    a_file = tmp_path / "results.txt"
    a_file.write_text("x")
    allowed = f"a directory this user can create and write ({a_file} is a file)"
    run_dir, sweep_dir = str(a_file / "run"), str(a_file / "sweep")
    assert check_command([f"hydra.run.dir={run_dir}"], CONF) == [f"hydra.run.dir={run_dir!r} is not allowed: {allowed}"]
    sweep = check_command(["-m", f"hydra.sweep.dir={sweep_dir}", "seed=0,1"], CONF)
    assert sweep == [f"hydra.sweep.dir={sweep_dir!r} is not allowed: {allowed}"]
    # the part of a template before what only Hydra knows at run time is checked too
    assert check_command([f"hydra.run.dir={a_file}/${{now:%H}}"], CONF)[0].endswith(f"({a_file} is a file)")


def test_default_output_directories_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").write_text("a file where train.py puts its runs")
    (tmp_path / "multirun").write_text("and where it puts its sweeps")
    template = "outputs/${run_name}"
    assert check_command(["protocol=baseline"], CONF) == [
        f"hydra.run.dir={template!r} is not allowed: a directory this user can create and write (outputs is a file)"
    ]
    assert check_command(["-m", "seed=0,1"], CONF)[0].endswith("(multirun is a file)")


def test_output_directory_access_is_asked_for_this_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `os.access` answers decides, so the check means the same for root (who writes through permission bits,
    but not onto a read-only file system) as for anyone else."""
    monkeypatch.setattr(config.os, "access", lambda path, mode: Path(path) != tmp_path)
    problems = check_command([f"hydra.run.dir={tmp_path / 'run'}"], CONF)
    assert problems == [
        f"hydra.run.dir='{tmp_path / 'run'}' is not allowed: a directory this user can create and write "
        f"(this user cannot write in {tmp_path})"
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permission bits")
def test_output_directory_this_user_cannot_write(tmp_path: Path) -> None:
    read_only = tmp_path / "read_only"
    read_only.mkdir(mode=0o555)
    problems = check_command([f"hydra.run.dir={read_only / 'run'}"], CONF)
    assert problems == [
        f"hydra.run.dir='{read_only / 'run'}' is not allowed: a directory this user can create and write "
        f"(this user cannot write in {read_only})"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["aug.cutmx=true"], "error: aug.cutmx: no such setting"),
        (["data=imagenet"], "error: data=imagenet is not allowed"),
        (["-m", "data=synthetic", "loss.ls=0,1.5"], "error: loss.ls=1.5 is not allowed"),
        (["trainer.num_nodes=abc"], "error: trainer.num_nodes='abc' is not allowed: an integer"),
        (["optim.lr=abc"], "error: optim.lr='abc' is not allowed: a number"),
        (["logger=wandb", "logger.wandb.mode=onlin"], "error: logger.wandb.mode='onlin' is not allowed: one of auto"),
        (["-m", "sweep_name=../../x", "seed=0,1"], "error: sweep_name='../../x' is not allowed"),
    ],
)
def test_train_py_exits_2_with_one_line(args: list[str], message: str, tmp_path: Path, spawns: Spawner) -> None:
    out_dir = tmp_path / "out"
    proc = spawns.run_train([*args, f"hydra.run.dir={out_dir}", f"hydra.sweep.dir={out_dir}"], cwd=tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith(message), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not out_dir.exists()  # nothing was created, let alone something that looks complete


def test_train_py_refuses_a_run_directory_below_a_file(tmp_path: Path, spawns: Spawner) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    proc = spawns.run_train(["data=synthetic", f"hydra.run.dir={a_file / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: hydra.run.dir='{a_file / 'run'}' is not allowed: a directory this user can create and write "
        f"({a_file} is a file)"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # no outputs/, no multirun/


def test_base_config_files_are_not_offered_as_options(tmp_path: Path) -> None:
    """A `_`-prefixed file in a group is a base the options build on, not a value a user picks."""
    (tmp_path / "data").mkdir()
    for name in ("_common", "cifar10", "synthetic"):
        (tmp_path / "data" / f"{name}.yaml").write_text("{}\n")
    missing = MissingConfigException("Could not find 'data/imagenet'", missing_cfg_file="data/imagenet")
    message = explain(missing, tmp_path)
    assert message == "data=imagenet is not allowed: one of cifar10, synthetic"


def test_two_cells_of_a_sweep_never_share_a_run_directory() -> None:
    """Cells that differ only in settings outside the identity (workers, paths) would write into one directory."""
    problems = preflight.check_command(["-m", "data=synthetic", "data.num_workers=2,4", "seed=0,1"], CONF)
    assert len(problems) == 2 and all("would write into one run directory" in p for p in problems)
    assert "synthetic_vit_paper_aa1_cm1_ls0.1_s1" in problems[1]
    # Any axis that changes a result gets its own directories: no problem.
    assert (
        preflight.check_command(["-m", "data=synthetic", "optim.lr=1e-3,3e-3", "aug.policy=cifar10,svhn"], CONF) == []
    )
