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
from .data import DataError

log = logging.getLogger("vit_locality")


def run_directory(checkpoint: Path) -> Path:
    """Checkpoints live in <run dir>/checkpoints/; a checkpoint elsewhere is its own run directory."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent


def run_config(run_dir: Path) -> DictConfig:
    record = run_dir / "results.json"
    if record.exists():
        return OmegaConf.create(json.loads(record.read_text())["config"])
    hydra_cfg = run_dir / ".hydra" / "config.yaml"
    if hydra_cfg.exists():
        return OmegaConf.load(hydra_cfg)
    raise ConfigError(f"checkpoint's run directory {run_dir} has neither results.json nor .hydra/config.yaml")


def default_out_dir(run_dir: Path, stats: DictConfig) -> Path:
    return run_dir / "analysis" / f"{'renorm' if stats.renormalize else 'raw'}_{stats.units}"


def analyze(cfg: DictConfig) -> dict[str, Any]:
    """Load, probe, record; returns the analysis record written to analysis.json."""
    import torch

    from callbacks import probe_settings

    from .attention_probe import probe_attention
    from .attention_records import probe_rows, save_pictures, write_csv
    from .metrics import UNITS
    from .module import ViTClassifier
    from .pipeline import build_datamodule, completed_epochs
    from .results import atomic_write_text

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
    settings = probe_settings(cfg.stats)
    images = module.preprocess(datamodule.probe_images(settings.probe_size).to(module.device))
    result = probe_attention(module.model, images, settings)

    epoch, step = completed_epochs(meta), int(meta.get("global_step", 0))
    write_csv(out_dir / "attention_stats.csv", probe_rows(result, epoch, step))
    save_pictures(result, out_dir, f"{run_dir.name} ({out_dir.name})")
    record = {
        "checkpoint": str(checkpoint),
        "run_dir": str(run_dir),
        "epoch": epoch,
        "step": step,
        **result.summary(),
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
    try:
        analyze(cfg)
    except (ConfigError, DataError) as error:
        log.error("%s", error)
        sys.exit(2)


if __name__ == "__main__":
    register_resolvers()
    main()
