"""Find the runs under one or more sweep directories and split them into complete and skipped."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..results import RESULTS_FILE, read_results

# The paper's names for the 8 cells of (AutoAugment, CutMix, label smoothing > 0), in the paper's order.
CELL_NAMES = {
    (False, False, False): "Baseline",
    (True, False, False): "+AA",
    (False, True, False): "+CM",
    (False, False, True): "+LS",
    (True, True, True): "Modern",
    (False, True, True): "-AA",
    (True, False, True): "-CM",
    (True, True, False): "-LS",
}
CELL_ORDER = list(CELL_NAMES.values())


def cell_name(protocol: dict[str, Any]) -> str:
    key = (bool(protocol["autoaug"]), bool(protocol["cutmix"]), float(protocol["ls"]) > 0)
    return CELL_NAMES[key]


@dataclass
class RunCollection:
    complete: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (run dir, why)


def collect_runs(roots: list[Path]) -> RunCollection:
    """Every directory holding a results.json under `roots`; only `"status": "complete"` ones count."""
    found = RunCollection()
    for root in roots:
        if not Path(root).exists():
            raise FileNotFoundError(f"sweep directory {root} does not exist")
        for path in sorted(Path(root).rglob(RESULTS_FILE)):
            run_dir = path.parent
            record = read_results(run_dir)
            if record is None:
                found.skipped.append((run_dir, "results.json is unreadable"))
            elif record.get("status") != "complete":
                found.skipped.append((run_dir, f"status is {record.get('status')!r}"))
            else:
                found.complete.append({**record, "run_dir": str(run_dir)})
    return found
