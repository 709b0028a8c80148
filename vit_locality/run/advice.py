"""What to type so that a cell refused its run directory runs in another one.

A sweep's cells live in `multirun/<sweep_name>/`, so another `sweep_name` moves them; a single run lives in
`outputs/<run name>` (or where `hydra.run.dir` says), which `sweep_name` does not touch: there the advice is another
`hydra.run.dir`. Where the sweep's directory is set on the command line, another `hydra.sweep.dir`.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

from vit_locality.config.settings import RunSettings


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


MAX_LISTED = 4  # differing settings a refusal names; the rest are counted


def settings_that_differ(cfg: RunSettings, checkpoint: Path) -> str:
    """`; the settings that differ: optim.lr 0.002 there, 0.001 here, ...` from the record beside `checkpoint`
    (`<cell>/checkpoints/<file>` -> `<cell>/results.json`); empty when there is none to compare with."""
    from vit_locality.config.identity import canonical_text, processes, run_identity, start_checkpoint
    from vit_locality.store.record import RecordError, read_record

    try:
        record = read_record(Path(checkpoint).resolve().parent.parent)
    except RecordError:
        return ""
    config = (record.data.get("config") if record is not None else None) or {}
    if not isinstance(config, dict) or not config:
        return ""
    recorded = config  # validated when that cell ran: read as it stands
    theirs, mine = run_identity(recorded), run_identity(cfg)
    differ = [
        f"{key} {canonical_text(theirs.get(key))} there, {canonical_text(mine.get(key))} here"
        for key in sorted(theirs.keys() | mine.keys())
        if canonical_text(theirs.get(key)) != canonical_text(mine.get(key))
    ]
    if processes(recorded) != processes(cfg):
        differ.append(f"processes {processes(recorded)} there, {processes(cfg)} here")
    started, starts = start_checkpoint(recorded), start_checkpoint(cfg)
    if started != starts:
        there, here = (f"weights of {path}" if path else "scratch" for path in (started, starts))
        differ.append(f"start {there} there, {here} here")  # a start from weights is part of the identity
    if not differ:
        return "; the settings are the same: the checkpoint comes from older code"
    more = f" and {len(differ) - MAX_LISTED} more" if len(differ) > MAX_LISTED else ""
    return f"; the settings that differ: {', '.join(differ[:MAX_LISTED])}{more}"


def refused_resume(cfg: RunSettings, checkpoint: Path, written_by: str | None) -> str:
    """The one line refusing `ckpt_mode=resume` of a checkpoint this config did not write (`written_by`: the identity
    stamped into it, None when it carries none): the settings that differ, never two hashes, and the way out."""
    head = f"ckpt_path={str(checkpoint)!r} with ckpt_mode=resume:"
    way_out = "resume only continues the cell that wrote it (ckpt_mode=weights starts a new cell from its weights)"
    if written_by is None:
        return f"{head} the checkpoint records no config (a cell of this project did not write it); {way_out}"
    differ = settings_that_differ(cfg, checkpoint)
    if not differ:
        record = Path(checkpoint).resolve().parent.parent / "results.json"
        differ = f" (no record of it at {record} to name the settings that differ)"
    return f"{head} the checkpoint is another cell's{differ}; {way_out}"


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
