"""Count the ops that would force a device-to-host synchronisation on a GPU, on any device (a CPU included).

On a GPU the host queues kernels ahead of the device; an op whose result the host must read (a Python number from
a tensor, an output whose size depends on the data) makes the host wait until the device has caught up, once per
occurrence. On a CPU nothing waits, so such ops cost nothing there and creep in unseen. `HostSyncCounter` is a
`TorchDispatchMode` that records each one with its cause, the first Python frame outside torch that asked for it,
so a CPU test can hold the GPU path to none.

Counted: `aten._local_scalar_dense` (`.item()`, `float()`, `int()`, `bool()` of a tensor), the data-dependent-size
ops (`nonzero`, `masked_select`, `unique` and its variants, `repeat_interleave` without an output size, `bincount`,
indexing or index-assigning with a boolean mask), `aten.equal`, and the Python-level reads that dispatch no aten
op when the tensor already is on the CPU: `Tensor.tolist()`, `.cpu()`, `.numpy()` (patched while counting).

`count_cell` counts the host syncs per training step of every cell on the on-device data path over real Lightning
training steps (`Trainer.fit` on the CPU: the counter sees on a CPU what would stall a GPU).

A step's segment runs from one `on_train_batch_start` to the next, so it holds the step itself, its hooks and the
fetch of the next batch (Lightning fetches one ahead; the on-device loader augments there); the first step's also
holds the first batch's fetch. The non-finite check runs every `CHECK_EVERY` steps as on a GPU, and Lightning logs
every `LOG_EVERY` steps: those steps may add the syncs named in `ALLOWED`, the others must add none. AutoAugment
runs sync-free (`select`), as on a GPU: a CPU run groups by default, its host reads being free.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from helpers import compose_config
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode

import vit_locality.augment.batched_autoaugment as batched
from vit_locality.run.builders import build_datamodule, build_module

_aten = torch.ops.aten
# Ops whose result the host must read, whatever their arguments.
SYNC_OPS = {
    _aten._local_scalar_dense.default: "item",
    _aten.nonzero.default: "nonzero",
    _aten.masked_select.default: "masked_select",
    _aten._unique.default: "unique",
    _aten._unique2.default: "unique",
    _aten.unique_dim.default: "unique",
    _aten.unique_consecutive.default: "unique_consecutive",
    _aten.repeat_interleave.Tensor: "repeat_interleave",
    _aten.bincount.default: "bincount",
    _aten.equal.default: "equal",
    _aten.is_nonzero.default: "item",
}
_INDEX_OPS = {_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default, _aten._index_put_impl_.default}
_PATCHED = ("tolist", "cpu", "numpy")
_TORCH_DIR = str(Path(torch.__file__).parent) + "/"
_HERE = __file__


def _bool_index(args: tuple) -> bool:
    """Indexing with a boolean mask: its output size is the mask's count, read by the host."""
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


def _cause(skip: int = 2) -> str:
    """`file:line function` of the first frame outside torch and this module: the code that asked for the read."""
    frame = sys._getframe(skip)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TORCH_DIR) and name != _HERE:
            parts = Path(name).parts
            short = "/".join(parts[-3:]) if "vit_locality" in parts else "/".join(parts[-2:])
            return f"{short}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "unknown"


def _in_torch_optim(skip: int = 2) -> bool:
    """Whether torch.optim itself asked (an optimizer's own code, not a step that merely runs inside its closure)."""
    frame = sys._getframe(skip)
    while frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR):
        if frame.f_code.co_filename.startswith(_TORCH_DIR + "optim/"):
            return True
        frame = frame.f_back
    return False


class HostSyncCounter(TorchDispatchMode):
    """`with HostSyncCounter() as syncs: ...`; `syncs.events` lists (op, cause) in order, `syncs.by_cause()` counts.

    `host_resident(tensor)` says which tensors live on the host even in a GPU run: reading them is no sync, so they
    are not counted. A 0-dim float read inside torch.optim is one such (AdamW's step count, which torch keeps on the
    CPU unless capturable) and is never counted. `mark(label)` starts a new segment (a step),
    whose events `segments[label]` holds."""

    def __init__(self, host_resident: Callable[[torch.Tensor], bool] | None = None) -> None:
        super().__init__()
        self.host_resident = host_resident or (lambda tensor: False)
        self.events: list[tuple[str, str]] = []
        self.segments: dict[Any, list[tuple[str, str]]] = {}
        self._segment: list[tuple[str, str]] | None = None
        self._saved: dict[str, Any] = {}

    def mark(self, label: Any) -> None:
        self._segment = self.segments.setdefault(label, [])

    def _record(self, op: str, cause: str) -> None:
        self.events.append((op, cause))
        if self._segment is not None:
            self._segment.append((op, cause))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's signature
        name = SYNC_OPS.get(func)
        if name is None and func in _INDEX_OPS and _bool_index(args):
            name = "boolean mask index"
        if name is not None:
            first = args[0] if args else None
            host = isinstance(first, torch.Tensor) and self.host_resident(first)
            if not host and not (name == "item" and _in_torch_optim() and _optimizer_scalar(first)):
                self._record(name, _cause())
        return func(*args, **(kwargs or {}))

    def __enter__(self) -> HostSyncCounter:
        counter = self
        for attr in _PATCHED:
            original = getattr(torch.Tensor, attr)
            self._saved[attr] = original

            def patched(tensor: torch.Tensor, *args: Any, _original=original, _attr=attr, **kwargs: Any) -> Any:
                if not counter.host_resident(tensor):
                    counter._record(_attr, _cause())
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, attr, patched)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for attr, original in self._saved.items():
            setattr(torch.Tensor, attr, original)
        self._saved.clear()
        return super().__exit__(*exc)

    def by_cause(self, events: Iterable[tuple[str, str]] | None = None) -> Counter[str]:
        """{"op at cause": count} over `events` (all by default)."""
        return Counter(f"{op} at {cause}" for op, cause in (self.events if events is None else events))


