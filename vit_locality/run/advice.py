"""What to type so that a cell refused its run directory runs in another one: another `hydra.run.dir` for a single
run, another `hydra.sweep.dir` for a sweep whose directory the command sets, else another `sweep_name`."""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path


def another_directory(run_dir: Path) -> str:
    """The override that gives this cell a run directory of its own, in words a user can type."""
    hydra_config = sys.modules.get("hydra.core.hydra_config")
    if hydra_config is None or not hydra_config.HydraConfig.initialized():  # not a Hydra job: no command to name
        return "move that directory away or run the cell with another output directory"
    from hydra.types import RunMode

    hydra_job = hydra_config.HydraConfig.get()
    sweep_set = any(o.startswith("hydra.sweep.dir=") for o in hydra_job.overrides.hydra)
    return f"move that directory away or {way_out(run_dir, hydra_job.mode == RunMode.MULTIRUN, sweep_set)}"


def way_out(run_dir: Path, multirun: bool, sweep_dir_set: bool) -> str:
    """The override, as typed: another `hydra.run.dir` for a single run, another `hydra.sweep.dir` for a sweep whose
    directory the command sets, else another `sweep_name`."""
    if not multirun:
        return f"add hydra.run.dir={Path(run_dir).parent / (Path(run_dir).name + '-2')}"
    if sweep_dir_set:
        return f"add hydra.sweep.dir={Path(run_dir).parent}-2"
    return "add sweep_name=<another name>"


# What Hydra writes into a run directory before the cell starts, and the lock the cell takes (released by now).
HYDRA_ONLY = {".hydra", "train.log", ".lock"}


def remove_refused_run_dir(run_dir: Path) -> bool:
    """A command refused (exit status 2) leaves no run directory: the one Hydra made for it is removed when it holds
    nothing but Hydra's own files (its saved config, the job's log). Anything else there stays."""
    run_dir = Path(run_dir)
    try:
        names = {path.name for path in run_dir.iterdir()}
    except OSError:
        return False
    if not names <= HYDRA_ONLY or not (run_dir / ".hydra").is_dir() or (run_dir / ".hydra").is_symlink():
        return False
    for handler in list(logging.getLogger().handlers):  # the job's log file, which Hydra opened inside
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir.resolve():
            logging.getLogger().removeHandler(handler)
            handler.close()
    shutil.rmtree(run_dir / ".hydra")
    for name in names - {".hydra"}:
        (run_dir / name).unlink(missing_ok=True)
    run_dir.rmdir()
    return True
