"""A complete cell asked again is never trained again. New `tags` change no result: they are merged into its record
(`label_updates`) and its W&B run. Other `stats` settings are measured on the final weights (last.ckpt) in seconds,
beside the first measurement (`attention.remeasured`); the per-epoch attention_stats.csv stays the training's."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from vit_locality.attention.probe import probe_attention
from vit_locality.attention.stats_log import probe_summary
from vit_locality.config.settings import RunSettings
from vit_locality.data import ImageDataModule
from vit_locality.errors import ConfigError
from vit_locality.run.builders import build_module
from vit_locality.run.checkpoints import completed_epochs, last_checkpoint, read_checkpoint_file
from vit_locality.store.record import REMEASURED, RESULTS_FILE, RunRecord, measurements, write_record

log = logging.getLogger("vit_locality")
LABEL_UPDATES = "label_updates"  # the record's list of {"at": UTC time, "tags_added": [...]}


def measurement_of(summary: dict[str, Any]) -> dict[str, Any]:
    """A recorded measurement's settings: what the probe reads and how (stats.units only shows)."""
    settings = summary.get("settings") or {}
    return {
        "renormalize": settings.get("renormalize", True),
        "probe_images": summary.get("probe_images"),
        "early_layers": summary.get("early_layers", 2),
    }


def asked_measurement(settings: RunSettings, eval_images: int) -> dict[str, Any]:
    """The measurement the cell's `stats` ask for, on an evaluation split of `eval_images` images."""
    stats = settings.stats
    return {
        "renormalize": stats.renormalize,
        "probe_images": min(stats.probe_size, eval_images),
        "early_layers": stats.early_layers,
    }


def remeasure_if_asked(
    settings: RunSettings, run_dir: Path, record: RunRecord, datamodule: ImageDataModule
) -> dict[str, Any] | None:
    """The record with a new measurement of the final weights when `stats` ask for one it lacks; None otherwise."""
    if not settings.stats.enabled:
        return None
    asked = asked_measurement(settings, len(datamodule.eval_split()[1]))
    if any(measurement_of(summary) == asked for summary in measurements(record.data)):
        return None
    summary = measure_checkpoint(settings, Path(run_dir), record, datamodule)
    data = {key: value for key, value in record.data.items() if key != "status"}
    attention = dict(data.get("attention") or {})
    attention[REMEASURED] = [*(attention.get(REMEASURED) or []), summary]
    data["attention"] = attention
    write_record(run_dir, data, status="complete")
    shown = ", ".join(f"{key}={value}" for key, value in asked.items())
    log.info(
        "%s is complete already, not retrained: its final weights measured again (%s): min early-layer MAD %.4f, "
        "mean early-layer entropy %.4f; per-epoch trajectories (attention_stats.csv) stay those measured during "
        "training",
        settings.run_name,
        shown,
        summary["min_mad_early"],
        summary["mean_entropy_early"],
    )
    return {**data, "status": "complete"}


def measure_checkpoint(
    settings: RunSettings, run_dir: Path, record: RunRecord, datamodule: ImageDataModule
) -> dict[str, Any]:
    """The probe's summary of the weights in last.ckpt, which must be the cell's final ones (else ConfigError)."""
    path = last_checkpoint(run_dir)
    way_out = "train the cell again under another sweep_name to measure it so"
    if not path.is_file():
        raise ConfigError(f"stats settings of {run_dir}: no {path.name} to measure its final weights from; {way_out}")
    checkpoint = read_checkpoint_file(path, needs=("state_dict",))
    epochs, trained = completed_epochs(checkpoint), record.data.get("epochs")
    if isinstance(trained, int) and epochs != trained:
        raise ConfigError(
            f"stats settings of {run_dir}: its {path.name} holds epoch {epochs}, not the final epoch {trained} "
            f"(callbacks.checkpoint_every_n_epochs); {way_out}"
        )
    module = build_module(settings, datamodule)
    module.load_state_dict(checkpoint["state_dict"])
    module.eval()
    with torch.no_grad():
        images = module.preprocess(datamodule.probe_images(settings.stats.probe_size).to(module.device))
        result = probe_attention(module.model, images, settings.stats)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    checkpoint_name = str(path.relative_to(run_dir))
    return {"epoch": epochs, **probe_summary(result), "checkpoint": checkpoint_name, "at": when}


@dataclass(frozen=True)
class LabelUpdate:
    """The record as rewritten, and the one line that says what changed."""

    data: dict[str, Any]
    summary: str


def add_labels(settings: RunSettings, run_dir: Path, record: RunRecord) -> LabelUpdate | None:
    """Merge the command's new tags into the complete `record` and its W&B run; None when there is nothing new."""
    have = {str(tag) for tag in record.data.get("tags") or []}
    added = [tag for tag in dict.fromkeys(str(tag) for tag in settings.tags) if tag not in have]  # command's order
    if not added:
        return None
    data = {key: value for key, value in record.data.items() if key != "status"}
    data["tags"] = [*(str(tag) for tag in data.get("tags") or []), *added]
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    data[LABEL_UPDATES] = [*(data.get(LABEL_UPDATES) or []), {"at": when, "tags_added": added}]
    write_record(run_dir, data, status="complete")
    parts = [f"tags {', '.join(added)} added to {RESULTS_FILE}", _update_wandb(settings, Path(run_dir), data)]
    return LabelUpdate({**data, "status": "complete"}, "; ".join(part for part in parts if part))


def _update_wandb(settings: RunSettings, run_dir: Path, record: dict[str, Any]) -> str:
    """The cell's W&B run gets the record's tags; what happened, in a few words (a failure leaves the record)."""
    had_run = (run_dir / "wandb").is_dir()
    if not settings.logger.wandb:
        return "its W&B run not updated (logger=wandb is off)" if had_run else ""
    if not had_run:
        return "no W&B run of this cell to tag (it ran without logger=wandb)"
    from vit_locality.tracking.wandb_run import cell_run_id, retag_wandb_run, run_tags

    run_id = cell_run_id(str(record.get("identity_hash")), run_dir, record)
    try:
        return retag_wandb_run(settings, run_dir, run_id, [*run_tags(settings), *record["tags"]])
    except Exception as error:
        log.warning("W&B tag update failed (%s: %s); the record has the tags", type(error).__name__, error)
        return "W&B run not updated (see the warning)"
