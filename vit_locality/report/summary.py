"""Print one line per finished cell of a sweep: name, flags, accuracy, early-layer locality, where it is; runs the
reports leave out (debug runs, old units) are listed as skipped.

python -m vit_locality.report.summary multirun/demo [--probe-size N] [--raw-attention] [--early-layers N]

Exit status: 0 done (runs it cannot use are listed, one line each); 2 a sweep directory is missing or not one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vit_locality.catalog import CELL_ORDER
from vit_locality.errors import run_as_command
from vit_locality.report.load.aggregate import UNITS_NOTE
from vit_locality.report.load.measurement import (
    add_measurement_options,
    choose_measurements,
    measurement_choice,
    others_note,
    unmatched_note,
)
from vit_locality.report.load.run_settings import UNSET, debug_run_note, old_units_note, run_settings, split_keys
from vit_locality.report.render.table_format import format_table
from vit_locality.store.record import RunRecord, scan_records

ARCHITECTURE_KEYS = ("depth", "dim", "heads", "mlp_ratio")


def summary_rows(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """One row per run, with a column for each setting that splits some cell (`optim.lr`, `start`)."""
    by_cell: dict[tuple[str, str, str], list[RunRecord]] = {}
    for run in runs:
        by_cell.setdefault((run.data_name, run.model_name, run.protocol.cell_name), []).append(run)
    keys = sorted({key for cell_runs in by_cell.values() for key in split_keys(cell_runs)})  # what splits some cell
    rows = []
    for run in runs:
        protocol, shown = run.protocol, run.headline()
        row = {"cell": protocol.cell_name, "AA": int(protocol.autoaug), "CM": int(protocol.cutmix)}
        row |= {"LS": f"{protocol.ls:g}", "data": run.data_name, "model": run.model_name, "seed": run.seed}
        row |= {"top-1 (%)": 100 * shown.acc1, "min MAD early": shown.min_mad, "mean entropy early": shown.entropy}
        rows.append({**row, **{key: run_settings(run).get(key, UNSET) for key in keys}, "run": str(run.run_dir)})
    order = {name: i for i, name in enumerate(CELL_ORDER)}  # the paper's 8 cells first, any other cell after
    return sorted(rows, key=lambda r: (r["data"], r["model"], order.get(r["cell"], len(order)), r["cell"], r["seed"]))


def sweep_dirs_problem(sweep_dirs: Iterable[Path]) -> str | None:
    """Why the directories named on the command line cannot be searched, or None."""
    for path in sweep_dirs:
        if not path.exists():
            return f"sweep directory {path} does not exist"
        if not path.is_dir():
            return f"sweep directory {path} is not a directory"
    return None


def architecture_warnings(runs: Iterable[RunRecord]) -> list[str]:
    """One line per (data set, model name) whose runs differ in architecture, which the reports would pool."""
    found: dict[tuple[str, str], dict[str, set[str]]] = {}
    for run in runs:
        model = run.data.get("model") or {}
        values = found.setdefault((run.data_name, run.model_name), {key: set() for key in ARCHITECTURE_KEYS})
        for key in ARCHITECTURE_KEYS:
            values[key].add(str(model.get(key)))
    warnings = []
    for (data, name), values in sorted(found.items()):
        differ = [f"{key} {', '.join(sorted(v, key=lambda s: (len(s), s)))}" for key, v in values.items() if len(v) > 1]
        if differ:
            warnings.append(
                f"{data}/{name} pools runs of different architectures ({'; '.join(differ)}): "
                "give each architecture its own model.name, or report their sweeps separately"
            )
    return warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dirs", nargs="+", type=Path, help="sweep directories (searched recursively)")
    add_measurement_options(parser)
    args = parser.parse_args(argv)
    if problem := sweep_dirs_problem(args.sweep_dirs):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    runs = scan_records(args.sweep_dirs)
    unread = lambda run: debug_run_note(run) or old_units_note(run)
    debug = [(run.run_dir, note) for run in runs.complete if (note := unread(run))]
    choice = measurement_choice(args)
    chosen = choose_measurements([run for run in runs.complete if not unread(run)], choice)
    listed = chosen.runs
    print(format_table(summary_rows(listed)))
    if listed:
        print(f"min MAD early: {UNITS_NOTE}")
    labelled = [(f"{run.data_name}/{run.model_name}/{run.protocol.cell_name}", run) for run in listed]
    for note in (unmatched_note(labelled, choice), others_note(chosen.others)):
        if note:
            print(f"note: {note}")
    for run_dir, why in [*runs.skipped, *debug]:
        print(f"skipped {run_dir}: {why}")
    return 0


def cli() -> None:
    """The installed console script: a project error is its one line on stderr and its exit status."""
    run_as_command(main)


if __name__ == "__main__":
    cli()
