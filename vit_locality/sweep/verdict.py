"""The verdict of a sweep, read from its cells' records once every cell has run, whatever the launcher: each job
notes its run directory in `<sweep dir>/.cells-<command id>`; `SweepVerdict` prints one line per cell at the end and
writes `.verdict-<id>.json` (and `verdict.json`), which the entry point turns into its exit status."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from vit_locality.store.atomic import atomic_write_text
from vit_locality.store.record import RecordError, read_record
from vit_locality.sweep.command import current_command, new_command_id, publish_command

VERDICT_FILE = "verdict.json"
# Per command, hidden files beside the cells (not a directory: a sweep directory's folders are its cells).
CELLS_PREFIX, VERDICT_PREFIX = ".cells-", ".verdict-"


def cells_file(sweep_dir: Path, command_id: str) -> Path:
    return Path(sweep_dir) / f"{CELLS_PREFIX}{command_id}"


def command_verdict_file(sweep_dir: Path, command_id: str) -> Path:
    return Path(sweep_dir) / f"{VERDICT_PREFIX}{command_id}.json"


def note_cell(sweep_dir: Path, command_id: str, run_dir: Path) -> None:
    """Add a job's run directory to its command's cells: one short line in append mode, so jobs never interleave."""
    path = cells_file(sweep_dir, command_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        os.write(descriptor, f"{Path(run_dir).resolve()}\n".encode())
    finally:
        os.close(descriptor)


def cells_of_command(sweep_dir: Path, command_id: str) -> list[Path]:
    """The run directories the command's jobs noted, each once, in the order they started."""
    try:
        lines = cells_file(sweep_dir, command_id).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [Path(line) for line in dict.fromkeys(line for line in lines if line)]


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


def write_verdict(sweep_dir: Path, command_id: str, rows: list[dict[str, Any]]) -> None:
    """The command's own verdict, and a copy at `<sweep dir>/verdict.json` (the latest command's, for people)."""
    cells = [{"run": str(row["run"]), "status": str(row["status"])} for row in rows]
    text = json.dumps({"written": time.time(), "cells": cells}, indent=2) + "\n"
    path = command_verdict_file(sweep_dir, command_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    atomic_write_text(Path(sweep_dir) / VERDICT_FILE, text)


def read_verdict(sweep_dir: Path, command_id: str) -> Verdict | None:
    """The verdict the multirun command `command_id` wrote; None when it wrote none or it is unusable."""
    try:
        data = json.loads(command_verdict_file(sweep_dir, command_id).read_text())
        return Verdict([(Path(cell["run"]), str(cell["status"])) for cell in data["cells"]], float(data["written"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def report_verdict(sweep_dir: Path, command_id: str) -> int:
    """Say on stderr which cells of the command `command_id` are not complete; 1 if any is not, else 0."""
    verdict = read_verdict(sweep_dir, command_id)
    if verdict is None:
        print(f"warning: the sweep wrote no verdict in {sweep_dir}; check its cells' records", file=sys.stderr)
        return 0
    if not verdict.incomplete:
        return 0
    shown = ", ".join(f"{run_dir.name} ({status})" for run_dir, status in verdict.incomplete)
    print(f"error: {len(verdict.incomplete)} cell(s) not complete: {shown}", file=sys.stderr)
    return 1


def started_sweep_dir() -> Path | None:
    """The sweep directory of this command's multirun as Hydra resolved it (noted by `SweepVerdict` in the command's
    context); None when it ran none."""
    sweep_dir = current_command().sweep_dir
    return None if sweep_dir is None else Path(sweep_dir)


class SweepVerdict(Callback):
    """Notes each job's run directory under its command's id, and gives the command's verdict at the end."""

    def __init__(self) -> None:
        self.command_id = current_command().command_id or new_command_id()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Before the launcher starts any process: its jobs (and this object, pickled to them) carry the id, and the
        # entry point finds the sweep directory Hydra resolved.
        context = current_command()
        context = context if context.command_id else replace(context, command_id=self.command_id)
        sweep_dir = OmegaConf.select(config, "hydra.sweep.dir", default=None)
        if sweep_dir is not None:
            context = replace(context, sweep_dir=str(sweep_dir))
        self.command_id = publish_command(context).command_id
        from hydra_plugins.vit_locality import register_chosen

        register_chosen(config)  # before Hydra instantiates the sweeper and its launcher

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """In the process that runs the job, once Hydra has set up its directory, before the job can fail."""
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode == RunMode.MULTIRUN:
            note_cell(Path(config.hydra.sweep.dir), self.command_id, Path(hydra_cfg.runtime.output_dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = cell_rows(cells_of_command(sweep_dir, self.command_id))
        write_verdict(sweep_dir, self.command_id, rows)
        if rows:
            print_table(rows)
