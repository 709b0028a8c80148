"""The LightningModule: uint8 batches in, the protocol's batch mixing and loss, AdamW with warm-up + cosine.

Its settings arrive as plain dicts, the architecture (the ViT's keyword arguments), the protocol (its record form)
and the `optim` section, so a checkpoint's hyper-parameters rebuild it with `weights_only=True`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F

from vit_locality.augment.fixed_batches import fixed_batches
from vit_locality.augment.mixing import mix_batch
from vit_locality.config.metric_names import TEST, eval_prefix
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.config.schema import OptimConfig
from vit_locality.errors import VitLocalityError
from vit_locality.model.optimization import adamw_with_decay_groups, warmup_cosine_schedule
from vit_locality.model.vit import VisionTransformer


class NonFiniteLossError(VitLocalityError, RuntimeError):
    """The training loss became NaN or infinite; training stops before a checkpoint can store bad weights."""

    exit_code = 3


def host_figure(value: float) -> torch.Tensor:
    """A logged figure that lives on the host (the learning rate, the epoch): Lightning keeps a logged tensor on its
    own device and makes a Python number into one on the model's, which on a GPU costs a copy now and a read later."""
    return torch.tensor(float(value))


TRAIN_SUMS_ENTRY = "train_running_sums"  # the checkpoint's entry of the epoch's (loss x images, correct) so far


