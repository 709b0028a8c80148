"""Measure every head's Mean Attention Distance and entropy on a fixed probe set while a cell trains.

At initialisation (epoch 0), every `every_n_epochs`, and on the final model: eval mode, no gradients, the
explicit fp32 attention path (training keeps the fused kernel). Scalars go to every logger, per-head rows to
`attention_stats.csv` in the run directory, the final tables to results.json (`record_section`), and two
pictures to PNG at the end.

Distances are stored in one convention, the unit square, in all of these, W&B included: a W&B panel overlays the
runs of a sweep under one key, so a key holding each run's own `stats.units` would put two conventions side by
side. `stats.units` chooses only what a person reads: the log line and the pictures.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger

from vit_locality.attention import plots
from vit_locality.attention.noise_band import surround_band
from vit_locality.attention.probe import ProbeResult, probe_attention
from vit_locality.attention.stats_log import (
    CSV_FIELDS,
    attention_section,
    headline_line,
    headline_of_rows,
    probe_rows,
    read_csv,
    save_pictures,
    scalar_metrics,
    write_csv,
)
from vit_locality.config.schema import StatsConfig
from vit_locality.model.vit import VisionTransformer
from vit_locality.run.checkpoints import completed_epochs
from vit_locality.store.record import ATTENTION_CSV

log = logging.getLogger("vit_locality")


class AttentionStatsCallback(Callback):
    """Attention statistics through training; see the module docstring for when and where they go."""

    def __init__(self, run_dir: str | Path, settings: StatsConfig | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.settings = settings or StatsConfig()
        self.rows: list[dict[str, Any]] = []
        self.initial: dict[str, float] | None = None  # the initial model's headline pair
        self.final: ProbeResult | None = None
        self._probe: torch.Tensor | None = None
        self._last_measured_epoch: int | None = None
        self._resumed_at: int | None = None  # epochs done by the checkpoint the fit resumes from
        self.band: dict[str, Any] | None = None  # surround_pref's noise band at initialisation (noise_band.py)

    @property
    def csv_path(self) -> Path:
        return self.run_dir / ATTENTION_CSV

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        """Called before `on_fit_start` when the fit resumes: the epochs the checkpoint has done."""
        self._resumed_at = completed_epochs(checkpoint)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A fresh fit starts the CSV anew (rows of an attempt that never reached a checkpoint would double epoch 0)
        and measures the initial model; a resumed fit keeps the rows up to its checkpoint, and its initial pair.
        Either measures the surround preference's noise band (fixed seeds: a resumed fit measures the same band)."""
        self._measure_band(trainer, pl_module)
        if self._resumed_at is None:
            self.rows = []
            initial = self._measure(trainer, pl_module, epoch=0)
            self.initial = {
                "min_mad_early": initial.min_mad_early(),
                "mean_entropy_early": initial.mean_entropy_early(),
            }
            return
        self.rows = [row for row in read_csv(self.csv_path) if int(row["epoch"]) <= self._resumed_at]
        if self.rows:
            self._last_measured_epoch = max(int(row["epoch"]) for row in self.rows)
        self.initial = headline_of_rows(self.rows, epoch=0, early_layers=self.settings.early_layers)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        completed = trainer.current_epoch + 1
        if completed % self.settings.every_n_epochs == 0:
            self._measure(trainer, pl_module, epoch=completed)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        completed = trainer.current_epoch  # after fit, current_epoch counts the epochs run
        if self._last_measured_epoch != completed or self.final is None:
            self.final = self._measure(trainer, pl_module, epoch=completed)
        for logger in trainer.loggers:
            logger.save()
        if self.settings.pictures and trainer.is_global_zero:
            band = self.band["surround_pref"] if self.band else None
            paths = save_pictures(self.final, self.run_dir, self.run_dir.name, band)
            log.info("attention pictures: %s", ", ".join(str(p) for p in paths))

    def _probe_batch(self, trainer: L.Trainer, pl_module: L.LightningModule) -> torch.Tensor:
        """The probe images, preprocessed, on the model's device."""
        if self._probe is None:  # taken when first needed: a fit resumed at its last epoch has no train start
            self._probe = trainer.datamodule.probe_images(self.settings.probe_size)
        return pl_module.preprocess(self._probe.to(pl_module.device))

    def _measure_band(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The band on untrained models of the module's architecture (ViTClassifier's `model` hyper-parameter); none
        for another module, and on ranks other than 0, which record nothing."""
        arch = getattr(pl_module, "hparams", {}).get("model")
        if not isinstance(arch, dict) or not trainer.is_global_zero:
            return
        classes, size = pl_module.hparams["num_classes"], pl_module.hparams["image_size"]

        def build() -> VisionTransformer:
            return VisionTransformer(num_classes=classes, image_size=size, **arch)

        design = (repr(sorted(arch.items())), classes, size)
        self.band = surround_band(build, self._probe_batch(trainer, pl_module), self.settings, design=design)
        log.info(
            "surround_pref noise band at initialisation: %.4f (%d seeds x %d heads, %s)",
            self.band["surround_pref"],
            len(self.band["seeds"]),
            self.band["heads"],
            "reused from this process's earlier cell" if self.band["reused"] else f"{self.band['seconds']:.1f} s",
        )

    def _measure(self, trainer: L.Trainer, pl_module: L.LightningModule, epoch: int) -> ProbeResult:
        images = self._probe_batch(trainer, pl_module)
        result = probe_attention(pl_module.model, images, self.settings)
        self.final = result
        self._last_measured_epoch = epoch
        if not trainer.is_global_zero:
            return result
        # A measurement replaces any earlier one of the same epoch (a re-run measuring its final model again).
        self.rows = [row for row in self.rows if int(row["epoch"]) != epoch] + probe_rows(
            result, epoch, trainer.global_step
        )
        write_csv(self.csv_path, self.rows)
        metrics = scalar_metrics(result)
        for logger in trainer.loggers:
            logger.log_metrics({**metrics, "epoch": epoch}, step=trainer.global_step)
            if isinstance(logger, WandbLogger):
                self._log_wandb(logger, result, epoch)
        log.info("%s", headline_line(result, epoch))
        return result

    def _log_wandb(self, logger: WandbLogger, result: ProbeResult, epoch: int) -> None:
        """Layer x head heatmaps of MAD and entropy, and a table of the per-head values; distances as stored."""
        import wandb

        mad = plots.layer_head_heatmap(result.stats["mad"], f"MAD (fraction of the image side), epoch {epoch}")
        entropy = plots.layer_head_heatmap(result.stats["entropy"], f"entropy, epoch {epoch}", vmax=1.0)
        table = wandb.Table(columns=list(CSV_FIELDS[2:]))
        for row in probe_rows(result, epoch, 0):
            table.add_data(*(row[key] for key in CSV_FIELDS[2:]))
        logger.experiment.log(
            {
                "attn/mad_heatmap": wandb.Image(mad),
                "attn/entropy_heatmap": wandb.Image(entropy),
                "attn/per_head": table,
                "epoch": epoch,
            }
        )
        plots.plt.close(mad)
        plots.plt.close(entropy)

    def record_section(self) -> dict[str, Any]:
        """The record's `attention` section (vit_locality.store.record.RecordSection): final tables, initial pair."""
        if self.final is None:
            return {}
        return attention_section(self.final, self._last_measured_epoch, self.initial, self.band)
