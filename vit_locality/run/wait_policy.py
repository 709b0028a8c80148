"""OpenMP threads sleep while they wait on a CPU run (`OMP_WAIT_POLICY=PASSIVE`) unless the user says otherwise:
spinning threads take the cores from the ones with work on a shared machine. Set before torch loads; a value the
user set, or a machine with CUDA, is left alone. Torch-free."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

WAIT_POLICY = "OMP_WAIT_POLICY"


def cuda_device_visible(environ: MutableMapping[str, str]) -> bool:
    """Whether this process could see an NVIDIA GPU, asked without torch: a device node, unless CUDA_VISIBLE_DEVICES
    hides every device."""
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))


def sleep_while_waiting(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE for a CPU run where the user set no policy and torch is not loaded yet; whether it
    was set."""
    env = os.environ if environ is None else environ
    if WAIT_POLICY in env or "torch" in sys.modules or cuda_device_visible(env):
        return False
    env[WAIT_POLICY] = "PASSIVE"
    return True
