"""Attention statistics on the probe set at initialisation, every `every_n_epochs` and at the end, to the loggers,
`attention_stats.csv`, results.json and pictures; stored on the unit square, W&B included (`stats.units`: display)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger

from vit_locality.attention import plots, stats_log
from vit_locality.attention.probe import ProbeResult, probe_attention
from vit_locality.config.schema import StatsConfig
from vit_locality.run.checkpoints import completed_epochs
from vit_locality.store.record import ATTENTION_CSV

log = logging.getLogger("vit_locality")


class AttentionStatsCallback(Callback):
    """Attention statistics through training (see the module docstring)."""

    def __init__(
        self,
        run_dir: str | Path,
        settings: StatsConfig | None = None,
        references: plots.ReferenceSource | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.csv_path = self.run_dir / ATTENTION_CSV
        self.settings = settings or StatsConfig()
        self.rows: list[dict[str, Any]] = []
        self.initial: dict[str, float] | None = None  # the initial model's headline pair
        self.final: ProbeResult | None = None
        self._probe: torch.Tensor | None = None
        self._last_measured_epoch: int | None = None
        self._resumed_at: int | None = None  # epochs done by the checkpoint the fit resumes from
        self.band: dict[str, Any] | None = None  # the noise band for the pictures, where the extras measure it
        self.references = references  # drawn on the pictures, where the entry point gives them

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        """Called before `on_fit_start` when the fit resumes: the epochs the checkpoint has done."""
        self._resumed_at = completed_epochs(checkpoint)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Measure the initial model (a fresh fit) or keep the rows up to the checkpoint."""
        if self._resumed_at is None:
            self.rows = []
            self.initial = self._measure(trainer, pl_module, epoch=0).headline()
            return
        self.rows = [row for row in stats_log.read_csv(self.csv_path) if int(row["epoch"]) <= self._resumed_at]
        if self.rows:
            self._last_measured_epoch = max(int(row["epoch"]) for row in self.rows)
        self.initial = stats_log.headline_of_rows(self.rows, epoch=0, early_layers=self.settings.early_layers)

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
            paths = stats_log.save_pictures(self.final, self.run_dir, self.run_dir.name, band, self.references)
            log.info("attention pictures: %s", ", ".join(str(p) for p in paths))

    def _probe_batch(self, trainer: L.Trainer, pl_module: L.LightningModule) -> torch.Tensor:
        """The probe images, preprocessed, on the model's device."""
        if self._probe is None:  # taken when first needed: a fit resumed at its last epoch has no train start
            self._probe = trainer.datamodule.probe_images(self.settings.probe_size)
        return pl_module.preprocess(self._probe.to(pl_module.device))

    def _measure(self, trainer: L.Trainer, pl_module: L.LightningModule, epoch: int) -> ProbeResult:
        images = self._probe_batch(trainer, pl_module)
        result = probe_attention(pl_module.model, images, self.settings)
        self.final = result
        self._last_measured_epoch = epoch
        if not trainer.is_global_zero:
            return result
        kept = [row for row in self.rows if int(row["epoch"]) != epoch]  # a re-measured epoch replaces its rows
        self.rows = kept + stats_log.probe_rows(result, epoch, trainer.global_step)
        stats_log.write_csv(self.csv_path, self.rows)
        metrics = stats_log.scalar_metrics(result)
        for logger in trainer.loggers:
            logger.log_metrics({**metrics, "epoch": epoch}, step=trainer.global_step)
            if isinstance(logger, WandbLogger):
                self._log_wandb(logger, result, epoch)
        log.info("%s", stats_log.headline_line(result, epoch))
        return result

    def _log_wandb(self, logger: WandbLogger, result: ProbeResult, epoch: int) -> None:
        """Layer x head heatmaps of MAD and entropy, and a table of the per-head values; distances as stored."""
        import wandb

        mad = plots.layer_head_heatmap(result.stats["mad"], f"MAD (fraction of the image side), epoch {epoch}")
        entropy = plots.layer_head_heatmap(result.stats["entropy"], f"entropy, epoch {epoch}", vmax=1.0)
        columns = [name for name in stats_log.CSV_FIELDS if name not in ("epoch", "step")]  # per head, this epoch
        table = wandb.Table(columns=columns)
        for row in stats_log.probe_rows(result, epoch, 0):
            table.add_data(*(row[key] for key in columns))
        heatmaps = {"attn/mad_heatmap": wandb.Image(mad), "attn/entropy_heatmap": wandb.Image(entropy)}
        logger.experiment.log({**heatmaps, "attn/per_head": table, "epoch": epoch})
        plots.plt.close(mad)
        plots.plt.close(entropy)

    def record_section(self) -> dict[str, Any]:
        """The record's `attention` section (vit_locality.store.record.RecordSection): final tables, initial pair."""
        if self.final is None:
            return {}
        return stats_log.attention_section(self.final, self._last_measured_epoch, self.initial)
