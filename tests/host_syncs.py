"""Count the ops that would force a device-to-host synchronisation on a GPU, on any device (a CPU included).

On a GPU the host queues kernels ahead of the device; an op whose result the host must read (a Python number from
a tensor, an output whose size depends on the data) makes the host wait until the device has caught up, once per
occurrence. On a CPU nothing waits, so such ops cost nothing there and creep in unseen. `HostSyncCounter` is a
`TorchDispatchMode` that records each one with its cause, the first Python frame outside torch that asked for it,
so a CPU test can hold the GPU path to none.

Counted, as reads: `aten._local_scalar_dense` (`.item()`, `float()`, `int()`, `bool()` of a tensor), the
data-dependent-size ops (`nonzero`, `masked_select`, `unique` and its variants, `repeat_interleave` without an
output size, `bincount`, indexing or index-assigning with a boolean mask), `aten.equal`, and the Python-level reads that
dispatch no aten op when the tensor already is on the CPU: `Tensor.tolist()`, `.cpu()`, `.numpy()` (patched while
counting). Counted
as copies: a tensor made from Python values on the compute device (`torch.tensor(values, device=...)`,
`torch.as_tensor`), which on a GPU is a host-to-device copy from pageable memory, a stream sync (torch.optim's own
host-side step counts excepted). Python numbers passed to an op (`x * 2.5`) travel as kernel arguments and are not
counted. Host tensors are followed, so reading them counts nothing, as on a GPU: what `.cpu()` returns, a tensor
made from Python values with no device named, and whatever is computed from host tensors alone.

`count_cell` counts them over the real cell as a GPU runs it, on the CPU: the project's Trainer, callbacks, CSV logger
and default progress line, bf16 autocast, on-device data, validation every epoch and the attention statistics at
their schedule (`Trainer.fit`: the counter sees on a CPU what would stall a GPU). AutoAugment runs sync-free
(`select`), as on a GPU: a CPU run groups by default, its host reads being free. Left out: `model.compile` (its
graphs are tested in tests/model/test_compile_graph.py).

A step's segment runs from one `on_train_batch_start` to the next, so it holds the step itself, its hooks and the
fetch of the next batch (Lightning fetches one ahead; the on-device loader augments there); the first step's also
holds the first batch's fetch. Lightning logs every `LOG_EVERY` steps and the non-finite flag is read then, as on a
GPU, and at every epoch's end: those steps may add the events named in `ALLOWED`, the others must add none; nor
may a validation batch. `per_gpu_step` projects the events per step onto a GPU run's schedule.
"""

from __future__ import annotations

import sys
import weakref
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
_MADE_FROM_VALUES = ("tensor", "as_tensor")  # torch.tensor(values, device=...): the values copied to the device
_TORCH_DIR = str(Path(torch.__file__).parent) + "/"
_REPO = Path(__file__).resolve().parents[1]  # causes in the checkout read as repository paths
_HERE = __file__


