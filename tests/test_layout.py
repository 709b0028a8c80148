"""The repository's shape: the top level on the project's card, and no import of the checkout-only names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import REPO, Spawner

CARD = {"pyproject.toml", "conf", "vit_locality", "callbacks", "tests", "multirun", "Makefile"}
ALSO = {"train.py", "README.md", "docs", "LICENSE", "BENCHMARKS.md", "benchmarks", ".ci", ".gitignore"}


def tracked_top_level() -> set[str]:
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return {name.split("/", 1)[0] for name in names}


def test_top_level_is_the_card(spawns: Spawner) -> None:
    top = tracked_top_level()
    assert top >= CARD
    assert top <= CARD | ALSO, f"not on the card: {sorted(top - CARD - ALSO)}"


def ruff_bans(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "TID251", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )


def test_no_code_imports_the_checkout_only_names(spawns: Spawner) -> None:
    for folder in ("vit_locality", "callbacks", "tests", "benchmarks", "train.py"):
        done = ruff_bans(REPO / folder)
        assert done.returncode == 0, done.stdout


def test_the_ban_catches_a_top_level_callbacks_import(tmp_path: Path, spawns: Spawner) -> None:
    probe = REPO / "vit_locality" / "_banned_import_probe.py"
    probe.write_text("import callbacks\nfrom conf import x\n")
    try:
        done = ruff_bans(probe)
    finally:
        probe.unlink()
    assert done.returncode == 1 and done.stdout.count("TID251") == 2