class ViTClassifier(L.LightningModule):
    """Trains the ViT on one cell: `model` the ViT's keyword arguments, `protocol` the cell's augmentation and loss,
    `optim` the `optim` section; each stored as a plain dict so checkpoints load weights-only."""

    def __init__(
        self,
        num_classes: int,
        image_size: int,
        mean: list[float],
        std: list[float],
        model: Mapping[str, Any],
        protocol: TrainingProtocol | Mapping[str, Any] | None = None,
        optim: Mapping[str, Any] | None = None,
        nonfinite_check_every: int = 1,
        compile_model: bool = False,
    ) -> None:
        super().__init__()
        given = protocol or {}
        self.protocol = given if isinstance(given, TrainingProtocol) else TrainingProtocol.from_record(given)
        self.optim = dict(optim or OptimConfig().model_dump())  # a module built by hand: the section's defaults
        self.num_classes = num_classes
        self.save_hyperparameters(
            {
                "num_classes": num_classes,
                "image_size": image_size,
                "mean": list(mean),
                "std": list(std),
                "model": dict(model),
                "protocol": self.protocol.model_dump(),
                "optim": self.optim,
                "nonfinite_check_every": nonfinite_check_every,
                "compile_model": compile_model,
            }
        )
        self._first_bad_step: torch.Tensor | None = None
        self._train_sums: torch.Tensor | None = None  # (loss x images, correct) over the epoch so far
        self._train_seen = 0
        self._eval_rows = 0  # the largest evaluation batch seen: a compiled model's one evaluation shape
        self.model = VisionTransformer(num_classes=num_classes, image_size=image_size, **model)
        # aug.device=gpu: AutoAugment runs here, batched on the device, instead of per sample in the workers.
        self.device_autoaugment: torch.nn.Module | None = None
        if self.protocol.batched_autoaugment:
            from vit_locality.augment.batched_autoaugment import BatchedAutoAugment

            self.device_autoaugment = BatchedAutoAugment(self.protocol.policy)
        if compile_model:  # compiles __call__ only: the statistics' explicit attention path stays eager
            # Static shapes: one training graph (its batch) and one evaluation graph (evaluation_logits pads to one
            # batch); a dynamic batch dimension, which a second shape would bring, buys nothing here.
            self.model.compile(dynamic=False)
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1) * 255.0, persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1) * 255.0, persistent=False)

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, 3, H, W) on the device -> normalised float, once per batch."""
        return (images.float() - self.mean) / self.std

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(self.preprocess(images))

    def training_loss(
        self, images: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The protocol's loss on one uint8 batch: the protocol's batch mixing (mixing.mix_batch), label smoothing
        once, in the loss.

        Returns the loss, the logits and the labels accuracy is measured against: the dominant label of a mixed
        batch (logged as `train/acc1` in every cell).
        """
        trainer = self._trainer
        if fixed_batches(trainer):  # Lightning overfits: the same images every epoch, neither augmented nor mixed
            logits = self(images)
            return F.cross_entropy(logits, labels, label_smoothing=self.protocol.ls), logits, labels
        if self.device_autoaugment is not None:  # under DDP each rank takes its rows of the global batch's draws
            world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
            images = self.device_autoaugment(images, world, rank)
        images, targets, reference = mix_batch(images, labels, self.num_classes, self.protocol)
        logits = self(images)
        loss = F.cross_entropy(logits, targets, label_smoothing=self.protocol.ls)
        return loss, logits, reference

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, logits, reference = self.training_loss(*batch)
        self._note_nonfinite(loss)
        # Per-step self.log calls cost ~0.5 ms each on a small model: keep running sums on the device, log the
        # epoch figures once, and the step figures every log_every_n_steps (when Lightning writes them anyway).
        with torch.no_grad():
            sums = torch.stack([loss.detach().float() * len(reference), (logits.argmax(1) == reference).sum()])
            self._train_sums = sums if self._train_sums is None else self._train_sums.to(sums.device) + sums
            self._train_seen += len(reference)
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0:
            # On the progress bar only when a bar draws batches: Lightning reads every progress-bar figure on the
            # host at every batch end, until the next log replaces it (a sync per step on a GPU).
            self.log("train/loss", loss, prog_bar=self._bar_draws_batches())
            self.log("lr", host_figure(self.optimizers().param_groups[0]["lr"]))
            self.log("epoch", host_figure(self.epoch_number()))
        if self.trainer.is_last_batch or self._is_last_step(batch_idx):
            loss_sum, correct = self._train_sums / self._train_seen
            self.log("train/loss_epoch", loss_sum, on_step=False, on_epoch=True, sync_dist=True)
            self.log("train/acc1", correct, on_step=False, on_epoch=True, sync_dist=True)
            self._train_sums, self._train_seen = None, 0
        return loss

    def _bar_draws_batches(self) -> bool:
        """Whether the progress display redraws every batch (tqdm, rich on a terminal; not the epoch line)."""
        bar = self.trainer.progress_bar_callback
        return bar is not None and getattr(bar, "draws_batches", True)

    def _is_last_step(self, batch_idx: int) -> bool:
        """Whether this batch ends the fit by `trainer.max_steps` (its optimizer step is the last): a fit that stops
        mid-epoch still logs its epoch figures."""
        max_steps, accumulate = self.trainer.max_steps, self.trainer.accumulate_grad_batches
        return 0 < max_steps <= self.global_step + 1 and (batch_idx + 1) % accumulate == 0

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the epoch's running sums: a fit resumed mid-epoch then logs figures over the whole epoch."""
        sums = None if self._train_sums is None else self._train_sums.detach().cpu()
        checkpoint[TRAIN_SUMS_ENTRY] = {"sums": sums, "seen": self._train_seen}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        entry = checkpoint.get(TRAIN_SUMS_ENTRY) or {}
        self._train_sums, self._train_seen = entry.get("sums"), int(entry.get("seen", 0))

    def _note_nonfinite(self, loss: torch.Tensor) -> None:
        """Stop at a non-finite loss before the optimizer step uses it. On a CPU the check is free, and with
        `nonfinite_check_every=1` (a CPU run's) it happens at once; on a GPU it would cost a sync per step, so the
        first bad step is remembered on the device and checked every `nonfinite_check_every` steps
        (on_train_batch_end). A CPU run with a longer interval takes the GPU's way (the host-sync test counts it)."""
        if loss.device.type == "cpu" and self.hparams.nonfinite_check_every == 1:
            if not math.isfinite(float(loss.detach())):
                self._raise_nonfinite(self.global_step)
            return
        bad = ~torch.isfinite(loss.detach())
        step = torch.full((), self.global_step, device=loss.device)  # a fill, not a host-to-device copy
        if self._first_bad_step is None or self._first_bad_step.device != loss.device:
            self._first_bad_step = torch.full((), -1, dtype=torch.long, device=loss.device)
        self._first_bad_step = torch.where(bad & (self._first_bad_step < 0), step, self._first_bad_step)

    def _raise_nonfinite(self, step: int) -> None:
        raise NonFiniteLossError(
            f"non-finite training loss at step {step} (epoch {self.current_epoch}): training stopped; "
            "the last checkpoint of a finished epoch is kept. Lower optim.lr or check the data"
        )

    def epoch_number(self) -> float:
        """The `epoch` every logged row carries: the epoch in progress counted from 1, so the figures of the n-th epoch
        and the attention statistics measured after it share `epoch` n (0 is the initial model). Lightning's own
        default is the 0-based index."""
        return float(self.current_epoch + 1)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Check the flag every `nonfinite_check_every` steps and on an epoch's last batch, before any checkpoint.
        The epoch's figures (logged in training_step) get their `epoch` here: one hook may not log a name both per
        step and per epoch."""
        if self.trainer.is_last_batch:  # the same on every rank: nothing to reduce
            self.log("epoch", host_figure(self.epoch_number()), on_step=False, on_epoch=True)
        every = self.hparams.nonfinite_check_every
        if (self.global_step % every == 0 or self.trainer.is_last_batch) and self._first_bad_step is not None:
            first = int(self._first_bad_step)
            if first >= 0:
                self._raise_nonfinite(first)

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], split: str) -> None:
        """Loss and top-1/top-5 accuracy over images, each a batch-size-weighted mean over the epoch (so exactly the
        fraction of images right), kept on the device until the epoch's end."""
        images, labels = batch
        logits = self.evaluation_logits(images)
        loss = F.cross_entropy(logits, labels)
        hits = logits.topk(min(5, self.num_classes), dim=1).indices == labels[:, None]
        per_epoch = split != TEST  # the figures validated every epoch: `val` (held out) or `test_epoch`
        self.log(f"{split}/loss", loss, on_epoch=True, prog_bar=per_epoch, sync_dist=True)
        self.log(f"{split}/acc1", hits[:, 0].float().mean(), on_epoch=True, prog_bar=per_epoch, sync_dist=True)
        self.log(f"{split}/acc5", hits.any(dim=1).float().mean(), on_epoch=True, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        """The validated epoch's rows carry its number (after fit, test rows keep Lightning's)."""
        if not self.trainer.sanity_checking:
            self.log("epoch", host_figure(self.epoch_number()), on_epoch=True)

    def evaluation_logits(self, images: torch.Tensor) -> torch.Tensor:
        """Logits of an evaluation batch. A compiled model sees one batch size: a short last batch is padded with
        zero images up to the largest batch seen and their rows dropped (in eval mode each image's logits depend on
        that image alone), so the tail costs no recompilation. Eager models take the batch as it is."""
        rows = len(images)
        self._eval_rows = max(self._eval_rows, rows)
        if not self.hparams.get("compile_model", False) or rows == self._eval_rows:
            return self(images)
        padding = images.new_zeros((self._eval_rows - rows, *images.shape[1:]))
        return self(torch.cat([images, padding]))[:rows]

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, self.epoch_eval_prefix())

    def epoch_eval_prefix(self) -> str:
        """`val` when the datamodule holds out training images, else `test_epoch`: the figures say their split."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        return eval_prefix(int(getattr(datamodule, "val_size", 0) or 0))

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> dict[str, Any]:
        optim = self.optim
        betas = tuple(float(beta) for beta in optim["betas"])
        optimizer = adamw_with_decay_groups(self.model, float(optim["lr"]), float(optim["weight_decay"]), betas)
        trainer = self.trainer
        total = int(trainer.estimated_stepping_batches)
        epochs, per_epoch = trainer.max_epochs or 1, None
        if epochs == -1:  # no epoch limit (max_steps ends the run): the warm-up counts epochs of the loader's steps
            if trainer.num_training_batches == float("inf"):
                trainer.fit_loop.setup_data()  # as estimated_stepping_batches loads it when it needs the count
            per_epoch = max(1, math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches))
        warmup, floor = float(optim["warmup_epochs"]), float(optim["min_lr_ratio"])
        schedule = warmup_cosine_schedule(optimizer, total, epochs, warmup, floor, per_epoch)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
