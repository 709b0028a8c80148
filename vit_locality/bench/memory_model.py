"""A memory model of one cell on a GPU, measured without one: the peak tensor memory of a training step and the data
set held on the device, and how many cells that lets share one H200's 141 GiB (a projection, not a measurement).

The step is traced under `FakeTensorMode` (shapes and dtypes, no arithmetic), so the paper model at batch 512 costs
a second, and `AllocationTracker` adds up the bytes of every tensor an op creates while it lives (outputs that alias
an input, views and in-place results, add nothing). The step is the Trainer's on a GPU: bf16 autocast forward,
cross-entropy on soft targets, backward, AdamW (parameters, gradients and AdamW's two moments stay float32).
The CUDA caching allocator rounds and keeps freed blocks, and a process holds a CUDA context: the projection adds
`CUDA_CONTEXT_GIB` per cell and keeps `HEADROOM` of the GPU free for that reason.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from vit_locality.model.classifier import adamw_with_decay_groups
from vit_locality.model.vit import VisionTransformer

GIB = 2**30
H200_GIB = 141.0
CUDA_CONTEXT_GIB = 0.5  # a CUDA context and cuBLAS/cuDNN workspaces per process: an assumption, not measured here
HEADROOM = 0.9  # the share of the GPU the projection fills (allocator rounding, fragmentation)
CIFAR100_IMAGES = 50_000 + 10_000  # training and test images, each 3 x 32 x 32 uint8, held once per cell
PAPER = {"depth": 8, "dim": 192, "heads": 8, "mlp_ratio": 2.0}  # conf/model/vit_paper.yaml


class AllocationTracker(TorchDispatchMode):
    """Live and peak bytes of the tensors created under it (not those that existed before)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0

    def _free(self, size: int) -> None:
        self.live -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's signature
        out = func(*args, **(kwargs or {}))
        aliasing = any(r.alias_info is not None for r in func._schema.returns)
        if not aliasing:
            for tensor in tree_flatten(out)[0]:
                if isinstance(tensor, torch.Tensor):
                    size = tensor.untyped_storage().nbytes()
                    self.live += size
                    weakref.finalize(tensor, self._free, size)
            self.peak = max(self.peak, self.live)
        return out


@dataclass(frozen=True)
class StepMemory:
    batch: int
    state_bytes: int  # parameters, gradients and AdamW's moments (float32), there before and after the step
    step_peak_bytes: int  # the most the step adds on top of the state at any moment (activations, workspaces)

    @property
    def total_bytes(self) -> int:
        return self.state_bytes + self.step_peak_bytes


def step_memory(batch: int, classes: int = 100, image_size: int = 32, arch: dict | None = None) -> StepMemory:
    """One bf16-autocast training step of the ViT (the paper's by default) on a uint8 batch, traced with fake
    tensors: the peak it adds over the training state, and the state itself."""
    arch = arch or PAPER
    model = VisionTransformer(classes, image_size, **arch)  # real weights (their init reads the host), then fake
    mode = FakeTensorMode()
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, torch.nn.Parameter(mode.from_tensor(param.detach())))
    with mode:
        optimizer = adamw_with_decay_groups(model, 1e-3, 0.05, (0.9, 0.999))
        params = list(model.parameters())
        state = 4 * sum(p.numel() * p.element_size() for p in params)  # weights, gradients, two moments
        images = torch.randint(0, 256, (batch, 3, image_size, image_size), dtype=torch.uint8)
        targets = torch.rand(batch, classes)
        with AllocationTracker() as tracker:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model((images.float() - 127.5) / 64.0)
                loss = F.cross_entropy(logits.float(), targets, label_smoothing=0.1)
            loss.backward()
            # Gradients and AdamW's moments are the training state, counted in `state`: what the tracker saw of
            # them now is taken off, so `peak` keeps only what the step adds.
            grads = sum(p.grad.untyped_storage().nbytes() for p in params if p.grad is not None)
            del logits, loss
            optimizer.step()
        moments = 2 * sum(p.numel() * p.element_size() for p in params)
        peak = max(0, tracker.peak - grads - moments)
    return StepMemory(batch, state, peak)


def dataset_bytes(images: int = CIFAR100_IMAGES, image_size: int = 32) -> int:
    """The splits a cell copies to its device as uint8 (labels: 8 bytes each)."""
    return images * (3 * image_size * image_size + 8)


def cells_per_gpu(step: StepMemory, data_bytes: int, gpu_gib: float = H200_GIB) -> int:
    """How many cells fit in the GPU's memory by the model: each its step, its data and a CUDA context."""
    per_cell = step.total_bytes + data_bytes + CUDA_CONTEXT_GIB * GIB
    return math.floor(gpu_gib * GIB * HEADROOM / per_cell)
