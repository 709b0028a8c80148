"""The LightningModule: uint8 batches in, the protocol's CutMix and loss, AdamW with warm-up + cosine."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from vit_locality.augment.mixing import cutmix_batch
from vit_locality.model.vit import VisionTransformer


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; training stops before a checkpoint can store bad weights."""


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """LR multiplier: linear from 1/warmup to 1 over `warmup_steps`, then cosine down to `min_ratio`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def adamw_with_decay_groups(
    model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float]
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: not on biases, norms, the CLS token or the position embeddings."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    exempt = {"cls_token", "pos_embed"}
    groups = [
        {"params": [p for n, p in named if p.ndim >= 2 and n not in exempt], "weight_decay": weight_decay},
        {"params": [p for n, p in named if p.ndim < 2 or n in exempt], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def warmup_cosine_schedule(
    optimizer: torch.optim.Optimizer, total_steps: int, epochs: int, warmup_epochs: float, min_lr_ratio: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """`warmup_cosine` stepped per batch, the warm-up given in epochs of `total_steps / epochs` steps."""
    per_epoch = max(1, total_steps // max(1, epochs))
    warmup = min(total_steps, max(1, round(warmup_epochs * per_epoch)))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, warmup, total_steps, min_lr_ratio)
    )


class ViTClassifier(L.LightningModule):
    """Trains the ViT on one cell; every argument is a plain value so checkpoints load weights-only."""

    def __init__(
        self,
        num_classes: int,
        image_size: int,
        mean: list[float],
        std: list[float],
        model: dict[str, Any],
        cutmix: bool = False,
        cutmix_alpha: float = 1.0,
        cutmix_prob: float = 1.0,
        label_smoothing: float = 0.0,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        betas: tuple[float, float] = (0.9, 0.999),
        warmup_epochs: float = 5.0,
        min_lr_ratio: float = 0.0,
        nonfinite_check_every: int = 1,
        device_autoaugment: str | None = None,
        compile_model: bool = False,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self._first_bad_step: torch.Tensor | None = None
        self._train_sums: torch.Tensor | None = None  # (loss x images, correct) over the epoch so far
        self._train_seen = 0
        arch = {k: model[k] for k in ("depth", "dim", "heads", "mlp_ratio", "stem") if k in model}
        self.model = VisionTransformer(num_classes=num_classes, image_size=image_size, **arch)
        # aug.device=gpu: AutoAugment runs here, batched on the device, instead of per sample in the workers.
        self.device_autoaugment: torch.nn.Module | None = None
        if device_autoaugment:
            from vit_locality.augment.batched_autoaugment import BatchedAutoAugment

            self.device_autoaugment = BatchedAutoAugment(device_autoaugment)
        if compile_model:  # compiles __call__ only: the statistics' explicit attention path stays eager
            self.model.compile()
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1) * 255.0, persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1) * 255.0, persistent=False)

        # Plain top-k accuracy over images ("micro"); torchmetrics' default would average over classes.
        def accuracy(k: int) -> MulticlassAccuracy:
            return MulticlassAccuracy(num_classes, top_k=min(k, num_classes), average="micro")

        self.val_acc1, self.val_acc5 = accuracy(1), accuracy(5)
        self.test_acc1, self.test_acc5 = accuracy(1), accuracy(5)

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, 3, H, W) on the device -> normalised float, once per batch."""
        return (images.float() - self.mean) / self.std

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(self.preprocess(images))

    def training_loss(
        self, images: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The protocol's loss on one uint8 batch: CutMix when on, label smoothing once, in the loss.

        Returns the loss, the logits and the labels accuracy is measured against: the dominant label under CutMix
        (logged as `train/acc1` in every cell).
        """
        hp = self.hparams
        if self.device_autoaugment is not None:
            images = self.device_autoaugment(images)
        if hp.cutmix and self._mix_this_batch():
            mixed = cutmix_batch(images, labels, hp.num_classes, hp.cutmix_alpha)
            images, targets = mixed.images, mixed.targets
            reference = targets.argmax(dim=1)
        else:
            targets = reference = labels
        logits = self(images)
        loss = F.cross_entropy(logits, targets, label_smoothing=hp.label_smoothing)
        return loss, logits, reference

    def _mix_this_batch(self) -> bool:
        """CutMix on a batch with probability `cutmix_prob` (Yun et al.'s CIFAR recipe used 0.5). At 1, nothing is
        drawn, so runs with the default keep the random stream they always had."""
        prob = self.hparams.cutmix_prob
        return prob >= 1.0 or float(torch.rand(())) < prob

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, logits, reference = self.training_loss(*batch)
        self._note_nonfinite(loss)
        # Per-step self.log calls cost ~0.5 ms each on a small model: keep running sums on the device, log the
        # epoch figures once, and the step figures every log_every_n_steps (when Lightning writes them anyway).
        with torch.no_grad():
            sums = torch.stack([loss.detach().float() * len(reference), (logits.argmax(1) == reference).sum()])
            self._train_sums = sums if self._train_sums is None else self._train_sums + sums
            self._train_seen += len(reference)
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0:
            self.log("train/loss", loss, prog_bar=True)
            self.log("lr", self.optimizers().param_groups[0]["lr"])
            self.log("epoch", self.epoch_number())
        if self.trainer.is_last_batch:
            loss_sum, correct = self._train_sums / self._train_seen
            self.log("train/loss_epoch", loss_sum, on_step=False, on_epoch=True, sync_dist=True)
            self.log("train/acc1", correct, on_step=False, on_epoch=True, sync_dist=True)
            self._train_sums, self._train_seen = None, 0
        return loss

    def _note_nonfinite(self, loss: torch.Tensor) -> None:
        """Stop at a non-finite loss before the optimizer step uses it. On a CPU the check is free; on a GPU it
        would cost a sync per step, so the first bad step is remembered on the device and checked every
        `nonfinite_check_every` steps (on_train_batch_end)."""
        if loss.device.type == "cpu":
            if not math.isfinite(float(loss.detach())):
                self._raise_nonfinite(self.global_step)
            return
        bad = ~torch.isfinite(loss.detach())
        step = torch.tensor(self.global_step, device=loss.device)
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
        if self.trainer.is_last_batch:
            self.log("epoch", self.epoch_number(), on_step=False, on_epoch=True, sync_dist=True)
        every = self.hparams.nonfinite_check_every
        if (self.global_step % every == 0 or self.trainer.is_last_batch) and self._first_bad_step is not None:
            first = int(self._first_bad_step)
            if first >= 0:
                self._raise_nonfinite(first)

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], split: str, acc1, acc5) -> None:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        self.log(f"{split}/loss", loss, on_epoch=True, prog_bar=split == "val", sync_dist=True)
        acc1(logits, labels)
        acc5(logits, labels)
        self.log(f"{split}/acc1", acc1, on_epoch=True, prog_bar=split == "val")
        self.log(f"{split}/acc5", acc5, on_epoch=True)
        if split == "val":  # after fit, current_epoch already counts the epochs run: test rows keep Lightning's
            self.log("epoch", self.epoch_number(), on_epoch=True, sync_dist=True)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_acc1, self.val_acc5)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_acc1, self.test_acc5)

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        optimizer = adamw_with_decay_groups(self.model, hp.lr, hp.weight_decay, tuple(hp.betas))
        total = int(self.trainer.estimated_stepping_batches)
        schedule = warmup_cosine_schedule(
            optimizer, total, self.trainer.max_epochs or 1, hp.warmup_epochs, hp.min_lr_ratio
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
