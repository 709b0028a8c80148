"""A quieter start: the config tree once per command (a sweep's before its first cell, listing what it sweeps), a
complete cell in one line, `--help` offering only what a user can pick, a group's shared part refused as such, and
the nearest real key named for a mistyped one in every section."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CONF, QUICK, Spawner, compose_config
from hydra_plugins.vit_locality import sweeper

from vit_locality import train
from vit_locality.precheck.preflight import Plan, check_command, plan_command
from vit_locality.precheck.refusals import SHARED_PARTS_NOTE, SPELLING_HINT, config_groups_text, nearest_setting
from vit_locality.precheck.tree import ABSENT_SHOWN, SWEPT_MARK, Swept, merged_config, sweep_tree_text
from vit_locality.sweep.command import COMMAND_ENV, CommandContext

FAST = [*QUICK, "stats.enabled=false"]
SKIPPED = "is complete already: skipped"


def planned(argv: list[str]) -> Plan:
    checked = plan_command(argv, CONF)
    assert checked.problems == [] and checked.plan is not None
    return checked.plan


def tree_lines(text: str) -> list[str]:
    return [line.strip(" │├└─") for line in text.splitlines()]


def test_a_sweeps_tree_shows_what_its_cells_share_and_lists_what_they_sweep(tmp_path: Path) -> None:
    plan = planned(["-m", *FAST, "aug.cutmix=true,false", "loss.ls=0,0.1", f"hydra.sweep.dir={tmp_path}"])
    lines = tree_lines(sweep_tree_text(sweeper.sweep_configs(plan), "config of the 4 cells"))
    assert lines[0] == "config of the 4 cells"
    assert f"cutmix: true, false{SWEPT_MARK}" in lines and f"ls: 0, 0.1{SWEPT_MARK}" in lines
    assert sum(SWEPT_MARK in line for line in lines) == 2  # nothing else differs between the cells
    assert "autoaug: true" in lines and "name: vit_tiny" in lines and "data" in lines
    assert "run_name" not in lines  # each cell's own: Hydra's line for each cell names it


def test_cells_without_a_key_or_with_a_null_section_are_listed_as_such() -> None:
    configs = [{"a": {"x": 1, "z": 2}, "w": None}, {"a": {"x": 1}, "w": {"p": 1}}]
    merged = merged_config(configs)
    assert merged["a"]["x"] == 1 and merged["w"] == Swept((None, {"p": 1}))
    lines = tree_lines(sweep_tree_text(configs, "config"))
    assert f"z: 2, {ABSENT_SHOWN}{SWEPT_MARK}" in lines and "x: 1" in lines
    assert f"null, {{p: 1}}{SWEPT_MARK}" in lines  # a section null in some cells: listed whole


def test_the_sweeps_tree_is_printed_once_unless_turned_off_or_all_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = ["-m", *FAST, "seed=0,1", f"hydra.sweep.dir={tmp_path}"]
    sweeper.print_sweep_tree(planned(sweep))
    assert capsys.readouterr().out.count("├── data") == 1
    sweeper.print_sweep_tree(planned([*sweep, "startup.print_config=false"]))
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(sweeper, "complete_already", lambda run_dir, identities: True)
    sweeper.print_sweep_tree(planned(sweep))  # a re-run of a finished sweep: each cell says it is skipped, no more
    assert capsys.readouterr().out == ""


def test_a_cell_prints_no_tree_in_a_sweep_nor_when_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DDP cell of a sweep runs in its own process, a single run to Hydra: the command's mark keeps it quiet."""
    cfg = compose_config(FAST)
    monkeypatch.setattr(train, "in_multirun", lambda: False)
    monkeypatch.setenv(COMMAND_ENV, CommandContext("single").to_json())
    train.announce_cell(cfg, tmp_path, None)
    assert capsys.readouterr().out.splitlines()[0] == "config"  # a single run: its tree, as before
    monkeypatch.setenv(COMMAND_ENV, CommandContext("sweep", cell_count=8, sweep=True).to_json())
    train.announce_cell(cfg, tmp_path, None)
    assert capsys.readouterr().out == ""
    monkeypatch.delenv(COMMAND_ENV)
    monkeypatch.setattr(train, "is_complete_cell", lambda run_dir, settings: True)
    train.announce_cell(cfg, tmp_path, None)
    assert capsys.readouterr().out == ""


