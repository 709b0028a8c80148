"""The torch thread count a cell computes with (`threads`): it sets the order of float sums, so a cell reproduces
bit for bit only at the same count. Applied where each cell starts, in whatever process runs it; recorded."""

from __future__ import annotations

import torch


def apply_thread_count(threads: int | None) -> int:
    """Set torch's intra-op thread count to `threads` (None: leave it as it is); return the count now in effect."""
    if threads is not None:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()
