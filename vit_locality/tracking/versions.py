"""Library versions and the code's git commit, recorded in every results.json."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("torch", "torchvision", "lightning", "hydra-core", "omegaconf", "torchmetrics", "numpy", "vit-locality")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def environment_versions() -> dict[str, str | None]:
    return {"python": platform.python_version(), **{p: _version(p) for p in PACKAGES}, "git_commit": git_commit()}
