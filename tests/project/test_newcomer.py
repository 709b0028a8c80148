"""What a new user types first: every refusal is one line, exit status 2, naming what to type instead."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import QUICK, REPO, Spawner

from vit_locality.paths import CONF_DIR
from vit_locality.precheck.preflight import check_command

TINY = ["data=synthetic", "model=vit_tiny"]


def test_a_launcher_setting_without_its_launcher_names_the_launcher() -> None:
    assert check_command(["-m", *TINY, "hydra.launcher.n_jobs=2"], CONF_DIR) == [
        "hydra.launcher.n_jobs: no such setting of hydra/launcher=basic; add hydra/launcher=joblib"
    ]
    assert check_command(["-m", *TINY, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], CONF_DIR) == []
    assert check_command([*TINY, "hydra.job.chdir=false"], CONF_DIR) == []
    assert check_command([*TINY, "hydra.job.nosuch=1"], CONF_DIR) == [
        "hydra.job.nosuch: no such setting (check the spelling; `--cfg job` lists every key)"
    ]


def test_a_gpu_accelerator_on_a_machine_without_one_names_the_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (problem,) = check_command([*TINY, "trainer.accelerator=gpu"], CONF_DIR)
    assert problem.startswith("trainer.accelerator='gpu' is not allowed: cpu or auto") and "devices" not in problem


def test_online_wandb_without_a_key_names_both_ways_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no W&B settings file
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    (problem,) = check_command([*TINY, "logger=wandb", "logger.wandb.mode=online"], CONF_DIR)
    assert "WANDB_API_KEY" in problem and "logger.wandb.mode=offline" in problem
    assert check_command([*TINY, "logger=wandb", "logger.wandb.mode=offline"], CONF_DIR) == []
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert check_command([*TINY, "logger=wandb", "logger.wandb.mode=online"], CONF_DIR) == []


HIDE_OPTUNA = """
import sys
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
Plugins.instance()  # every installed plugin registers its configs
ConfigStore.instance().repo["hydra"]["sweeper"].pop("optuna.yaml")  # as if the search extra were not installed
sys.argv = ["train.py", "-m", "hparams_search=optuna_lr", "data=synthetic"]
from vit_locality.train import cli
cli()
"""


def test_a_search_without_the_search_extra_says_what_to_install(tmp_path: Path, spawns: Spawner) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")  # the test hides it; it must be there to hide
    done = subprocess.run([sys.executable, "-c", HIDE_OPTUNA], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: hydra/sweeper=optuna needs the Optuna sweeper (hparams_search=...), which is not installed: "
        "pip install 'vit-locality[search]'"
    ]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["tags=[ok,two\nlines]"], "tags=[ok,two\\nlines]"),
        (["tags=[\x1b[31mred]"], "\\x1b[31mred"),
        (["aug.cutmix=2"], "aug.cutmix=2 is not allowed: true or false"),
        (["-m", "aug.cutmix=true,on"], "aug.cutmix='on' is not allowed: true or false"),
    ],
    ids=["newline", "escape", "flag-2", "flag-on"],
)
def test_control_characters_and_flags_that_are_not_true_or_false_are_refused(args: list[str], names: str) -> None:
    (problem,) = check_command([*args, *TINY], CONF_DIR)
    assert names in problem and problem.isprintable()


def test_a_tag_with_a_control_character_from_a_config_file_is_refused() -> None:
    from helpers import compose_config
    from omegaconf import open_dict

    from vit_locality.errors import ConfigError
    from vit_locality.precheck.gate import settings_from

    cfg = compose_config(TINY)
    with open_dict(cfg):
        cfg.tags = ["fine", "forged\n[INFO] line"]
    with pytest.raises(ConfigError, match="printable"):
        settings_from(cfg, machine=False)


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "hydra.launcher.n_jobs=2"],
        ["tags=[a\nb]"],
        ["aug.cutmix=2"],
        ["logger=wandb", "logger.wandb.mode=online"],
    ],
    ids=["n_jobs", "tag", "flag", "wandb"],
)
def test_each_refusal_is_one_line_and_exit_status_2(args: list[str], tmp_path: Path, spawns: Spawner) -> None:
    done = spawns.run_train([*args, *TINY], cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("error: "), done.stderr
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()


def test_a_search_whose_every_trial_is_nan_ends_in_one_line(tmp_path: Path, spawns: Spawner) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "search"
    args = [
        "-m",
        "hparams_search=optuna_lr",
        *QUICK,
        "data.train_size=128",
        "data.val_size=64",
        "optim.lr=choice(1e30,2e30)",
        "hydra.sweeper.n_trials=2",
        "sweep.continue_on_error=true",
        "trainer.max_steps=2",
        "stats.enabled=false",
        f"hydra.sweep.dir={sweep}",
        "optimized_metric=val/loss",
        "hydra.sweeper.direction=minimize",
    ]  # fmt: skip  (val/loss: NaN at lr 1e30)
    done = spawns.run_train(args, tmp_path, timeout=600)
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "No trials are completed" not in output, output[-3000:]
    assert done.returncode == 1
    assert "no trial of the search completed with a finite value" in done.stderr.strip().splitlines()[-1]
    assert output.count("reported to the search as a failed trial") == 2
    assert len(list(sweep.glob("*/results.json"))) == 2


def test_a_missing_data_root_is_refused_before_anything_is_made(tmp_path: Path, spawns: Spawner) -> None:
    root = tmp_path / "no" / "such" / "dir"
    done = spawns.run_train(["data=cifar10", f"data.root={root}", "data.download=false"], cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert str(root) in line and "data.download=false" in line and "cifar-10-python.tar.gz" in line
    assert done.stdout == ""  # no config tree
    assert not (tmp_path / "no").exists() and not (tmp_path / "outputs").exists()


def test_the_pre_checks_archive_names_are_the_data_modules() -> None:
    from vit_locality.data.cifar import CIFAR10DataModule, CIFAR100DataModule
    from vit_locality.data.tiny_imagenet import TinyImageNetDataModule
    from vit_locality.datasets import built_in

    ARCHIVES = {name: spec.archive() for name, spec in built_in().items() if spec.archives}  # as the pre-check reads

    for name, module in (("cifar10", CIFAR10DataModule), ("cifar100", CIFAR100DataModule)):
        spec = module.archive
        assert (ARCHIVES[name].folder, ARCHIVES[name].filename, ARCHIVES[name].url) == (
            spec.folder,
            spec.filename,
            spec.url,
        )
    spec = TinyImageNetDataModule.archive
    assert (ARCHIVES["tiny_imagenet"].folder, ARCHIVES["tiny_imagenet"].filename) == (spec.folder, spec.filename)


def test_data_present_as_a_folder_or_an_archive_passes(tmp_path: Path) -> None:
    (tmp_path / "a" / "cifar-10-batches-py").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "cifar-10-python.tar.gz").write_bytes(b"x")
    for root in ("a", "b"):
        assert check_command(["data=cifar10", f"data.root={tmp_path / root}", "data.download=false"], CONF_DIR) == []
    assert check_command(["data=cifar10", f"data.root={tmp_path / 'c'}", "data.download=true"], CONF_DIR) == []


def test_a_saved_sweep_without_m_is_refused_with_the_command_that_runs_it() -> None:
    (problem,) = check_command(["experiment=demo"], CONF_DIR)
    assert problem.startswith("experiment=demo is a sweep over aug.autoaug, aug.cutmix, loss.ls")
    assert problem.endswith("run it with -m (python train.py -m experiment=demo)")
    assert check_command(["-m", "experiment=demo"], CONF_DIR) == []
    (search,) = check_command(["hparams_search=optuna_lr", *TINY], CONF_DIR)
    assert "is a search: run it with -m" in search


def test_the_quick_starts_run_offline_and_overfit_turns_the_protocol_off() -> None:
    from helpers import compose_config

    docs = "\n".join(path.read_text() for path in [REPO / "README.md", *(REPO / "docs").glob("*.md")])
    (limit,) = {line.strip() for line in docs.splitlines() if line.strip().startswith("python train.py debug=limit")}
    assert "data=synthetic" in limit
    assert check_command(limit.split("#")[0].split()[2:], CONF_DIR) == []
    cfg = compose_config(["debug=overfit", *TINY])
    assert (cfg.aug.autoaug, cfg.aug.cutmix, cfg.aug.mixup, cfg.loss.ls) == (False, False, False, 0.0)
    assert cfg.trainer.overfit_batches == 1 and not cfg.stats.enabled
    assert cfg.callbacks.checkpoint_every_n_epochs == cfg.trainer.max_epochs  # one checkpoint, at the end


def test_a_rerun_that_skips_every_cell_announces_no_time_left() -> None:
    from vit_locality.sweep.progress import cell_start_line

    assert cell_start_line(1, 8, [60.0] * 8) == "cell 1 of 8"
    assert cell_start_line(5, 8, [60.0] * 8) == "cell 5 of 8"
    assert "about 4 min" in cell_start_line(1, 8, [60.0] * 4)  # four cells still to run
    assert "about 3 min" in cell_start_line(6, 8, [60.0] * 5)  # a first run at its sixth cell


def test_a_ctrl_c_is_logged_as_sigint(caplog: pytest.LogCaptureFixture) -> None:
    """The first Ctrl-C during fit is handed to Lightning's SIGTERM handler, which logs what it received."""
    import logging
    import signal

    from vit_locality.run.interrupts import LIGHTNING_SIGNAL_LOG, sigterm_raises

    def lightning_like(signum: int, frame: object) -> None:
        logging.getLogger(LIGHTNING_SIGNAL_LOG).info(f"Received SIGTERM: {signum}")

    with caplog.at_level(logging.INFO, logger=LIGHTNING_SIGNAL_LOG), sigterm_raises() as gate:
        signal.signal(signal.SIGTERM, lightning_like)  # as Lightning installs its own during fit
        with gate.deferring():
            gate.on_sigint(signal.SIGINT, None)
    (message,) = [record.getMessage() for record in caplog.records]
    assert "SIGINT" in message and "SIGTERM" not in message and gate.sigint_received


