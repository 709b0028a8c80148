"""A complete cell asked again with other `stats` settings is measured again, never trained again: the probe reads
the final weights (checkpoints/last.ckpt) and moves none, so another probe size, raw attention or other early layers
need seconds, not the cell's epochs. The record gains the measurement beside the first (`attention.remeasured`),
each with its settings; the per-epoch trajectory (attention_stats.csv) stays the one measured during training."""

from __future__ import annotations

import logging
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
from vit_locality.store.record import REMEASURED, RunRecord, measurements, write_record

log = logging.getLogger("vit_locality")
# What sets a final measurement apart: what the probe reads and how (stats.units only shows, stats.every_n_epochs
# only spaces the trajectory).
MEASUREMENT_KEYS = ("renormalize", "probe_images", "early_layers")


def measurement_of(summary: dict[str, Any]) -> dict[str, Any]:
    """A recorded measurement's settings (`attention.final` or an entry of `attention.remeasured`)."""
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
    """The record with a new measurement of the complete cell's final weights when its `stats` ask for one it lacks;
    None when it holds it already (or statistics are off). Called under the run directory's lock, after the data
    were found to be the same."""
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
    """The probe's summary of the weights in last.ckpt, which must be the cell's final ones (ConfigError naming the
    setting and the way out otherwise)."""
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
