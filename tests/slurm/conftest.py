"""The tests of tests/slurm/ run cells on a real SLURM cluster: this machine's, started by local_cluster.sh (root
only). Without one they skip, saying why. A test that uses the `slurm_cluster` fixture is marked `slurm` and `slow`
(tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from helpers import Spawner

CLUSTER_SCRIPT = Path(__file__).resolve().parent / "local_cluster.sh"


def cluster_up() -> bool:
    """A node of the cluster answers sinfo and can take jobs."""
    if shutil.which("sinfo") is None:
        return False
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return done.returncode == 0 and any(s in ("idle", "mixed", "allocated") for s in done.stdout.split())


@pytest.fixture(scope="session")
def slurm_cluster(spawns: Spawner) -> None:
    """The local cluster is up: started here when it is not and this user may start it, else the test skips. A test
    that uses it is in the `slurm` and `slow` tiers (tests/conftest.py); it spawns (sinfo, sbatch, train.py)."""
    if cluster_up():
        return
    if os.geteuid() != 0:
        pytest.skip("no SLURM cluster answers sinfo, and starting one (tests/slurm/local_cluster.sh) needs root")
    done = subprocess.run([str(CLUSTER_SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not cluster_up():
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"the local SLURM cluster did not start: {reason[0]}")