def _tensors(tree: Any) -> list[Any]:
    """The tensors in nested tuples, lists and dicts (an op's arguments or outputs)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (tuple, list)):
        return [t for item in tree for t in _tensors(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _tensors(item)]
    return []


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
            path = Path(name)
            short = path.relative_to(_REPO) if path.is_relative_to(_REPO) else Path(*path.parts[-2:])
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
        self._host: dict[int, weakref.ref] = {}  # tensors a GPU run also keeps on the host, by id

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
            host = isinstance(first, torch.Tensor) and self._on_host(first)
            if not host and not (name == "item" and _in_torch_optim() and _optimizer_scalar(first)):
                self._record(name, _cause())
        out = func(*args, **(kwargs or {}))
        inputs = [t for t in _tensors((args, kwargs)) if isinstance(t, torch.Tensor)]
        if inputs and all(self._on_host(t) for t in inputs):  # computed from host tensors only: on the host too
            for tensor in _tensors(out):
                self._keep_on_host(tensor)
        return out

    def _on_host(self, tensor: torch.Tensor) -> bool:
        known = self._host.get(id(tensor))
        return (known is not None and known() is tensor) or self.host_resident(tensor)

    def _keep_on_host(self, tensor: Any) -> None:
        if isinstance(tensor, torch.Tensor):
            self._host[id(tensor)] = weakref.ref(tensor)

    def __enter__(self) -> HostSyncCounter:
        counter = self
        for attr in _PATCHED:
            original = getattr(torch.Tensor, attr)
            self._saved[attr] = (torch.Tensor, original)

            def patched(tensor: torch.Tensor, *args: Any, _original=original, _attr=attr, **kwargs: Any) -> Any:
                if not counter._on_host(tensor):
                    counter._record(_attr, _cause())
                out = _original(tensor, *args, **kwargs)
                if out is tensor:  # `.cpu()` of a CPU tensor is itself: a copy here, as on a GPU, to follow it apart
                    out = tensor.clone()
                counter._keep_on_host(out)
                return out

            setattr(torch.Tensor, attr, patched)
        for attr in _MADE_FROM_VALUES:
            original = getattr(torch, attr)
            self._saved[attr] = (torch, original)

            def made(*args: Any, _original=original, **kwargs: Any) -> Any:
                out = _original(*args, **kwargs)
                if kwargs.get("device") is None or isinstance(args[0] if args else None, torch.Tensor):
                    counter._keep_on_host(out)  # no device asked for: a host tensor by design (or a tensor as it is)
                elif not _in_torch_optim():
                    counter._record("from Python values", _cause())  # a copy from pageable memory on a GPU
                return out

            setattr(torch, attr, made)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for attr, (owner, original) in self._saved.items():
            setattr(owner, attr, original)
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
BATCH, STEPS, EPOCHS, EVAL_BATCHES = 8, 8, 2, 2  # two epochs of 8 steps, each validated on 2 batches
LOG_EVERY = 3  # Lightning's logging steps; on a GPU the non-finite flag is read at the same steps (run/builders.py)
# The schedule of a GPU run of the paper cell: logging (and the flag's read) every 50 steps (conf/trainer/default.yaml),
# 390 steps of 128 and 20 evaluation batches of 512 per CIFAR epoch.
GPU_LOG_EVERY, GPU_STEPS_PER_EPOCH, GPU_EVAL_BATCHES = 50, 390, 20
# Syncs a step may have, by the function that asks: the periodic non-finite check, Lightning's logging. On the
# first step only, reads of tensors that are on the host in a GPU run too (no sync there): torchvision's AutoAugment
# magnitude tables (read once per process, then cached).
ALLOWED = ("on_train_batch_end", "to_item")
ALLOWED_FIRST = ("_magnitude",)


class _Steps(Callback):
    """Start a counter segment at every training step (its global index), every validation batch (("val", epoch,
    index)) and what follows an epoch's validation (("epoch end", epoch): the epoch's figures, the statistics)."""

    def __init__(self, counter: HostSyncCounter) -> None:
        self.counter = counter

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.counter.mark(0)  # the first batch's fetch belongs to the first step

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.counter.mark(trainer.global_step)

    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        self.counter.mark(("val", trainer.current_epoch, args[1] if len(args) > 1 else kwargs.get("batch_idx")))

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        batch_idx = args[2] if len(args) > 2 else kwargs.get("batch_idx")
        if batch_idx + 1 == trainer.num_val_batches[0]:  # Lightning reads the epoch's figures after the last one
            self.counter.mark(("epoch end", trainer.current_epoch))

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.counter.mark("after")


def cell_config(overrides: tuple[str, ...], model: str = "vit_tiny") -> list[str]:
    """The cell as a GPU runs it, on the CPU: on-device data, bf16 autocast, the default progress line (stderr is
    no terminal under pytest), validation every epoch, the attention statistics at their schedule."""
    return [
        "data=synthetic",
        f"model={model}",
        "trainer=cpu",
        *overrides,
        "data.on_device=true",
        f"data.train_size={BATCH * STEPS}",
        f"data.test_size={BATCH * EVAL_BATCHES}",
        f"data.batch_size={BATCH}",
        f"data.eval_batch_size={BATCH}",
        "data.num_workers=0",
        "model.compile=false",
        "trainer.precision=bf16-mixed",
        f"trainer.max_epochs={EPOCHS}",
        f"trainer.log_every_n_steps={LOG_EVERY}",
        "callbacks.progress_bar=tqdm",
        f"stats.probe_size={BATCH * EVAL_BATCHES}",
        "stats.pictures=false",
    ]


def count_cell(overrides: tuple[str, ...], run_dir: Path, model: str = "vit_tiny") -> dict[Any, Counter[str]]:
    """Per segment (_Steps), {"op at cause": count} of the real cell's fit: the project's Trainer, callbacks and
    CSV logger, on on-device data, with AutoAugment's GPU grouping (`select`)."""
    from vit_locality.precheck.gate import settings_from
    from vit_locality.run.builders import build_loggers, build_trainer
    from vit_locality.train import cell_callbacks

    settings = settings_from(compose_config(cell_config(overrides, model)), machine=False)
    datamodule = build_datamodule(settings)
    module = build_module(settings, datamodule)
    module.hparams.nonfinite_check_every = LOG_EVERY  # the GPU's way: a flag on the device, read at logging steps
    counter = HostSyncCounter()
    callbacks = [*cell_callbacks(settings, run_dir), _Steps(counter)]
    trainer = build_trainer(settings, run_dir, build_loggers(settings, run_dir), callbacks, sanity_check=False)
    torch.manual_seed(0)
    gpu_grouping = {"cpu": "select"}  # count the AutoAugment a GPU runs (a CPU groups: its host reads are free)
    saved, batched.GROUPING_BY_DEVICE = batched.GROUPING_BY_DEVICE, gpu_grouping
    try:
        with counter:
            trainer.fit(module, datamodule=datamodule)
    finally:
        batched.GROUPING_BY_DEVICE = saved
    return {label: counter.by_cause(events) for label, events in counter.segments.items()}


