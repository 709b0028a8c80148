"""The training step as one compiled graph (`model.compile`): on-device augmentation, the batch mixing, the model and
the smoothed loss traced together with `fullgraph=True` and static shapes, so the host dispatches one graph a step
and a GPU can replay it as a CUDA graph.

Draws inside the graph come from torch's default generator, which the cell reseeds before every training batch from
(seed, epoch, batch) (callbacks/seeding.py): a resumed compiled run draws what an unbroken one draws. Inductor makes
its own random stream from that state, so a compiled cell shares every draw's distribution with an eager one, not its
values (docs/performance.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

StepFunction = Callable[..., tuple[torch.Tensor, ...]]


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
    """CUDA graphs (`reduce-overhead`) where a step qualifies: on CUDA, one process (DDP's all-reduce runs between
    backward's kernels, outside the graph). The step itself has static shapes and no host read wherever it runs."""
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
