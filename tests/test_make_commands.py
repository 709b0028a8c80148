"""What the Makefile's commands run, read from `make -n` (nothing is downloaded or installed): `make install` takes an
optional index for torch, and `make demo` writes each report file once."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import REPO, Spawner

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def dry_run(*args: str) -> list[str]:
    done = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_install_takes_torch_from_the_index_it_is_given(tmp_path: Path, spawns: Spawner) -> None:
    venv = tmp_path / "venv"
    lines = dry_run("-B", "install", f"VENV={venv}", f"TORCH_INDEX={CPU_INDEX}")
    torch_line = f"{venv}/bin/python -m pip install --quiet torch torchvision --index-url {CPU_INDEX}"
    package_line = f"{venv}/bin/python -m pip install --quiet -e '.[dev]'"
    assert torch_line in lines and package_line in lines
    assert lines.index(torch_line) < lines.index(package_line)  # torch first: pip then keeps it
    default = dry_run("-B", "install", f"VENV={venv}")
    assert package_line in default and not any("--index-url" in line or "torchvision" in line for line in default)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_demo_writes_the_pages_files_where_the_reports_are(tmp_path: Path, spawns: Spawner) -> None:
    """The page puts its tables and figures in <out>/<sweep>/: with --out reports/demo they were a second copy of
    every report file in reports/demo/demo/."""
    lines = dry_run("demo", f"VENV={REPO / '.venv'}", "REPORTS=rep", "SWEEP_ROOT=runs")
    (all_line,) = [line for line in lines if "vit_locality.report all " in line]
    (page_line,) = [line for line in lines if "vit_locality.report page " in line]
    assert "runs/demo --out rep/demo " in all_line
    assert "runs/demo --out rep " in page_line  # its files into rep/demo/, beside the others; the page rep/demo.html
