"""What a cell's record says, section by section; run/cell.py writes them. Bump `record_version` when a section
changes meaning."""

from __future__ import annotations

import logging
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import lightning as L
import torch

from vit_locality.config.settings import RunSettings
from vit_locality.data import ImageDataModule
from vit_locality.data.fingerprint import data_difference
from vit_locality.model.vit import count_parameters
from vit_locality.store.record import RunRecord

log = logging.getLogger("vit_locality")
RECORD_VERSION = 1
PACKAGES = ("torch", "torchvision", "lightning", "hydra-core", "omegaconf", "torchmetrics", "numpy", "vit-locality")


def identity_sections(settings: RunSettings, identity: str) -> dict[str, Any]:
    """What every record holds from its first write on, whatever the cell's fate: which cell, under which config."""
    return {
        "record_version": RECORD_VERSION,
        "run_name": settings.run_name,
        "identity_hash": identity,
        "seed": settings.seed,
        "tags": [str(tag) for tag in settings.tags],  # labels only, outside the identity
    }


def data_change(record: RunRecord, datamodule: ImageDataModule) -> str | None:
    """What differs between the data a complete record was measured on and this data (`the train split's pixels`),
    or None when they are the same."""
    recorded = record.data.get("data_fingerprint")
    change = data_difference(recorded, datamodule.fingerprint())
    if change is None and "sha256" not in recorded:
        log.warning("%s: its record predates pixel hashes: only its data's sizes and labels compared", record.run_dir)
    return change


def setup_sections(settings: RunSettings, datamodule: ImageDataModule, model: Any) -> dict[str, Any]:
    """What the cell is about to train, known once data and model are built."""
    return {
        "data": {
            "name": settings.data.name,
            "num_classes": datamodule.num_classes,
            "image_size": datamodule.image_size,
            "num_train": datamodule.num_train,
            "eval_split": "val" if settings.data.val_size else "test",
        },
        "data_fingerprint": datamodule.fingerprint(),
        "protocol": settings.protocol.record(),
        "model": {
            **settings.as_record()["model"],
            "patch_size": model.patch_size,
            "num_params": count_parameters(model),
        },
        "config": settings.as_record(),
        "versions": {
            "python": platform.python_version(),
            **{p: _version(p) for p in PACKAGES},
            "git_commit": git_commit(),
        },
        "threads": torch.get_num_threads(),  # the count this cell computed with (run/threads.py), set or default
        # The vector instructions torch's kernels use (AVX2, AVX512, ...): other kernels round differently, so a cell
        # reproduces bit for bit only at the same capability (ATEN_CPU_CAPABILITY pins it; make demo sets avx2).
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def result_sections(
    settings: RunSettings,
    trainer: L.Trainer,
    datamodule: ImageDataModule,
    val_metrics: dict[str, float],
    test_metrics: dict[str, float],
    timings: dict[str, float],
) -> dict[str, Any]:
    """What a finished cell measured (accuracy as fractions), on how many images, and how long it trained."""
    arrays = datamodule.arrays
    assert arrays is not None
    evaluated = len(datamodule.eval_split()[1])
    return {
        "metrics": {**val_metrics, **test_metrics},
        "measured_on": {
            "eval_split": "val" if settings.data.val_size else "test",
            "eval_images": evaluated,
            "test_images": len(arrays.test_labels),
            "probe_images": min(settings.stats.probe_size, evaluated) if settings.stats.enabled else 0,
        },
        "epochs": trainer.current_epoch,
        "steps": trainer.global_step,
        "precision": str(trainer.precision),
        "timings": timings,
    }


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The code's git commit, recorded in every results.json."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
