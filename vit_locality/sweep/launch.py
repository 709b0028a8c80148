"""Where a cell runs: a DDP cell of a multirun in its own process, its DDP children on this one cell, and a GPU of
its own for cells run side by side. Entry-point side: it reads Hydra's run state."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, read_write

log = logging.getLogger("vit_locality")


def point_ddp_children_at_this_cell(run_dir: Path) -> list[str]:
    """Make DDP's ranks 1..N-1, which re-run this script, run this cell's saved config, not the whole sweep (Lightning
    PRs 11617, 18175). Returns the original argv, to restore."""
    original = list(sys.argv)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.output_subdir is not None:
        sys.argv = [sys.argv[0], "-cp", str(run_dir / hydra_cfg.output_subdir), "-cn", "config.yaml"]
        with read_write(hydra_cfg):
            hydra_cfg.run.dir = str(run_dir)
    return original


def run_ddp_cell_in_own_process(run_dir: Path) -> int:
    """Run the cell's saved config as a fresh entry point: DDP starts its workers only once per process."""
    hydra_cfg = HydraConfig.get()
    saved = run_dir / (hydra_cfg.output_subdir or ".hydra")
    command = [sys.executable, sys.argv[0], "-cp", str(saved), "-cn", "config.yaml"]
    command += [f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
    return subprocess.call(command)


def is_ddp(cfg: DictConfig) -> bool:
    """DDP that starts its ranks by re-running the script (not `ddp_spawn`, which forks from this process)."""
    strategy = str(cfg.trainer.strategy)
    return strategy.startswith("ddp") and "spawn" not in strategy


def in_multirun() -> bool:
    return HydraConfig.get().mode == RunMode.MULTIRUN


def pin_gpu_for_parallel_cells(cfg: DictConfig) -> None:
    """Parallel launchers (joblib, submitit_local) show every GPU to every cell: give cell k GPU k mod #GPUs."""
    import torch

    hydra_cfg = HydraConfig.get()
    launcher = str(hydra_cfg.launcher.get("_target_", ""))
    parallel = hydra_cfg.mode == RunMode.MULTIRUN and ("Joblib" in launcher or "LocalLauncher" in launcher)
    single_gpu = cfg.trainer.devices == 1 and cfg.trainer.accelerator in ("auto", "gpu", "cuda")
    if parallel and single_gpu and torch.cuda.is_available() and torch.cuda.device_count() > 1:
        cfg.trainer.devices = [hydra_cfg.job.num % torch.cuda.device_count()]
        log.info("%s pinned to GPU %d", cfg.run_name, cfg.trainer.devices[0])
