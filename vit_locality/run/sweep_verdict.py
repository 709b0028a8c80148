"""The verdict of a sweep, read from its cells' records once every cell has run, whatever the launcher.

A cell's outcome is what its run directory records, not what the process that ran it remembers: under joblib
or submitit the cells run in other processes, and a cell can fail before it writes anything. Hydra calls the
`SweepVerdict` callback in the launching process at the end of a multirun: it reads the records of the cells this
command ran, prints one line per cell and writes `<sweep dir>/verdict.json` (which cells, their statuses). The entry
point reads that file once Hydra returns and turns it into its exit status. Entry-point side: it imports Hydra.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from vit_locality.run.atomic import atomic_write_text
from vit_locality.run.record import RecordError, read_record

VERDICT_FILE = "verdict.json"
# File times may be coarser than the clock: a cell set up in the second the sweep started still counts.
CLOCK_SLACK_S = 1.0


def cell_rows(run_dirs: list[Path]) -> list[dict[str, Any]]:
    """One row per run directory: cell, status, top-1 (%), min MAD, directory."""
    rows = []
    for run_dir in run_dirs:
        row: dict[str, Any] = {"cell": "?", "status": "no record", "top-1 (%)": "-", "min MAD": "-", "run": run_dir}
        try:
            record = read_record(run_dir)
        except RecordError as error:
            row["status"] = str(error)
            record = None
        if record is not None:
            row["status"] = record.status
            if record.complete:
                headline = record.headline()
                row["cell"] = record.protocol.cell_name
                row["top-1 (%)"] = f"{100 * headline.acc1:.2f}"
                row["min MAD"] = "-" if math.isnan(headline.min_mad) else f"{headline.min_mad:.3f}"
        rows.append(row)
    return rows


def cells_run_since(sweep_dir: Path, started: float) -> list[Path]:
    """The run directories under `sweep_dir` whose job Hydra set up at or after `started` (a POSIX time): the cells
    of this command, told apart from earlier commands' cells in the same sweep directory by file times."""
    marks = sweep_dir.glob("**/.hydra/overrides.yaml")
    return sorted(mark.parent.parent for mark in marks if mark.stat().st_mtime >= started)


def print_table(rows: list[dict[str, Any]]) -> None:
    widths = {key: max(len(key), *(len(str(row[key])) for row in rows)) for key in rows[0]}
    print("  ".join(key.ljust(width) for key, width in widths.items()))
    for row in rows:
        print("  ".join(str(row[key]).ljust(width) for key, width in widths.items()))
    sys.stdout.flush()


@dataclass(frozen=True)
class Verdict:
    """What one multirun command ran: each cell's run directory and status, and when the verdict was written."""

    cells: list[tuple[Path, str]]
    written: float

    @property
    def incomplete(self) -> list[tuple[Path, str]]:
        return [(run_dir, status) for run_dir, status in self.cells if status != "complete"]

    def to_json(self) -> str:
        cells = [{"run": str(run_dir), "status": status} for run_dir, status in self.cells]
        return json.dumps({"written": self.written, "cells": cells}, indent=2) + "\n"

    @classmethod
    def read(cls, path: Path) -> Verdict:
        """The verdict in `path`; ValueError or OSError when there is none or it is unusable."""
        data = json.loads(Path(path).read_text())
        return cls([(Path(cell["run"]), str(cell["status"])) for cell in data["cells"]], float(data["written"]))


def write_verdict(sweep_dir: Path, rows: list[dict[str, Any]]) -> Path:
    path = Path(sweep_dir) / VERDICT_FILE
    atomic_write_text(path, Verdict([(row["run"], str(row["status"])) for row in rows], time.time()).to_json())
    return path


def read_verdict(sweep_dir: Path, since: float) -> Verdict | None:
    """The verdict a multirun that started at `since` (POSIX time) wrote; None when it wrote none (Hydra ended
    before its callbacks, or the command removed the callback)."""
    try:
        verdict = Verdict.read(Path(sweep_dir) / VERDICT_FILE)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return verdict if verdict.written >= since else None


def report_verdict(sweep_dir: Path, since: float) -> int:
    """Say on stderr which cells of the multirun that started at `since` are not complete; the exit status that
    means: 1 if any is not, else 0."""
    verdict = read_verdict(sweep_dir, since)
    if verdict is None:
        print(f"warning: the sweep wrote no {VERDICT_FILE} in {sweep_dir}; check its cells' records", file=sys.stderr)
        return 0
    if not verdict.incomplete:
        return 0
    shown = ", ".join(f"{run_dir.name} ({status})" for run_dir, status in verdict.incomplete)
    print(f"error: {len(verdict.incomplete)} cell(s) not complete: {shown}", file=sys.stderr)
    return 1


def sweep_dir_of(argv: list[str], conf_dir: Path, config_name: str = "train") -> Path | None:
    """The sweep directory a `-m` command line writes into (None without -m, or where only Hydra can resolve it at
    run time): the value of `hydra.sweep.dir` composed from the command's single-valued settings, as Hydra does."""
    from hydra import compose, initialize_config_dir

    from vit_locality.upstream import hydra_args_parser

    args = hydra_args_parser().parse_args(argv)
    if not args.multirun or args.config_path or args.config_dir:
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = OverridesParser.create().parse_overrides(args.overrides)
    single = [override.input_line for override in overrides if not override.is_sweep_override()]
    try:
        with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
            cfg = compose(config_name=args.config_name or config_name, overrides=single, return_hydra_config=True)
        return Path(str(OmegaConf.select(cfg, "hydra.sweep.dir", throw_on_resolution_failure=False)))
    except Exception:  # a template only Hydra's run time resolves (`${hydra:...}`): no verdict to find
        return None


class SweepVerdict(Callback):
    def __init__(self) -> None:
        self.started = time.time()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = time.time() - CLOCK_SLACK_S

    def cells_of_this_command(self, sweep_dir: Path) -> list[Path]:
        """Which run directories this command ran; the one place that rule lives."""
        return cells_run_since(sweep_dir, self.started)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = cell_rows(self.cells_of_this_command(sweep_dir))
        write_verdict(sweep_dir, rows)
        if rows:
            print_table(rows)
