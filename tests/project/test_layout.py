"""The repository's shape: the top level on the project's card, and no import of the checkout-only names."""

from __future__ import annotations

import ast
import subprocess
import sys

from dulwich.repo import Repo
from helpers import REPO, Spawner

CARD = {"pyproject.toml", "conf", "vit_locality", "callbacks", "tests", "multirun", "Makefile"}
ALSO = {"train.py", "README.md", "docs", "LICENSE", "BENCHMARKS.md", "benchmarks", ".ci", ".gitignore"}
CHECKOUT_ONLY = {"callbacks", "conf"}  # installed, they live inside the package as vit_locality.callbacks / .conf


def tracked_top_level() -> set[str]:
    """The top-level names of the files git tracks, read from git's index in this process (no `git` subprocess)."""
    index = Repo(str(REPO)).open_index()
    return {path.decode().split("/", 1)[0] for path in index.paths()}


def test_top_level_is_the_card() -> None:
    top = tracked_top_level()
    assert top >= CARD
    assert top <= CARD | ALSO, f"not on the card: {sorted(top - CARD - ALSO)}"


def checkout_only_imports(source: str) -> list[str]:
    """The imports of `callbacks` or `conf` as top-level modules in one file's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in CHECKOUT_ONLY]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [node.module] if node.module.split(".")[0] in CHECKOUT_ONLY else []
    return found


def test_no_code_imports_the_checkout_only_names() -> None:
    files = [REPO / "train.py"]
    for folder in ("vit_locality", "callbacks", "tests", "benchmarks"):
        files += sorted((REPO / folder).rglob("*.py"))
    offenders = {
        str(path.relative_to(REPO)): names for path in files if (names := checkout_only_imports(path.read_text()))
    }
    assert not offenders


def test_the_import_walk_sees_both_forms() -> None:
    assert checkout_only_imports("import callbacks\nfrom conf import x\nfrom vit_locality.callbacks import y\n") == [
        "callbacks",
        "conf",
    ]


def test_ruff_bans_a_top_level_callbacks_import(spawns: Spawner) -> None:
    """The same rule for editors and `make lint`: ruff's banned-api list (TID251) in pyproject.toml."""
    probe = REPO / "vit_locality" / "_banned_import_probe.py"
    probe.write_text("import callbacks\nfrom conf import x\n")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "TID251", str(probe)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
    finally:
        probe.unlink()
    assert done.returncode == 1 and done.stdout.count("TID251") == 2