def test_a_sweep_prints_its_tree_once_and_a_complete_cell_one_line(tmp_path: Path, spawns: Spawner) -> None:
    sweep = ["-m", *FAST, "loss.ls=0,0.1", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    first = spawns.run_train(sweep, tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.count("├── data") == 1 and f"ls: 0, 0.1{SWEPT_MARK}" in first.stdout
    assert "cell 1 of 2" in first.stdout and "cell 2 of 2" in first.stdout

    again = spawns.run_train(sweep, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "├──" not in again.stdout and "cell 1 of 2" not in again.stdout
    log = again.stdout.split("\ncell    status")[0].splitlines()  # up to the verdict's table
    jobs = [index for index, line in enumerate(log) if "[HYDRA] \t#" in line]
    assert len(jobs) == 2
    for start, end in zip(jobs, [*jobs[1:], len(log)], strict=True):  # each cell: Hydra's job line, then one line
        assert len(log[start + 1 : end]) == 1 and SKIPPED in log[start + 1], log[start:end]

    (cell_dir,) = [path.parent for path in (tmp_path / "sweep").glob("*_ls0_*/results.json")]
    single = spawns.run_train([*FAST, "loss.ls=0", f"hydra.run.dir={cell_dir}"], tmp_path)
    assert single.returncode == 0, single.stderr[-2000:]
    lines = [line for line in (single.stdout + single.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and SKIPPED in lines[0], lines


def test_help_lists_only_the_options_a_user_can_pick(tmp_path: Path, spawns: Spawner) -> None:
    offered = [option for line in config_groups_text(CONF).splitlines() for option in line.split(": ")[1].split(", ")]
    assert offered and not any(option.startswith("_") for option in offered)
    shown = spawns.run_train(["--help"], tmp_path)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "data: cifar10, cifar100, glyphs, synthetic, tiny_imagenet\n" in shown.stdout
    assert "model: vit_base, vit_convstem" in shown.stdout
    assert ": _" not in shown.stdout and ", _" not in shown.stdout  # no `_base`, `_shared`, `_downloadable`
    assert "--hydra-help" in shown.stdout and "docs/training.md" in shown.stdout
    assert "\nseed: 0\n" in shown.stdout  # Hydra's own part: the composed config
    hydra_help = spawns.run_train(["--hydra-help"], tmp_path)
    assert hydra_help.returncode == 0 and "hydra/launcher: basic" in hydra_help.stdout
    job = spawns.run_train(["--cfg", "job", "data=glyphs"], tmp_path)
    assert job.returncode == 0 and "name: glyphs" in job.stdout


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["data=_shared"], "data=_shared"),
        (["model=_base"], "model=_base"),
        (["data=_downloadable"], "data=_downloadable"),
        (["-m", "data=synthetic,_shared", "model=vit_tiny"], "data=_shared"),  # the one cell that picks it
    ],
)
def test_a_groups_shared_part_is_refused_naming_the_options(argv: list[str], refused: str) -> None:
    (problem,) = check_command(argv, CONF)
    options, note = problem.removeprefix(f"{refused} is not allowed: one of ").rsplit(" (", 1)
    listed = options.split(", ")
    assert listed == sorted(listed) and len(listed) > 2 and not any(name.startswith("_") for name in listed)
    assert note == f"{SHARED_PARTS_NOTE})"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["stats.unit=grid"], "stats.unit: no such setting; did you mean stats.units?"),
        (["-m", "stats.unit=grid,unit"], "stats.unit: no such setting; did you mean stats.units?"),
        (["aug.cutmx=true"], "aug.cutmix"),
        (["seeds=1"], "did you mean seed?"),
        (["stat.units=grid"], "did you mean stats.units?"),  # a section mistyped: the nearest of every key
        (["+stats.unit=grid"], "stats.units"),  # the project's refusal of a key nothing reads
        (["trainer.max_stepz=3"], "max_steps"),
    ],
)
def test_every_section_names_the_nearest_key(argv: list[str], expected: str) -> None:
    (problem,) = check_command([*argv, *FAST], CONF)
    assert expected in problem


def test_a_key_near_none_keeps_the_spelling_hint() -> None:
    (problem,) = check_command([*FAST, "stats.bogus=1"], CONF)
    assert problem == f"stats.bogus: no such setting ({SPELLING_HINT})"
    assert nearest_setting("stats.bogus", ["stats.units", "stats.enabled"]) is None
    # A key of another data set (a generated set's), typed for CIFAR-100: no guess at a CIFAR key.
    assert check_command(["data.train_size=3"], CONF) == [f"data.train_size: no such setting ({SPELLING_HINT})"]
    assert nearest_setting("trainer.max_stepz", ["trainer.max_steps", "trainer.max_epochs"]) == "trainer.max_steps"
