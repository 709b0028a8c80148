"""The torch thread count a cell computes with (`threads`).

How many threads split a matrix product changes the order of its float additions, so the same cell on 1 and on 2
threads drifts apart in the last bits and, over hundreds of steps, in its results. A cell that must reproduce on
another machine fixes the count (`threads=2`, what `experiment=demo` does); null keeps torch's default (the
machine's cores, or OMP_NUM_THREADS). Either way the count the cell ran with is recorded (`threads` in
results.json). It is applied where each cell starts, in whatever process runs it (a joblib or submitit worker, a
DDP rank), before data or model are built.
"""

from __future__ import annotations

import torch


def apply_thread_count(threads: int | None) -> int:
    """Set torch's intra-op thread count to `threads` (None: leave it as it is); return the count now in effect."""
    if threads is not None:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()
