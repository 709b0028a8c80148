"""What the Makefile's commands run, read from `make -n` (nothing is downloaded or installed): `make install` takes an
optional index for torch, `make demo` writes each report file once, and a report target run with the user's own
Python (`PY=...`, or an active virtualenv) renders with it and installs nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import REPO, Spawner

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_install_takes_torch_from_the_index_it_is_given(tmp_path: Path, spawns: Spawner) -> None:
    venv = tmp_path / "venv"
    pip = [f"{venv}/bin/python", "-m", "pip", "install", "--quiet"]
    commands = spawns.make_dry_run("-B", "install", f"VENV={venv}", f"TORCH_INDEX={CPU_INDEX}")
    torch_command = pip + ["torch", "torchvision", "--index-url", CPU_INDEX]
    package_command = pip + ["-e", ".[dev]"]
    assert torch_command in commands and package_command in commands
    assert commands.index(torch_command) < commands.index(package_command)  # torch first: pip then keeps it
    default = spawns.make_dry_run("-B", "install", f"VENV={venv}")
    assert package_command in default
    assert not any("--index-url" in command or "torchvision" in command for command in default)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_demo_writes_the_pages_files_where_the_reports_are(tmp_path: Path, spawns: Spawner) -> None:
    """The page puts its tables and figures in <out>/<sweep>/: with --out reports/demo they were a second copy of
    every report file in reports/demo/demo/."""
    commands = spawns.make_dry_run("demo", f"VENV={REPO / '.venv'}", "REPORTS=rep", "SWEEP_ROOT=runs")
    reports = [command for command in commands if "vit_locality.report" in command]
    (all_command,) = [command for command in reports if command[command.index("vit_locality.report") + 1] == "all"]
    (page_command,) = [command for command in reports if command[command.index("vit_locality.report") + 1] == "page"]
    for command in (all_command, page_command):
        assert command[command.index("vit_locality.report") + 2] == "runs/demo"
    assert all_command[all_command.index("--out") + 1] == "rep/demo"
    assert page_command[page_command.index("--out") + 1] == "rep"  # its files into rep/demo/; the page rep/demo.html


RENDER_TARGETS = ("table-ablation", "table-protocols", "figures", "paper")


def _installs(commands: list[list[str]]) -> bool:
    return any("pip" in command or "venv" in command for command in commands)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
@pytest.mark.parametrize("target", RENDER_TARGETS)
def test_a_render_target_with_the_users_python_installs_nothing(target: str, spawns: Spawner) -> None:
    """`-B` would print the install recipe were it a prerequisite: with PY given, or a virtualenv active, it is not."""
    render = ("SWEEP=multirun/x", "REPORTS=rep")
    given = spawns.make_dry_run("-B", target, *render, "PY=/opt/mine/bin/python", "VIRTUAL_ENV=")
    active = spawns.make_dry_run("-B", target, *render, "VIRTUAL_ENV=/opt/env")
    for commands, python in ((given, "/opt/mine/bin/python"), (active, "/opt/env/bin/python")):
        assert commands and not _installs(commands), commands
        assert all(command[0] == python and "vit_locality.report" in command for command in commands), commands
    assert _installs(spawns.make_dry_run("-B", target, *render, "VIRTUAL_ENV="))  # VENV's Python: installed first
