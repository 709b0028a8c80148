"""Print one line per finished cell of a sweep: name, flags, accuracy, early-layer locality, where it is.

python -m vit_locality.report.summary multirun/demo
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..domain import CELL_ORDER, cell_name
from ..results import RunRecord, scan_records


def summary_rows(runs: list[RunRecord]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        autoaug, cutmix, ls = run.flags
        headline = run.headline()
        rows.append(
            {
                "cell": cell_name(autoaug, cutmix, ls),
                "AA": int(autoaug),
                "CM": int(cutmix),
                "LS": f"{ls:g}",
                "data": run.data_name,
                "model": run.model_name,
                "seed": run.seed,
                "top-1 (%)": 100 * headline.acc1,
                "min MAD early": headline.min_mad,
                "mean entropy early": headline.entropy,
                "run": str(run.run_dir),
            }
        )
    order = {name: i for i, name in enumerate(CELL_ORDER)}
    return sorted(rows, key=lambda r: (r["data"], r["model"], order[r["cell"]], r["seed"]))


def format_table(rows: list[dict[str, Any]]) -> str:
    """A plain fixed-width table (Markdown-compatible), numbers to 4 decimals."""
    if not rows:
        return "(no complete runs)"
    headers = list(rows[0])
    cells = [[f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(c) for c in cells)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dirs", nargs="+", type=Path, help="sweep directories (searched recursively)")
    args = parser.parse_args(argv)
    try:
        runs = scan_records(args.sweep_dirs)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(format_table(summary_rows(runs.complete)))
    for run_dir, why in runs.skipped:
        print(f"skipped {run_dir}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