def steps(counts: dict[Any, Counter[str]]) -> list[Counter[str]]:
    """The training steps' segments, in order."""
    return [counts.get(step, Counter()) for step in range(STEPS * EPOCHS)]


def logging_step(step: int) -> bool:
    """Lightning logs, and the non-finite flag is read, after this step (0-based, counted over the fit)."""
    return (step + 1) % LOG_EVERY == 0


def last_step(step: int) -> bool:
    return (step + 1) % STEPS == 0  # the epoch's figures are logged and the flag read before its checkpoint


def quiet_step(step: int) -> bool:
    """A step with neither a logging step's nor an epoch's last step's work (the first fills one-time caches)."""
    return step > 0 and not logging_step(step) and not last_step(step)


def unexpected(counts: dict[Any, Counter[str]]) -> list[tuple[Any, str]]:
    """(segment, "op at cause") of every event a GPU would wait for outside the allowed places: any in a quiet
    step or a validation batch, and on a logging or check step any but the allowed causes."""
    found = []
    for step, counter in enumerate(steps(counts)):
        for cause in counter:
            allowed = not quiet_step(step) and any(cause.endswith(f" {name}") for name in ALLOWED)
            allowed = allowed or (step == 0 and any(cause.endswith(f" {name}") for name in ALLOWED_FIRST))
            if not allowed:
                found.append((step, cause))
    found += [
        (label, cause) for label, c in counts.items() if isinstance(label, tuple) and label[0] == "val" for cause in c
    ]
    return found


def _total(counts: dict[Any, Counter[str]], kind: str) -> int:
    return sum(c.total() for label, c in counts.items() if isinstance(label, tuple) and label[0] == kind)


def per_gpu_step(counts: dict[Any, Counter[str]]) -> float:
    """Events per training step at a GPU run's schedule, projected from the counted one: a logging step's own at
    its GPU interval; an epoch's last step's, its end (statistics, checkpoint) and its evaluation batches over a
    CIFAR epoch's steps."""
    train = steps(counts)
    mean = lambda values: sum(values) / len(values) if values else 0.0  # noqa: E731
    quiet = mean([train[s].total() for s in range(len(train)) if quiet_step(s)])  # what every step has
    logged = mean([train[s].total() for s in range(1, len(train)) if logging_step(s) and not last_step(s)]) - quiet
    last = mean([train[s].total() for s in range(len(train)) if last_step(s)]) - quiet
    per_epoch = last + _total(counts, "epoch end") / EPOCHS
    per_eval_batch = _total(counts, "val") / (EPOCHS * EVAL_BATCHES)
    return quiet + logged / GPU_LOG_EVERY + (per_epoch + per_eval_batch * GPU_EVAL_BATCHES) / GPU_STEPS_PER_EPOCH


def summary(counts: dict[Any, Counter[str]]) -> tuple[float, float, Counter[str]]:
    """(events per step at a GPU's schedule, per quiet step, the causes on quiet steps and validation batches)."""
    train = steps(counts)
    quiet = [step for step in range(len(train)) if quiet_step(step)]
    causes: Counter[str] = sum((train[step] for step in quiet), Counter())
    causes += sum((c for label, c in counts.items() if isinstance(label, tuple) and label[0] == "val"), Counter())
    return per_gpu_step(counts), sum(train[step].total() for step in quiet) / max(1, len(quiet)), causes


def main() -> None:
    """Print every cell's events per step: `python tests/host_syncs.py` (from tests/)."""
    import tempfile

    for name, overrides in CELLS.items():
        with tempfile.TemporaryDirectory() as run_dir:
            counts = count_cell(overrides, Path(run_dir))
        mean, quiet, causes = summary(counts)
        extra = len(unexpected(counts))
        print(f"{name}: {mean:.3f} per GPU step, {quiet:.2f} per quiet step, {extra} unexpected; {dict(causes)}")
        for label, counter in counts.items():
            if counter:
                print(f"  {label}: {dict(counter)}", file=sys.stderr)


if __name__ == "__main__":
    main()
