"""A plain run says only what is the user's concern: no worker-count warning from torch on a small machine, no
`srun` hint outside SLURM."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import pytest
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.plugins.environments import slurm as lightning_slurm

from vit_locality.data import workers
from vit_locality.data.synthetic import SyntheticDataModule
from vit_locality.tracking.wandb_mode import quiet_library_noise


@pytest.mark.parametrize(("asked", "used"), [(4, 2), (2, 2), (1, 1), (0, 0)])
def test_data_workers_stop_at_the_cores_the_process_may_use(
    asked: int, used: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # 2 cores, as `taskset -c 0,1`
    monkeypatch.setattr(workers, "_CAPPED", set(), raising=False)  # said once per process: this test's process
    caplog.set_level(logging.INFO, logger="vit_locality")
    datamodule = SyntheticDataModule(train_size=64, test_size=32, batch_size=16, num_workers=asked)
    datamodule.setup("fit")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaders = [datamodule.train_dataloader(), datamodule.test_dataloader()]
        for loader in loaders:
            loader.check_worker_number_rationality()  # what torch runs as the loader starts its workers
    assert [loader.num_workers for loader in loaders] == [used, used]
    assert [str(w.message) for w in caught if "worker" in str(w.message)] == []
    said = [r.getMessage() for r in caplog.records if "data.num_workers" in r.getMessage()]
    assert said == ([f"data.num_workers={asked}: 2 data workers, the cores this process may use"] if asked > 2 else [])


@pytest.mark.parametrize("in_slurm", [False, True])
def test_lightnings_srun_hint_is_silent_outside_slurm_only(
    in_slurm: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    if in_slurm:
        monkeypatch.setenv("SLURM_JOB_ID", "7")  # a batch job started without srun: the hint is the user's concern
    monkeypatch.setattr(lightning_slurm.shutil, "which", lambda name: "/usr/bin/srun")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_library_noise()
        SLURMEnvironment._validate_srun_used()
    hints = [w for w in caught if "`srun` command is available" in str(w.message)]
    assert len(hints) == (1 if in_slurm else 0)
