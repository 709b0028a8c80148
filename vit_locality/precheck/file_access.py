"""Whether this user can read a file or write into a directory, asked before anything runs, so that a typo in a
path costs a second rather than a run that cannot save. `os.access` answers for this user: root writes through
read-only modes, and a read-only file system stops root too."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vit_locality.errors import ConfigError


def file_problem(path: Path) -> str | None:
    """Why `path` is not a readable file, or None."""
    if path.is_dir():
        return "a directory"
    if not path.exists():
        return "no such file"
    if not path.is_file():
        return "not a regular file"
    return None if os.access(path, os.R_OK) else "this user cannot read it"


def directory_problem(path: Path) -> str | None:
    """Why this user could not create `path` as a directory or write into it, or None. Asked before anything runs,
    so a typo in an output path costs a second rather than a run that cannot save. `os.access` answers for this
    user (root writes through read-only modes; a read-only file system stops root too)."""
    existing = next(p for p in (path, *path.parents, Path(".")) if p.exists() or p.is_symlink())
    if existing.is_file():
        return f"{existing} is a file"
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"this user cannot write in {existing}"
    return None


def check_directory(key: str, value: Any, path: Path) -> None:
    """ConfigError naming `key` when `path` is no directory this user can create or write into."""
    problem = directory_problem(path)
    if problem is not None:
        raise ConfigError(f"{key}={value!r} is not allowed: a directory this user can create and write ({problem})")
