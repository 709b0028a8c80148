"""The core and its extras: nothing of the core imports `vit_locality.extras`, and a cell trains, records and draws
its pictures with the package gone (the noise band and the figures' references are the extras' own)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from helpers import QUICK, REPO, TRAIN_THREADS, Spawner

from vit_locality.attention.stats_log import MAPS_PNG, PLANE_PNG

CORE = ("model", "data", "augment", "attention", "config", "run", "store", "precheck", "sweep")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_no_core_package_imports_the_extras() -> None:
    files = [f for package in CORE for f in (REPO / "vit_locality" / package).rglob("*.py")]
    files += list((REPO / "callbacks").rglob("*.py"))
    assert len(files) > 60
    importing = [
        str(f.relative_to(REPO)) for f in files if any(n.startswith("vit_locality.extras") for n in _imports(f))
    ]
    assert importing == []


# train.py with `vit_locality.extras` made unimportable, as where the package is not installed.
WITHOUT_EXTRAS = """
import importlib.abc, sys
class NoExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "vit_locality.extras" or name.startswith("vit_locality.extras."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoExtras())
sys.argv = [sys.argv[0], *sys.argv[1:]]
from vit_locality.train import cli
cli()
"""


def test_a_cell_trains_with_the_extras_absent(tmp_path: Path, spawns: Spawner) -> None:
    import subprocess

    run_dir = tmp_path / "run"
    env = {"OMP_NUM_THREADS": TRAIN_THREADS, "WANDB_MODE": "offline", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS, *QUICK, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((run_dir / "results.json").read_text())
    assert record["status"] == "complete" and "final" in record["attention"]
    assert "noise_band" not in record["attention"] and "noise band" not in proc.stdout + proc.stderr
    assert (run_dir / PLANE_PNG).is_file() and (run_dir / MAPS_PNG).is_file()
