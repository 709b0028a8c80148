"""The memory model: the allocation tracker adds what lives, the paper step grows with the batch, and the packing
levels the GPU bench measures follow the projection of cells per H200."""

from __future__ import annotations

import pytest
import torch

from vit_locality.bench.gpu_settings import FULL, MEMORY_CELLS_PER_GPU, pack_levels
from vit_locality.bench.memory_model import (
    GIB,
    AllocationTracker,
    StepMemory,
    cells_per_gpu,
    dataset_bytes,
    step_memory,
)


def test_tracker_counts_live_tensors_not_views_and_frees_them() -> None:
    with AllocationTracker() as tracker:
        a = torch.empty(1000)  # 4000 bytes
        b = a * 2  # 4000 more: peak 8000
        view = b.view(10, 100)  # a view: nothing new
        del a  # 4000 freed
        c = b + 1  # back to 8000
    assert (tracker.peak, tracker.live) == (8000, 8000)
    del b, c, view
    assert tracker.live == 0


def test_projection_by_hand() -> None:
    step = StepMemory(batch=1, state_bytes=GIB, step_peak_bytes=GIB)
    # 141 GiB x 0.9 / (1 + 1 + 0 + 0.5 CUDA context) GiB = 50.76
    assert cells_per_gpu(step, data_bytes=0) == 50
    assert dataset_bytes(10, 32) == 10 * (3 * 32 * 32 + 8)


def test_paper_step_grows_with_the_batch_and_the_state_does_not() -> None:
    small, large = step_memory(128), step_memory(256)
    assert small.state_bytes == large.state_bytes > 0
    assert large.step_peak_bytes == pytest.approx(2 * small.step_peak_bytes, rel=0.1)


def test_packing_default_follows_the_projection() -> None:
    projected = cells_per_gpu(step_memory(128), dataset_bytes())
    assert projected == MEMORY_CELLS_PER_GPU
    assert FULL.pack == pack_levels(projected) == (1, 2, 4, 8)  # capped at one 8-cell wave
    assert pack_levels(3) == (1, 2) != FULL.pack  # a projection of 3 cells would change the default
