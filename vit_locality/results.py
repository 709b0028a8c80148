"""The run record: `results.json`, written atomically, with `"status"` as its last key.

A run directory counts as finished only when its results.json says `"status": "complete"`; anything else
(missing, `running`, `failed`, unreadable) is not a result.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

RESULTS_FILE = "results.json"


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(run_dir: Path, payload: dict[str, Any], status: str) -> Path:
    """Write `payload` with `status` appended last, so a reader never sees 'complete' before the rest."""
    record = {k: v for k, v in payload.items() if k != "status"}
    record["status"] = status
    path = Path(run_dir) / RESULTS_FILE
    atomic_write_text(path, json.dumps(record, indent=2, default=str) + "\n")
    return path


def read_results(run_dir: Path) -> dict[str, Any] | None:
    """The run's record, or None when there is none or it cannot be parsed."""
    path = Path(run_dir) / RESULTS_FILE
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
