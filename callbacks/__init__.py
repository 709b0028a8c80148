"""Lightning callbacks of a training run, built from the `callbacks` and `stats` config groups."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Callback, RichProgressBar, TQDMProgressBar
from omegaconf import DictConfig

from vit_locality.attention_probe import ProbeSettings

from .attention_stats import AttentionStatsCallback
from .epoch_log import EpochLogCallback


def probe_settings(stats: DictConfig) -> ProbeSettings:
    return ProbeSettings(
        probe_size=int(stats.probe_size),
        batch_size=int(stats.batch_size),
        early_layers=int(stats.early_layers),
        renormalize=bool(stats.renormalize),
        units=str(stats.units),
    )


def build_callbacks(cfg: DictConfig, run_dir: Path) -> list[Callback]:
    """Progress display (a bar, or one line per epoch) and, unless `stats.enabled=false`, the statistics."""
    bar = cfg.callbacks.progress_bar
    chosen: list[Callback] = []
    if bar == "tqdm":
        chosen.append(TQDMProgressBar())
    elif bar == "rich":
        chosen.append(RichProgressBar())
    else:
        chosen.append(EpochLogCallback())
    if cfg.stats.enabled:
        chosen.append(
            AttentionStatsCallback(
                run_dir, int(cfg.stats.every_n_epochs), probe_settings(cfg.stats), bool(cfg.stats.pictures)
            )
        )
    return chosen


__all__ = ["AttentionStatsCallback", "EpochLogCallback", "build_callbacks", "probe_settings"]
