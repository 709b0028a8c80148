"""How a cell meets Weights & Biases: its logger, group, tags and run id, and its files uploaded at the end. W&B is
a dashboard, never the record: nothing here is read back, and `wandb` is imported only when a run exists."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger, WandbLogger

from vit_locality.config.identity import ID_CHARS, ID_SUFFIX, identity_hash
from vit_locality.config.settings import RunSettings
from vit_locality.store.record import (
    ATTENTION_CSV,
    CHECKPOINT_DIR,
    LAST_CHECKPOINT,
    RESULTS_FILE,
    RecordError,
    read_record,
)
from vit_locality.tracking.wandb_mode import quiet_wandb, resolve_mode
from vit_locality.upstream import logger_experiment, wandb_init_arguments

log = logging.getLogger("vit_locality")
# What a cell's W&B run gets besides its metrics: the record, the per-head statistics and the pictures.
RUN_FILES = (RESULTS_FILE, ATTENTION_CSV, "*.png")
MAX_TAG = 64  # W&B refuses longer tags


class ConfigWandbLogger(WandbLogger):
    """The run's config is the resolved Hydra config, not also a copy of the module's flat constructor arguments."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Lightning passes `anonymous=None`, which wandb answers with a deprecation warning on every run.
        init_arguments = wandb_init_arguments(self)
        if init_arguments.get("anonymous") is None:
            init_arguments.pop("anonymous", None)
        # Each cell its own run, several at once in a pack (run/pack.py): `wandb.run` stays unset, so Lightning's
        # logger never adopts another cell's run as "already in progress".
        init_arguments["reinit"] = "create_new"

    def log_hyperparams(self, params: Any) -> None:
        """Nothing: see the class docstring."""


def run_group(settings: RunSettings) -> str:
    """The cell without its seed, so W&B averages its seeds (`logger.wandb.group` where set)."""
    if settings.logger.wandb.group:
        return str(settings.logger.wandb.group)
    readable = re.sub(rf"_s{settings.seed}(?=_|$)", "", ID_SUFFIX.sub("", str(settings.run_name)), count=1)
    return f"{readable}_cell-{identity_hash({**settings.as_record(), 'seed': None})[:ID_CHARS]}"


def run_tags(settings: RunSettings) -> list[str]:
    """The cell's paper name and flags, data set, model, `sweep:<sweep_name>`, then the user's `tags`."""
    tags = settings.protocol.tags()
    tags += [settings.data.name, settings.model.name, f"sweep:{settings.sweep_name}", *map(str, settings.tags)]
    return list(dict.fromkeys(tag[:MAX_TAG] for tag in tags))


def wandb_logger(settings: RunSettings, run_dir: Path, run_id: str) -> ConfigWandbLogger:
    """The cell's W&B logger: one run per cell and directory, grouped by cell, typed by data set."""
    wandb = settings.logger.wandb
    quiet_wandb()
    return ConfigWandbLogger(
        project=wandb.project,
        entity=wandb.entity,
        group=run_group(settings),
        job_type=wandb.job_type or settings.data.name,
        name=settings.run_name,
        tags=run_tags(settings),
        save_dir=str(run_dir),
        id=run_id,
        resume="allow",
        mode=resolve_mode(str(wandb.mode)),
        config=settings.as_record(),
    )


RUN_ID_ENTRY = "wandb_run_id"  # the record's key for the cell's W&B run id
# The directories of a W&B run's files: `run-<time>-<id>` online, `offline-run-<time>-<id>` offline.
RUN_FILES_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-([A-Za-z0-9_-]+)$")


