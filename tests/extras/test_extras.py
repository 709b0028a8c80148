"""The core and its extras: the extras ship in the same wheel, and nothing of the core imports `vit_locality.extras`;
the entry points (train, report) import it plainly and hand what it gives (the noise band's callback, the figures'
references) to the core as arguments."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

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
