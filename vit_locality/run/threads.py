"""The CPU threads of a cell. `threads` sets the order of float sums, so a cell reproduces bit for bit only at the
same count; OpenMP threads sleep while they wait on a CPU run (`OMP_WAIT_POLICY=PASSIVE`), as spinning ones take the
cores from those with work. Torch-free at import: the wait policy is set before torch loads."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

WAIT_POLICY = "OMP_WAIT_POLICY"


def apply_thread_count(threads: int | None) -> int:
    """Set torch's intra-op thread count to `threads` (None: leave it as it is); return the count now in effect."""
    import torch

    if threads is not None:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def cuda_device_visible(environ: MutableMapping[str, str]) -> bool:
    """Whether this process could see an NVIDIA GPU, asked without torch."""
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))


def sleep_while_waiting(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE where the user set none, torch is not loaded yet and no GPU is visible."""
    env = os.environ if environ is None else environ
    if WAIT_POLICY in env or "torch" in sys.modules or cuda_device_visible(env):
        return False
    env[WAIT_POLICY] = "PASSIVE"
    return True