def first_run_id(identity: str, run_dir: Path) -> str:
    """The W&B run id a cell takes at its first start."""
    key = f"{identity}:{Path(run_dir).resolve()}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def cell_run_id(identity: str, run_dir: Path, record: Mapping[str, Any] | None = None) -> str:
    """The cell's W&B run id: its record's, else the one id its W&B files carry, else a first start's."""
    recorded = (record or {}).get(RUN_ID_ENTRY)
    if isinstance(recorded, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", recorded):
        return recorded
    try:  # the W&B runs whose files lie in the run directory's `wandb/` (links skipped)
        entries = list(os.scandir(Path(run_dir) / "wandb"))
    except OSError:
        entries = []
    found = {m.group(1) for e in entries if e.is_dir(follow_symlinks=False) and (m := RUN_FILES_DIR.match(e.name))}
    return found.pop() if len(found) == 1 else first_run_id(identity, run_dir)


def recorded_run_id(settings: RunSettings, run_dir: Path, identity: str) -> dict[str, str]:
    """The record's W&B section for a cell about to run (`{}` without `logger=wandb`), from `cell_run_id`."""
    if not settings.logger.wandb:
        return {}
    try:
        earlier = read_record(run_dir)
    except RecordError:
        earlier = None
    same_cell = earlier is not None and earlier.identity_hash == identity
    return {RUN_ID_ENTRY: cell_run_id(identity, run_dir, earlier.data if same_cell else None)}


def wandb_loggers(loggers: Iterable[Logger]) -> list[WandbLogger]:
    return [logger for logger in loggers if isinstance(logger, WandbLogger)]


def publish_run_files(loggers: Iterable[Logger], run_dir: Path, log_model: bool = False) -> None:
    """Upload the run's record, statistics and pictures (with `log_model`, its final checkpoint) to its W&B run."""
    for logger in wandb_loggers(loggers):
        import wandb

        run = logger.experiment
        try:
            paths = sorted({path for pattern in RUN_FILES for path in Path(run_dir).glob(pattern) if path.is_file()})
            for path in paths:
                run.save(str(path), base_path=str(run_dir), policy="now")
            pictures = {f"pictures/{path.stem}": wandb.Image(str(path)) for path in paths if path.suffix == ".png"}
            if pictures:
                run.log(pictures)
            checkpoint = Path(run_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT
            if log_model and checkpoint.is_file():
                artifact = wandb.Artifact(f"model-{run.id}", type="model", metadata={"run_name": run.name})
                artifact.add_file(str(checkpoint))
                run.log_artifact(artifact, aliases=["latest", "final"])
        except Exception as error:  # the dashboard's copy; the record on disk is complete either way
            log.warning(
                "W&B upload of the run's files failed (%s: %s); they are in %s", type(error).__name__, error, run_dir
            )


def finish_wandb(loggers: Iterable[Logger], failed: bool = False) -> None:
    """Close the cell's W&B run, marked failed if the cell failed; say where an offline run went."""
    for logger in wandb_loggers(loggers):
        run = logger_experiment(logger)  # not `experiment`, which would start one
        if run is None:  # the cell stopped before its run started
            continue
        offline = run.settings.mode in ("offline", "dryrun")
        run_path = Path(run.dir).parent
        run.finish(exit_code=1 if failed else 0)
        if offline:
            log.info("W&B run saved offline in %s; upload it with: wandb sync %s", run_path, run_path)


def retag_wandb_run(settings: RunSettings, run_dir: Path, run_id: str, tags: list[str]) -> str:
    """Resume a finished cell's W&B run only to set its tags; returns what was done, for the cell's one line."""
    import wandb

    chosen_run = settings.logger.wandb
    mode = resolve_mode(str(chosen_run.mode))
    if mode == "disabled":
        return "W&B run not updated (logger.wandb.mode=disabled)"
    quiet_wandb()
    chosen = list(dict.fromkeys(tag[:MAX_TAG] for tag in tags))
    run = wandb.init(
        project=chosen_run.project,
        entity=chosen_run.entity,
        id=run_id,
        resume="allow",
        dir=str(run_dir),
        mode=mode,
        tags=chosen,
        settings=wandb.Settings(silent=True),
    )
    try:
        run.tags = tuple(chosen)
        where = f"saved offline in {Path(run.dir).parent}, upload with wandb sync" if mode == "offline" else "online"
    finally:
        run.finish()
    return f"W&B run {run_id} tagged ({where})"
