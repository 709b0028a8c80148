"""The one crossing into a launcher's processes (vit_locality/sweep/command.py): a command's context survives its
trip through the environment, a stray value reads as no command, and a sweep too large for one variable leaves its
run directories out rather than break every process it starts."""

from __future__ import annotations

from pathlib import Path

from vit_locality.sweep.command import (
    COMMAND_ENV,
    RUN_DIRS_LIMIT,
    CommandContext,
    cell_key,
    current_command,
    publish_command,
    run_dirs_of,
)


def test_a_context_reads_back_as_written_through_the_environment() -> None:
    cell = ("seed=1", "aug.cutmix=true")
    context = CommandContext("123-abc", 8, True, run_dirs_of({cell: Path("multirun/s/cell_a")}), "multirun/s")
    environ: dict[str, str] = {}
    publish_command(context, environ)
    assert list(environ) == [COMMAND_ENV]
    back = current_command(environ)
    assert back == context
    assert back.run_dir_index() == {("aug.cutmix=true", "seed=1"): Path("multirun/s/cell_a")}


def test_no_context_or_a_stray_value_is_no_command() -> None:
    assert current_command({}) == CommandContext()
    assert current_command({COMMAND_ENV: "not json"}) == CommandContext()
    assert current_command({COMMAND_ENV: '{"cell_count": "8", "sweep": "yes"}'}) == CommandContext()


def test_the_launcher_finds_a_cell_by_its_own_overrides_only() -> None:
    """Hydra's overrides (the launcher, the sweep directory) are the command line's, not the cell's."""
    assert cell_key(["seed=1", "hydra/launcher=slurm", "+hydra.x=1", "aug.cutmix=true"]) == (
        "aug.cutmix=true",
        "seed=1",
    )


def test_a_sweep_too_large_for_one_variable_hands_on_no_run_directories() -> None:
    cells = {(f"seed={seed}",): Path("multirun") / ("x" * 200) / f"cell_{seed}" for seed in range(400)}
    assert run_dirs_of(cells) == ()
    few = dict(list(cells.items())[:10])
    assert len(run_dirs_of(few)) == 10 and len(CommandContext(run_dirs=run_dirs_of(few)).to_json()) < RUN_DIRS_LIMIT
