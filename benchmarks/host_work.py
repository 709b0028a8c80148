"""Host work of the on-device Modern data path per batch, measured on a CPU: what a GPU's host could not hide.

On a GPU the host only queues kernels, and a training step runs at device speed only while the host queues a step's
work faster than the device runs it. The host's cost of an op barely depends on the op's size: argument parsing,
the dispatcher and a kernel launch, a few microseconds each. Two measures, both taken on a CPU:

- `ops`: the aten ops one batch dispatches, counted with a `TorchDispatchMode` (every op that reaches the
  dispatcher after composite ops are decomposed, views included). Deterministic and machine-independent: the number a
  test can bound. At about 5 us per op on these cores, 200 ops are about 1 ms of host time.
- `time_per_batch`: the wall time of one batch at a tiny shape (`TINY`: 8 images of 8 x 8), where the arithmetic is
  negligible and what is left is the host's dispatch: the same machine's seconds for the same op list.

and two counts that must be zero on the GPU path (`GPU_GROUPING`):

- `reads`: ops whose result the host must read (`aten._local_scalar_dense`, the data-dependent sizes of `nonzero`,
  `unique`, ...): a stream sync each on a GPU;
- `from_data`: tensors built from Python values inside the batch (`aten.lift_fresh`, what `torch.tensor(list)`
  dispatches): on a GPU a copy from pageable host memory, itself a stream sync.

The batch is what `DeviceTrainLoader` makes per step (gather, seeded draws, crop + flip, AutoAugment) and what the
module's `mix_batch` then does (CutMix), after a first batch that fills the per-device caches.
Print the figures: `python -m benchmarks.host_work`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vit_locality.augment.mixing import mix_batch
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.data.on_device import BatchAugment

_aten = torch.ops.aten
READ_OPS = frozenset(
    {
        _aten._local_scalar_dense.default,
        _aten.nonzero.default,
        _aten.masked_select.default,
        _aten._unique2.default,
        _aten.unique_dim.default,
        _aten.unique_consecutive.default,
        _aten.bincount.default,
        _aten.equal.default,
        _aten.is_nonzero.default,
    }
)
FROM_DATA_OPS = frozenset({_aten.lift_fresh.default, _aten.lift_fresh_copy.default})
GPU_GROUPING = "select"  # the AutoAugment grouping a GPU runs (no host reads)
MODERN = TrainingProtocol(autoaug=True, cutmix=True, ls=0.1, policy="cifar10", autoaug_device="data_on_device")
BATCH, SIZE = 128, 32  # a Modern CIFAR batch
TINY = (8, 8)  # batch, side: compute negligible against dispatch


class DispatchCount(TorchDispatchMode):
    """Every aten op dispatched inside `with DispatchCount() as count:`, by name, with the host reads and the tensors
    made from Python values among them."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()
        self.from_data: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's signature
        name = str(func.overloadpacket.__name__)
        self.ops[name] += 1
        if func in READ_OPS:
            self.reads[name] += 1
        if func in FROM_DATA_OPS:
            self.from_data[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


@dataclass(frozen=True)
class HostWork:
    ops: int  # aten ops dispatched per batch
    reads: int  # host reads per batch (a sync each on a GPU)
    from_data: int  # tensors made from Python values per batch (a host-to-device copy each on a GPU)
    by_op: Counter[str]


def modern_step(batch: int, size: int, grouping: str | None = GPU_GROUPING) -> Callable[[int], Any]:
    """One training batch of the Modern cell on on-device CPU data, as `step -> (images, targets, labels)`: the
    loader's per-step work (`DeviceTrainLoader`) followed by the module's batch mixing (CutMix)."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch * 2, 3, size, size), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 10, (batch * 2,), generator=generator)
    order = torch.randperm(batch * 2, generator=generator)
    augment = BatchAugment(size, MODERN, grouping=grouping)
    step_generator = torch.Generator()

    def step(step: int) -> Any:
        index = order[:batch]
        step_generator.manual_seed(step)
        augmented = augment(images[index], step_generator)
        return mix_batch(augmented, labels[index], 10, MODERN)

    return step


def count(batch: int = BATCH, size: int = SIZE, grouping: str | None = GPU_GROUPING, step: int = 1) -> HostWork:
    """The ops of one Modern batch (after a first one that fills the caches)."""
    run = modern_step(batch, size, grouping)
    torch.manual_seed(0)
    run(0)
    with DispatchCount() as counted:
        run(step)
    return HostWork(counted.total, sum(counted.reads.values()), sum(counted.from_data.values()), counted.ops)


def time_per_batch(
    batch: int = TINY[0], size: int = TINY[1], grouping: str | None = GPU_GROUPING, repeats: int = 200
) -> float:
    """Median seconds per Modern batch at a shape small enough for the host's dispatch to be all of it."""
    run = modern_step(batch, size, grouping)
    torch.manual_seed(0)
    for warm in range(10):
        run(warm)
    times = []
    for step in range(repeats):
        start = time.perf_counter()
        run(step)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main() -> None:
    """Print the host work of a Modern batch: ops, reads and copies at 128 x 32 px, time at the tiny shape."""
    torch.set_num_threads(1)
    for grouping in (GPU_GROUPING, "grouped"):
        work = count(grouping=grouping)
        tiny = count(*TINY, grouping=grouping)
        seconds = time_per_batch(grouping=grouping)
        print(
            f"{grouping}: {work.ops} ops per batch of {BATCH} x {SIZE} px ({tiny.ops} at {TINY[0]} x {TINY[1]} px), "
            f"{work.reads} host reads, {work.from_data} tensors from Python values; "
            f"{seconds * 1e3:.2f} ms per batch at {TINY[0]} x {TINY[1]} px"
        )
    print("top ops:", dict(count().by_op.most_common(12)))


if __name__ == "__main__":
    main()
