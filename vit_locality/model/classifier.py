"""The LightningModule: uint8 batches, the protocol's mixing and loss, AdamW; plain-dict settings (weights-only).

With `model.compile` the training step is one graph (`fullgraph=True`, static shapes); its draws come from torch's
default generator, reseeded every batch, but inductor's stream differs from eager's (same distributions)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import lightning as L
import torch
import torch.nn.functional as F

from vit_locality.augment.mixing import fixed_batches, mix_batch
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.config.schema import OptimConfig
from vit_locality.config.settings import TEST, eval_prefix
from vit_locality.errors import VitLocalityError
from vit_locality.model.vit import VisionTransformer

StepFunction = Callable[..., tuple[torch.Tensor, ...]]
TRAIN_SUMS_ENTRY = "train_running_sums"  # the checkpoint's entry of the epoch's (loss x images, correct) so far


class StepAugment(Protocol):
    """A batch augmentation the step runs (data/on_device.py's BatchAugment), its tables built before the first."""

    def __call__(self, images: torch.Tensor, generator: None, world: int, rank: int) -> torch.Tensor: ...

    def prepare(self, device: torch.device, height: int, width: int) -> None: ...


@dataclass(frozen=True)
class CompileChoice:
    """How a cell compiles its step: torch.compile's `mode` and the reason, printed in the run's first lines."""

    mode: str
    reason: str

    def line(self) -> str:
        return f"compile: the whole training step as one graph, mode={self.mode} ({self.reason})"


def compile_choice(device_type: str, world_size: int) -> CompileChoice:
    """CUDA graphs (`reduce-overhead`) on CUDA with one process: DDP's all-reduce runs outside the graph."""
    if device_type != "cuda":
        return CompileChoice("default", f"CUDA graphs need a CUDA device, this cell trains on {device_type}")
    if world_size > 1:
        return CompileChoice("default", f"{world_size} processes: DDP's gradient all-reduce cannot be captured")
    return CompileChoice("reduce-overhead", "CUDA, one process, static shapes, no host read in the step")


def compiled(function: StepFunction, choice: CompileChoice) -> StepFunction:
    """`function` compiled whole: a graph break is an error (fullgraph), each input shape is fixed (dynamic=False)."""
    graph = torch.compile(function, fullgraph=True, dynamic=False, mode=choice.mode)
    if choice.mode != "reduce-overhead":
        return graph

    def replay(*args: object) -> tuple[torch.Tensor, ...]:
        torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs are no longer read
        return graph(*args)

    return replay


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """LR multiplier: linear from 1/warmup to 1 over `warmup_steps`, then cosine down to `min_ratio`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def adamw_with_decay_groups(
    model: torch.nn.Module,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    cell_axes: int = 0,
    foreach: bool | None = None,
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: not on biases, norms, nor the model's `no_weight_decay()`;
    `cell_axes` leading axes (a pack's cell axis, model/fused.py) do not count towards a matrix."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    exempt = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()
    matrix = [p.ndim - cell_axes >= 2 and n not in exempt for n, p in named]
    groups = [
        {"params": [p for (_, p), decayed in zip(named, matrix, strict=True) if decayed], "weight_decay": weight_decay},
        {"params": [p for (_, p), decayed in zip(named, matrix, strict=True) if not decayed], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, foreach=foreach)


def warmup_cosine_schedule(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    epochs: int,
    warmup_epochs: float,
    min_lr_ratio: float,
    steps_per_epoch: int | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """`warmup_cosine` stepped per batch, the warm-up in epochs of `steps_per_epoch` (default total_steps / epochs)."""
    per_epoch = steps_per_epoch or max(1, total_steps // max(1, epochs))
    warmup = min(total_steps, max(1, round(warmup_epochs * per_epoch)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup, total_steps, min_lr_ratio))


class NonFiniteLossError(VitLocalityError, RuntimeError):
    """The training loss became NaN or infinite; training stops before a checkpoint can store bad weights."""

    exit_code = 3


def host_figure(value: float) -> torch.Tensor:
    """A logged figure as a host tensor: Lightning would put a Python number on the model's device (a GPU copy)."""
    return torch.tensor(float(value))


class ViTClassifier(L.LightningModule):
    """Trains the ViT (`model`: its keyword arguments) on one cell's `protocol` with the `optim` section."""

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
        batch_augment: StepAugment | None = None,
    ) -> None:
        super().__init__()
        given = protocol or {}
        self.protocol = given if isinstance(given, TrainingProtocol) else TrainingProtocol.from_record(given)
        self.optim = dict(optim or OptimConfig().model_dump())  # a module built by hand: the section's defaults
        self.num_classes = num_classes
        data = {"num_classes": num_classes, "image_size": image_size, "mean": list(mean), "std": list(std)}
        settings = {"model": dict(model), "protocol": self.protocol.model_dump(), "optim": self.optim}
        checks = {"nonfinite_check_every": nonfinite_check_every, "compile_model": compile_model}
        self.save_hyperparameters(data | settings | checks)
        self._first_bad_step: torch.Tensor | None = None
        self._train_sums: torch.Tensor | None = None  # (loss x images, correct) over the epoch so far
        self._train_seen = 0
        self._eval_rows = 0  # the largest evaluation batch seen: a compiled model's one evaluation shape
        self.model = VisionTransformer(num_classes=num_classes, image_size=image_size, **model)
        self.device_autoaugment: torch.nn.Module | None = None  # aug.device=gpu: batched AutoAugment on the device
        if self.protocol.batched_autoaugment:
            from vit_locality.augment.batched_autoaugment import BatchedAutoAugment

            self.device_autoaugment = BatchedAutoAugment(self.protocol.policy)
        # On-device data with a compiled step: the loader's augmentation, run inside the step's graph instead.
        self.batch_augment = batch_augment
        self._train_graph: StepFunction | None = None  # compile_step: the whole training step, one graph
        self._eval_graph: StepFunction | None = None  # and the evaluation forward, one shape
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1) * 255.0, persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1) * 255.0, persistent=False)

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, 3, H, W) on the device -> normalised float, once per batch."""
        return (images.float() - self.mean) / self.std

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(self.preprocess(images))

    def compile_step(self, choice: CompileChoice | None = None) -> CompileChoice:
        """Compile the training step and the evaluation forward (`model.compile`); the explicit attention path stays
        eager."""
        if choice is None:
            world = self._trainer.world_size if self._trainer is not None else 1
            choice = compile_choice(self.device.type, world)
        if self.device_autoaugment is not None:
            self.device_autoaugment.grouping = "select"  # no host read: the step stays one graph
        self._train_graph = compiled(self.augmented_loss, choice)
        self._eval_graph = compiled(self.forward, choice)
        return choice

    def on_fit_start(self) -> None:
        """Build the step's per-device tables before the first step, so the compiled step looks them up."""
        size = int(self.hparams.image_size)
        if self.batch_augment is not None:
            self.batch_augment.prepare(self.device, size, size)
        if self.device_autoaugment is not None:
            from vit_locality.augment.batched_autoaugment import prepare

            prepare(self.protocol.policy, self.device, size, size)

    def training_loss(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(loss, logits, labels for accuracy: a mixed batch's dominant ones) of the protocol on one uint8 batch."""
        trainer = self._trainer
        if fixed_batches(trainer):  # Lightning overfits: the same images every epoch, neither augmented nor mixed
            logits = self(images)
            return F.cross_entropy(logits, labels, label_smoothing=self.protocol.ls), logits, labels
        # under DDP each rank takes its rows of the global batch's draws
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        if self.hparams.get("compile_model", False) and self._train_graph is None:
            self.compile_step()
        step = self._train_graph or self.augmented_loss
        return step(images, labels, world, rank)

    def augmented_loss(
        self, images: torch.Tensor, labels: torch.Tensor, world: int = 1, rank: int = 0
    ) -> tuple[torch.Tensor, ...]:
        """The step's arithmetic, no host read: the protocol's batch, the model and the smoothed loss."""
        images, targets, reference = self.protocol_batch(images, labels, world, rank)
        logits = self(images)
        return F.cross_entropy(logits, targets, label_smoothing=self.protocol.ls), logits, reference

    def protocol_batch(
        self, images: torch.Tensor, labels: torch.Tensor, world: int = 1, rank: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(images, loss targets, accuracy labels) after the augmentation on the device and the mixing; its draws
        from torch's default generator (the cell reseeds it every batch). A pack (model/fused.py) calls it per cell."""
        if self.batch_augment is not None:
            images = self.batch_augment(images, None, world, rank)
        if self.device_autoaugment is not None:
            images = self.device_autoaugment(images, world, rank)
        return mix_batch(images, labels, self.num_classes, self.protocol)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, logits, reference = self.training_loss(*batch)
        self._note_nonfinite(loss)
        # self.log costs ~0.5 ms a call: running sums stay on the device, step figures every log_every_n_steps.
        with torch.no_grad():
            sums = torch.stack([loss.detach().float() * len(reference), (logits.argmax(1) == reference).sum()])
            self._train_sums = sums if self._train_sums is None else self._train_sums.to(sums.device) + sums
            self._train_seen += len(reference)
        if (self.global_step + 1) % self.trainer.log_every_n_steps == 0:
            # On the bar only when it redraws every batch: Lightning reads bar figures on the host at every batch end.
            bar = self.trainer.progress_bar_callback
            self.log("train/loss", loss, prog_bar=bar is not None and getattr(bar, "draws_batches", True))
            self.log("lr", host_figure(self.optimizers().param_groups[0]["lr"]))
            self.log("epoch", host_figure(self.epoch_number()))
        if self.trainer.is_last_batch or self._is_last_step(batch_idx):
            loss_sum, correct = self._train_sums / self._train_seen
            self.log("train/loss_epoch", loss_sum, on_step=False, on_epoch=True, sync_dist=True)
            self.log("train/acc1", correct, on_step=False, on_epoch=True, sync_dist=True)
            self._train_sums, self._train_seen = None, 0
        return loss

    def _is_last_step(self, batch_idx: int) -> bool:
        """Whether this batch's optimizer step is the fit's last by `trainer.max_steps` (it logs the epoch figures)."""
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
        """Stop at a non-finite loss: at once on a CPU checking every step, else via a device flag (no GPU sync)."""
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
        """The logged `epoch`, from 1: the n-th epoch's figures share it with the statistics measured after it."""
        return float(self.current_epoch + 1)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Log the epoch's `epoch` on its last batch; check the non-finite flag then and every few steps."""
        if self.trainer.is_last_batch:  # the same on every rank: nothing to reduce
            self.log("epoch", host_figure(self.epoch_number()), on_step=False, on_epoch=True)
        every = self.hparams.nonfinite_check_every
        if (self.global_step % every == 0 or self.trainer.is_last_batch) and self._first_bad_step is not None:
            first = int(self._first_bad_step)
            if first >= 0:
                self._raise_nonfinite(first)

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], split: str) -> None:
        """Loss and top-1/top-5 accuracy, batch-size-weighted means over the epoch kept on the device until its end."""
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
        """Evaluation logits; a compiled model pads a short batch with zero images to its one shape (no recompile)."""
        rows = len(images)
        self._eval_rows = max(self._eval_rows, rows)
        if self.hparams.get("compile_model", False) and self._eval_graph is None:
            self.compile_step()
        forward = self._eval_graph or self
        if not self.hparams.get("compile_model", False) or rows == self._eval_rows:
            return forward(images)
        padding = images.new_zeros((self._eval_rows - rows, *images.shape[1:]))
        return forward(torch.cat([images, padding]))[:rows]

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        """Figures under `val` when the datamodule holds out training images, else under `test_epoch`."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        self._evaluate(batch, eval_prefix(int(getattr(datamodule, "val_size", 0) or 0)))

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