def test_the_notes_of_runs_evaluated_on_the_test_set_are_one() -> None:
    from types import SimpleNamespace

    from vit_locality.extras.instrument_tables import trajectories

    runs = [
        SimpleNamespace(run_dir=Path(f"/s/demo/cell{i}"), data={"measured_on": {"eval_split": "test"}})
        for i in range(8)
    ]
    found = SimpleNamespace(_trajectories=None, cells={"Baseline": SimpleNamespace(runs=runs)}, notes=[])
    assert trajectories(found) == {}
    (note,) = found.notes
    assert note.startswith("8 runs (/s/demo/...): matched accuracy needs data.val_size > 0")


def test_make_demo_ends_with_the_table() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert "vit_locality.report.summary" in recipe[-1]  # the 8-cell table last
    assert recipe[-2].lstrip().startswith("@echo") and "reports:" in recipe[-2]  # the reports in one line before it
    assert all("> " in line or ">> " in line for line in recipe if "vit_locality.report " in line)


def test_the_summary_make_demo_ends_with_prints_the_table_last(tmp_path: Path, spawns: Spawner) -> None:
    """The demo's last command, run as the Makefile runs it on a finished 8-cell sweep: exit 0, nothing on stderr,
    and the table (header, rule, one row per cell in the paper's order) ends the output, followed only by its one
    line of units."""
    from record_fakes import ORDER, write_run

    from vit_locality.report.load.aggregate import UNITS_NOTE

    recipe = (REPO / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0].splitlines()
    assert recipe[-1].strip() == "@$(VENV_PY) -m vit_locality.report.summary $(SWEEP_ROOT)/demo"
    sweep = tmp_path / "multirun" / "demo"
    for cell in ORDER:
        write_run(sweep, "glyphs", cell, 0, 50.0, 0.3, 0.8, model="vit_tiny")
    done = subprocess.run(
        [sys.executable, "-m", "vit_locality.report.summary", str(sweep)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(ORDER) + 3 and lines[-1] == f"min MAD early: {UNITS_NOTE}"
    table = lines[:-1]
    assert table[0].startswith("| cell ") and set(table[1]) <= {"|", "-", " "}
    assert [row.split("|")[1].strip() for row in table[2:]] == list(ORDER)
    assert all(row.startswith("| ") and row.endswith(" |") for row in table)


def test_a_step_limited_run_logs_its_loss_and_reads_right_in_the_report(tmp_path: Path, spawns: Spawner) -> None:
    run_dir = tmp_path / "steps"
    args = [*QUICK, "trainer.max_steps=3", "trainer.max_epochs=200", "stats.enabled=false", f"hydra.run.dir={run_dir}"]
    done = spawns.run_train(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in (done.stdout + done.stderr).splitlines() if "epoch 1/200" in line]
    assert "step 3/3" in line and "train/loss_epoch" in line and not line.rstrip().endswith(":")
    metrics = json.loads((run_dir / "results.json").read_text())["metrics"]
    assert "train/loss_epoch" in metrics  # logged at the last step, though the epoch did not end
    report = subprocess.run(
        [sys.executable, "-m", "vit_locality.report", "ablation", str(tmp_path), "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0 and report.stderr == "", report.stderr
    assert f"skipped {run_dir}:" in report.stdout and "max_steps" in report.stdout
    assert report.stdout.strip().splitlines()[-1].startswith("no table: every run under")


def test_a_refused_resume_names_the_settings_and_leaves_no_run_directory(tmp_path: Path, spawns: Spawner) -> None:
    args = [*QUICK, "stats.enabled=false", "startup.print_config=false"]
    first = spawns.run_train(args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (cell,) = (tmp_path / "outputs").iterdir()
    resume = [f"ckpt_path={cell / 'checkpoints' / 'last.ckpt'}", "ckpt_mode=resume"]
    refused = spawns.run_train([*args, "optim.lr=0.003", *resume, "startup.print_config=true"], cwd=tmp_path)
    assert refused.returncode == 2
    # The pre-check's one line (precheck/gate.py), before Hydra makes a directory or prints the config.
    assert refused.stdout == "" and refused.stderr.startswith("error: ckpt_path="), refused.stderr[-3000:]
    (line,) = refused.stderr.splitlines()
    assert "with ckpt_mode=resume: the checkpoint is another cell's; the settings that differ: optim.lr 0.001" in line
    assert not any(part for part in line.split() if len(part) == 16 and part.isalnum() and not part.isalpha())
    assert list((tmp_path / "outputs").iterdir()) == [cell]  # no run directory for the refused command
    resumed = spawns.run_train([*args, *resume], cwd=tmp_path)  # its own cell passes the pre-check and continues
    assert resumed.returncode == 0, resumed.stderr[-3000:]
