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
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostSyncCounter", "SYNC_OPS"]

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
