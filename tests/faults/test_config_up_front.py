"""Every value checked before the first cell trains, an override nothing reads refused, Trainer arguments as
Lightning users type them and one line for a wrong option of any group, Hydra's own included. Each rule is tested
holding and failing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CONF, QUICK, Spawner, typed
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from vit_locality.config.identity import identity_hash
from vit_locality.precheck import gate as checks
from vit_locality.precheck.names import named_settings
from vit_locality.precheck.preflight import check_command
from vit_locality.precheck.resolvers import register_resolvers

GIB = 2**30
# QUICK has 256 training images in batches of 64: 4 batches an epoch.
BATCHES_RULE = "null, a fraction of an epoch in (0, 1] or a count of batches in [1, 4] (an epoch's)"
WANDB_RULE = "a name of 1 to 128 characters without any of / \\ # ? % : (W&B's rule)"
NOT_READ = "no such setting, and nothing would read it"

REFUSED = [
    # Trainer values Lightning itself would refuse
    ([*QUICK, "+trainer.val_check_interval=1.5"], f"trainer.val_check_interval=1.5 is not allowed: {BATCHES_RULE}"),
    ([*QUICK, "+trainer.val_check_interval=5"], f"trainer.val_check_interval=5 is not allowed: {BATCHES_RULE}"),
    (
        [*QUICK, "trainer.limit_train_batches=2", "+trainer.val_check_interval=3"],
        "trainer.val_check_interval=3 is not allowed: null, a fraction of an epoch in (0, 1] or a count of batches in "
        "[1, 2]",
    ),
    ([*QUICK, "+trainer.max_time=abc"], "trainer.max_time='abc' is not allowed: DD:HH:MM:SS (e.g. 00:12:00:00)"),
    ([*QUICK, "+trainer.max_time={hourz:1}"], "trainer.max_time={'hourz': 1} is not allowed: DD:HH:MM:SS"),
    (
        [*QUICK, "+trainer.reload_dataloaders_every_n_epochs=-1"],
        "trainer.reload_dataloaders_every_n_epochs=-1 is not allowed: an integer >= 0",
    ),
    ([*QUICK, "trainer.limit_val_batches=-1"], "trainer.limit_val_batches=-1 is not allowed: null, a count"),
    ([*QUICK, "+trainer.limit_predict_batches=-1"], "trainer.limit_predict_batches=-1 is not allowed: null, a count"),
    ([*QUICK, "+trainer.barebones=true"], "trainer.barebones is not a setting here: it turns off the loggers"),
    (
        ["trainer.accelerator=mps"],
        "trainer.accelerator='mps' is not allowed here: Lightning says: `MPSAccelerator` can not run on your system",
    ),
    (
        ["trainer.accelerator=cpu", "trainer.strategy=fsdp"],
        "trainer.strategy='fsdp' is not allowed here: Lightning says: The strategy `fsdp` requires a GPU accelerator",
    ),
    # absurd sizes (those against this machine below)
    (["data=synthetic", "data.train_size=100000000"], "data.train_size=100000000 is not allowed: an integer in [1, "),
    (["data=synthetic", "data.image_size=4096"], "data.image_size=4096 is not allowed: a multiple of 8 (the 8 x 8"),
    (["model.depth=100000"], "model.depth=100000 is not allowed: an integer in [1, 64]"),
    (["model.dim=100000", "model.heads=1"], "model.dim=100000 is not allowed: an integer in [1, 8192]"),
    # names W&B refuses
    (["logger=wandb", "logger.wandb.project=lab/vit"], f"logger.wandb.project='lab/vit' is not allowed: {WANDB_RULE}"),
    (["logger=wandb", f"logger.wandb.project={'p' * 129}"], "logger.wandb.project='ppp"),
    # a figure no record has
    (["optimized_metric=val/acc"], "optimized_metric='val/acc' is not allowed: null or a figure every record has"),
    (
        ["optimized_metric=min_mad_early", "stats.enabled=false"],
        "optimized_metric='min_mad_early' is not allowed: a figure the cell measures: set stats.enabled=true",
    ),
    (["-m", "hparams_search=optuna_lr", "optimized_metric=acc"], "optimized_metric='acc' is not allowed"),
    # a bad value in the second cell of a sweep
    (["-m", *QUICK, "+trainer.max_time=00:01:00:00,abc"], "trainer.max_time='abc' is not allowed"),
    # overrides nothing reads
    (["+model.dropout=0.1"], f"+model.dropout: {NOT_READ} (the nearest real one is model.drop_path)"),
    (["+optim.momentum=0.9"], f"+optim.momentum: {NOT_READ} (the nearest real one is optim.betas)"),
    (
        ["+foo=1"],
        f"+foo: {NOT_READ} (the real ones here are seed, threads, optimized_metric, tags, ckpt_path, ckpt_mode",
    ),
    (["+ckpt_path=foo.ckpt"], "ckpt_path='foo.ckpt' is not allowed: null or a checkpoint file this user can read"),
    (["++new_top_level=x"], f"+new_top_level: {NOT_READ}"),
    (["+stats.extra=1"], f"+stats.extra: {NOT_READ}"),
    (["+data.root2=/tmp"], f"+data.root2: {NOT_READ} (the nearest real one is data.root)"),
    (["+logger.wandb.project=x"], f"+logger.wandb.project: {NOT_READ} (the nearest real one is logger.wandb)"),
    (["-m", "seed=0,1", "+optim.nesterov=true"], f"+optim.nesterov: {NOT_READ}"),
    # Trainer arguments without `+`: a typo still named
    (["trainer.max_stepz=3"], "trainer.max_stepz is not an argument of the installed Lightning Trainer (did you mean"),
    # one line for a wrong option of Hydra's own groups
    (
        ["hydra/launcher=joblb"],
        "hydra/launcher=joblb is not allowed: one of basic, joblib, packed, packed_slurm, slurm, slurm_node, "
        "submitit_local, submitit_slurm",
    ),
    (["hydra/sweeper=optina"], "hydra/sweeper=optina is not allowed: one of basic, optuna"),
    (["-m", "hydra/launcher=joblb", "seed=0,1"], "hydra/launcher=joblb is not allowed: one of basic, joblib"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED, ids=[" ".join(a)[-60:] for a, _ in REFUSED])
def test_a_bad_value_is_one_line_before_anything_runs(args: list[str], message: str) -> None:
    problems = check_command(args, CONF)
    assert len(problems) == 1 and problems[0].startswith(message), problems
    assert "\n" not in problems[0]


HELD = [
    [*QUICK, "+trainer.val_check_interval=1.0", "+trainer.max_time=00:01:00:00"],
    [*QUICK, "+trainer.val_check_interval=4", "+trainer.max_time={hours:1}"],
    [*QUICK, "+trainer.overfit_batches=2", "+trainer.val_check_interval=10"],  # overfitting counts its own batches
    [*QUICK, "+trainer.reload_dataloaders_every_n_epochs=0", "+trainer.limit_predict_batches=0.5"],
    ["trainer=ddp_cpu"],  # a strategy Lightning runs on this machine
    [*QUICK, "data.image_size=512", "model.depth=64", "model.dim=64", "model.heads=2"],
    ["logger=wandb", "logger.wandb.project='vit-locality_v2.1 (paper)'"],
    ["optimized_metric=val/acc1", "data.val_size=500"],
    ["optimized_metric=mean_entropy_early", "stats.enabled=true"],
    ["-m", "hparams_search=optuna_lr"],
    ["+trainer.max_steps=3", "++data.val_size=100", "++stats.pictures=false", "+optimized_metric=val/loss"],
    ["trainer.max_steps=3", "trainer.fast_dev_run=true"],  # Trainer arguments without `+`
    ["hydra/launcher=joblib"],
    ["-m", "hydra/launcher=slurm", "trainer=ddp", "trainer.devices=8", "trainer.strategy=fsdp"],  # the nodes decide
]


@pytest.mark.parametrize("args", HELD, ids=[" ".join(a)[-60:] for a in HELD])
def test_a_good_value_passes(args: list[str]) -> None:
    assert check_command(args, CONF) == []


@pytest.fixture
def small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine of 2 cores and 8 GiB, whatever runs the tests."""
    monkeypatch.setattr(checks.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(checks, "_physical_memory", lambda: 8 * GIB)


MACHINE_REFUSED = [
    (["data.num_workers=9"], "data.num_workers=9 is not allowed: an integer in [0, 8]: 4 per CPU core"),
    (
        ["data=synthetic", "data.train_size=1000000", "data.image_size=256"],
        "data.train_size=1000000 is not allowed: a set whose drawing fits in half of this machine's 8 GiB",
    ),
    (
        ["model.depth=48", "model.dim=4096", "model.heads=16"],
        "model.depth=48 is not allowed: a model whose training state fits in this machine's 8 GiB",
    ),
]


@pytest.mark.parametrize(("args", "message"), MACHINE_REFUSED, ids=[a[-1] for a, _ in MACHINE_REFUSED])
@pytest.mark.usefixtures("small_machine")
def test_sizes_beyond_this_machine_are_refused(args: list[str], message: str) -> None:
    problems = check_command(args, CONF)
    assert len(problems) == 1 and problems[0].startswith(message), problems


@pytest.mark.usefixtures("small_machine")
def test_sizes_within_this_machine_pass_and_a_slurm_submission_is_not_compared() -> None:
    assert (
        check_command(["data.num_workers=8", "model=vit_base", "data=synthetic", "data.train_size=50000"], CONF) == []
    )
    remote = ["-m", "hydra/launcher=slurm", "data.num_workers=32", "model.depth=48", "model.dim=4096", "model.heads=16"]
    assert check_command(remote, CONF) == []


@pytest.mark.parametrize("project", ["a/b", "a\\b", "a#b", "a?b", "a%b", "a:b", "x" * 129, "x" * 128, "a b", "ok-1"])
def test_the_wandb_project_rule_is_wandbs(project: str) -> None:
    wandb = pytest.importorskip("wandb")
    try:
        wandb.Settings(project=project)
        refused_by_wandb = False
    except Exception:  # noqa: BLE001 - W&B's UsageError or pydantic's ValidationError, by version
        refused_by_wandb = True
    ours = check_command(["logger=wandb", f"logger.wandb.project='{project}'"], CONF)
    assert bool(ours) == refused_by_wandb, ours


def test_trainer_arguments_without_plus_are_the_same_cell_as_with_it() -> None:
    """`trainer.max_steps=3` as Lightning users type it: the same config, identity and directory name as `+`."""
    plain, plus = (
        ["trainer.max_steps=3", "trainer.fast_dev_run=true"],
        ["+trainer.max_steps=3", "++trainer.fast_dev_run=true"],
    )
    cfg = typed(plain)
    assert cfg.trainer_arguments()["max_steps"] == 3 and cfg.trainer_arguments()["fast_dev_run"] is True
    assert identity_hash(cfg) == identity_hash(typed(plus))
    assert named_settings(plain) == named_settings(plus) == {"trainer.fast_dev_run": "true", "trainer.max_steps": "3"}
    assert identity_hash(typed([])) != identity_hash(cfg)


def _every_group() -> list[str]:
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        groups = [*loader.list_groups(""), *(f"hydra/{group}" for group in loader.list_groups("hydra"))]
        return [group for group in groups if group != "hydra"]  # `hydra` holds Hydra's groups (and its own config)


@pytest.mark.parametrize("group", _every_group())
def test_an_unknown_option_of_every_group_is_one_line(group: str) -> None:
    problems = check_command([f"{group}=no_such_option"], CONF)
    assert len(problems) == 1 and problems[0].startswith(f"{group}=no_such_option is not allowed: one of "), problems
    assert "_common" not in problems[0] and "\n" not in problems[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["hydra/launcher=joblb"], "error: hydra/launcher=joblb is not allowed: one of basic, joblib"),
        (["+model.dropout=0.1"], f"error: +model.dropout: {NOT_READ}"),
        (["ckpt_path=foo.ckpt"], "error: ckpt_path='foo.ckpt' is not allowed: null or a checkpoint file"),
        (["trainer.accelerator=mps"], "error: trainer.accelerator='mps' is not allowed here"),
        (["-m", *QUICK, "+trainer.max_time=00:01:00:00,abc"], "error: trainer.max_time='abc' is not allowed"),
    ],
)
def test_train_py_refuses_in_one_line_and_starts_no_cell(
    args: list[str], message: str, tmp_path: Path, spawns: Spawner
) -> None:
    out_dir = tmp_path / "out"
    proc = spawns.run_train([*args, f"hydra.run.dir={out_dir}", f"hydra.sweep.dir={out_dir}"], cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]
    assert not out_dir.exists()  # the first cell of the sweep never started


def test_a_trainer_argument_without_plus_trains(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "run"
    done = spawns.run_train(
        [*QUICK, "trainer.max_steps=2", "startup.print_config=false", f"hydra.run.dir={run_dir}"], tmp_path
    )
    assert done.returncode == 0, done.stderr[-1500:]
    record = json.loads((run_dir / "results.json").read_text())
    assert record["status"] == "complete" and record["steps"] == 2


@pytest.mark.parametrize("value", ["0", "0.0"])
def test_a_test_split_of_no_batches_is_refused_before_training(value: str) -> None:
    """`+trainer.limit_test_batches=0` used to train the whole cell, then fail with an IndexError."""
    problems = check_command([*QUICK, f"+trainer.limit_test_batches={value}"], CONF)
    assert len(problems) == 1 and problems[0].startswith(f"trainer.limit_test_batches={value} is not allowed")
    assert check_command([*QUICK, "+trainer.limit_test_batches=1"], CONF) == []
