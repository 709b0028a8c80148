"""Analyse a checkpoint again: run the probe set and write the same statistics and pictures as training.

    python -m vit_locality.analyze checkpoint=multirun/demo/<cell>/checkpoints/last.ckpt stats.units=pixels

The run's config comes from its results.json (or .hydra/config.yaml); the data set is rebuilt from it, so
the probe set is the same first `stats.probe_size` evaluation images that training used.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from .config import ConfigError, register_resolvers
from .console import quiet_library_noise
from .data import DataError
from .results import ATTENTION_CSV, RESULTS_FILE, RecordError, atomic_write_text, read_record

log = logging.getLogger("vit_locality")


def run_directory(checkpoint: Path) -> Path:
    """Checkpoints live in <run dir>/checkpoints/; a checkpoint elsewhere is its own run directory."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent


def run_config(run_dir: Path) -> DictConfig:
    """The config the run was trained with: from its record, else from Hydra's saved copy."""
    try:
        record = read_record(run_dir)
    except RecordError as error:
        raise ConfigError(f"{run_dir}: {error}") from None
    if record is not None and record.config is not None:
        return OmegaConf.create(record.config)
    hydra_cfg = run_dir / ".hydra" / "config.yaml"
    if hydra_cfg.exists():
        return OmegaConf.load(hydra_cfg)
    raise ConfigError(f"checkpoint's run directory {run_dir} has neither {RESULTS_FILE} nor .hydra/config.yaml")


def default_out_dir(run_dir: Path, stats: DictConfig) -> Path:
    return run_dir / "analysis" / f"{'renorm' if stats.renormalize else 'raw'}_{stats.units}"


def analyze(cfg: DictConfig) -> dict[str, Any]:
    """Load, probe, record; returns the analysis record written to analysis.json."""
    import torch

    from .attention_probe import ProbeSettings, probe_attention
    from .attention_records import probe_rows, probe_summary, save_pictures, write_csv
    from .builders import build_datamodule
    from .checkpoints import completed_epochs
    from .metrics import UNITS
    from .module import ViTClassifier

    checkpoint = Path(cfg.checkpoint)
    if not checkpoint.is_file():
        raise ConfigError(f"checkpoint={checkpoint}: no such file")
    if cfg.stats.units not in UNITS:
        raise ConfigError(f"stats.units={cfg.stats.units!r} is not allowed: one of {', '.join(UNITS)}")
    run_dir = run_directory(checkpoint)
    out_dir = Path(cfg.out_dir) if cfg.out_dir else default_out_dir(run_dir, cfg.stats)
    if (out_dir / "analysis.json").exists() and not cfg.overwrite:
        raise ConfigError(f"{out_dir} holds an analysis already; pass overwrite=true to replace it")

    run_cfg = run_config(run_dir)
    if cfg.data_root:
        run_cfg.data.root = cfg.data_root
    run_cfg.data.num_workers = 0
    device = "cuda" if cfg.device == "auto" and torch.cuda.is_available() else cfg.device
    device = "cpu" if device == "auto" else device
    module = ViTClassifier.load_from_checkpoint(checkpoint, map_location=device, weights_only=True)
    meta = torch.load(checkpoint, map_location="cpu", weights_only=True)
    datamodule, _ = build_datamodule(run_cfg)
    datamodule.setup("validate")
    settings = ProbeSettings.from_mapping(cfg.stats)
    images = module.preprocess(datamodule.probe_images(settings.probe_size).to(module.device))
    result = probe_attention(module.model, images, settings)

    epoch, step = completed_epochs(meta), int(meta.get("global_step", 0))
    write_csv(out_dir / ATTENTION_CSV, probe_rows(result, epoch, step))
    save_pictures(result, out_dir, f"{run_dir.name} ({out_dir.name})")
    record = {
        "checkpoint": str(checkpoint),
        "run_dir": str(run_dir),
        "epoch": epoch,
        "step": step,
        **probe_summary(result),
        "status": "complete",
    }
    atomic_write_text(out_dir / "analysis.json", json.dumps(record, indent=2) + "\n")
    log.info(
        "min early-layer MAD %.4f, mean early-layer entropy %.4f (%d probe images, %s, renormalize=%s)",
        result.min_mad_early(),
        result.mean_entropy_early(),
        result.num_images,
        settings.units,
        settings.renormalize,
    )
    log.info("wrote %s", out_dir)
    return record


@hydra.main(version_base="1.3", config_path="../conf", config_name="analyze")
def main(cfg: DictConfig) -> None:
    quiet_library_noise()
    try:
        analyze(cfg)
    except (ConfigError, DataError) as error:
        log.error("%s", error)
        sys.exit(2)


if __name__ == "__main__":
    register_resolvers()
    main()