def _optimizer_scalar(tensor: Any) -> bool:
    """A 0-dim float tensor read inside torch.optim: the step count torch keeps on the host unless capturable."""
    return isinstance(tensor, torch.Tensor) and tensor.ndim == 0 and tensor.is_floating_point()


# ---- every cell's training steps, counted ------------------------------------------------------------------

# The 8 cells (aug.autoaug x aug.cutmix x loss.ls), then CutMix on half the batches, then MixUp.
CELLS: dict[str, tuple[str, ...]] = {
    f"aa{int(aa)}_cm{int(cm)}_ls{int(ls)}": (f"aug.autoaug={aa}", f"aug.cutmix={cm}", f"loss.ls={0.1 if ls else 0}")
    for aa in (False, True)
    for cm in (False, True)
    for ls in (False, True)
} | {
    "aa1_cm0.5_ls1": ("aug.autoaug=true", "aug.cutmix=true", "aug.cutmix_prob=0.5", "loss.ls=0.1"),
    "aa0_mixup_ls0": ("aug.autoaug=false", "aug.cutmix=false", "aug.mixup=true", "loss.ls=0"),
}
BATCH, STEPS = 8, 8  # one epoch of 8 steps
CHECK_EVERY, LOG_EVERY = 4, 3
# Syncs a step may have, by the function that asks: the periodic non-finite check, Lightning's logging. On the
# first step only, reads of tensors that are on the host in a GPU run too (no sync there): torchvision's AutoAugment
# magnitude tables (read once per process, then cached).
ALLOWED = ("on_train_batch_end", "to_item")
ALLOWED_FIRST = ("_magnitude",)


class _Steps(Callback):
    """Start a counter segment at every training step and one for what follows training (teardown)."""

    def __init__(self, counter: HostSyncCounter) -> None:
        self.counter = counter

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.counter.mark(0)  # the first batch's fetch belongs to the first step

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.counter.mark(batch_idx)

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.counter.mark("after")


def count_cell(overrides: tuple[str, ...], model: str = "vit_tiny") -> list[Counter[str]]:
    """Per training step, {"op at cause": count} of one epoch of `STEPS` steps of the cell on on-device data."""
    cfg = compose_config(
        [
            "data=synthetic",
            f"model={model}",
            "trainer=cpu",
            *overrides,
            "data.on_device=true",
            f"data.train_size={BATCH * STEPS}",
            "data.test_size=16",
            f"data.batch_size={BATCH}",
            "data.num_workers=0",
            "model.compile=false",
        ]
    )
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    module.hparams.nonfinite_check_every = CHECK_EVERY  # the GPU's way: a flag on the device, read now and then
    counter = HostSyncCounter()
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        log_every_n_steps=LOG_EVERY,
        callbacks=[_Steps(counter)],
    )
    torch.manual_seed(0)
    gpu_grouping = {"cpu": "select"}  # count the AutoAugment a GPU runs (a CPU groups: its host reads are free)
    saved, batched.GROUPING_BY_DEVICE = batched.GROUPING_BY_DEVICE, gpu_grouping
    try:
        with counter:
            trainer.fit(module, datamodule=datamodule)
    finally:
        batched.GROUPING_BY_DEVICE = saved
    return [counter.by_cause(counter.segments.get(step, [])) for step in range(STEPS)]


def expected_steps(step: int) -> bool:
    """Whether training step `step` (0-based) may sync: a non-finite check or a logging step."""
    global_step = step + 1  # after the optimizer step, when on_train_batch_end runs
    return global_step % CHECK_EVERY == 0 or (step + 1) % LOG_EVERY == 0 or step == STEPS - 1


def unexpected(counts: list[Counter[str]]) -> list[tuple[int, str]]:
    """(step, "op at cause") of every sync outside the allowed ones on the steps that may have them."""
    found = []
    for step, counter in enumerate(counts):
        for cause in counter:
            allowed = expected_steps(step) and any(cause.endswith(f" {name}") for name in ALLOWED)
            allowed = allowed or (step == 0 and any(cause.endswith(f" {name}") for name in ALLOWED_FIRST))
            if not allowed:
                found.append((step, cause))
    return found


def summary(counts: list[Counter[str]]) -> tuple[float, float, Counter[str]]:
    """(syncs per step over the epoch, per step on the steps that may have none, the causes on those steps). The
    quiet steps leave out the first (it also fetches the first batch and fills one-time caches)."""
    quiet = [step for step in range(1, STEPS) if not expected_steps(step)]
    causes: Counter[str] = sum((counts[step] for step in quiet), Counter())
    total = sum(sum(counter.values()) for counter in counts)
    return total / STEPS, sum(causes.values()) / len(quiet), causes


def main() -> None:
    """Print every cell's syncs per step: `python tests/host_syncs.py`."""
    for name, overrides in CELLS.items():
        counts = count_cell(overrides)
        mean, quiet, causes = summary(counts)
        extra = len(unexpected(counts))
        print(f"{name}: {mean:.2f} per step, {quiet:.2f} on quiet steps, {extra} unexpected; {dict(causes)}")
        print(name, file=sys.stderr)
        for step, counter in enumerate(counts):
            print(f"  step {step}: {dict(counter)}", file=sys.stderr)


if __name__ == "__main__":
    main()
