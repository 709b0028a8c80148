"""Train one protocol cell, or a sweep of them with `-m`.

    python train.py                                   # paper ViT, Modern protocol, CIFAR-100
    python train.py data=synthetic model=vit_tiny trainer.max_epochs=1
    python train.py -m aug.cutmix=true,false aug.autoaug=true,false loss.ls=0,0.1   # the 8-cell ablation

Every cell of the command is checked before the first one starts. Exit status: 0 every cell complete,
1 a cell failed (with sweep.continue_on_error=true, after the others ran), 2 bad config or data, 3 a non-finite
loss, 130/143 interrupted by SIGINT/SIGTERM (run the same command again to resume).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, read_write

from vit_locality.config.checks import register_resolvers
from vit_locality.config.preflight import check_command
from vit_locality.errors import ConfigError
from vit_locality.paths import CONF_DIR, CONF_PATH

log = logging.getLogger("vit_locality")

register_resolvers()  # before Hydra resolves run_name in the output directory


def point_ddp_children_at_this_cell(run_dir: Path) -> list[str]:
    """Lightning's DDP starts ranks 1..N-1 by re-running this script with sys.argv plus
    `hydra.run.dir=<hydra.run.dir>`; inside a multirun that re-expands the whole sweep (Lightning PRs 11617,
    18175). Make the children compose this cell's saved config into this cell's directory instead. Returns the
    original argv, to restore after the cell."""
    original = list(sys.argv)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.output_subdir is not None:
        sys.argv = [sys.argv[0], "-cp", str(run_dir / hydra_cfg.output_subdir), "-cn", "config.yaml"]
        with read_write(hydra_cfg):
            hydra_cfg.run.dir = str(run_dir)
    return original


def run_ddp_cell_in_own_process(run_dir: Path) -> int:
    """A DDP cell of a multirun runs as a fresh `train.py` on the cell's saved config: Lightning's DDP can start
    its worker processes only once per process, and the command line it re-runs must be this one cell's."""
    hydra_cfg = HydraConfig.get()
    saved = run_dir / (hydra_cfg.output_subdir or ".hydra")
    command = [sys.executable, sys.argv[0], "-cp", str(saved), "-cn", "config.yaml"]
    command += [f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
    return subprocess.call(command)


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


def objective_value(record: dict, name: str) -> float:
    """What a search sweeper (Optuna) optimises: a metric of the cell's record, or a final attention statistic."""
    metrics = record.get("metrics") or {}
    final = (record.get("attention") or {}).get("final") or {}
    for source in (metrics, final):
        if isinstance(source.get(name), int | float):
            return float(source[name])
    known = sorted(metrics) + sorted(k for k, v in final.items() if isinstance(v, int | float))
    raise ConfigError(f"optimized_metric={name!r} is not in the cell's record: one of {', '.join(known)}")


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0]


@hydra.main(version_base="1.3", config_path=CONF_PATH, config_name="train")
def main(cfg: DictConfig) -> float | None:
    # Heavy imports only after Hydra has parsed the command line (so --help and typos answer at once).
    from vit_locality.callbacks import build_callbacks
    from vit_locality.data import DataError
    from vit_locality.model.classifier import NonFiniteLossError
    from vit_locality.run.cell import CellInterrupted, run_cell
    from vit_locality.tracking.quiet import quiet_library_noise

    quiet_library_noise()

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    ddp = str(cfg.trainer.strategy).startswith("ddp") and "spawn" not in str(cfg.trainer.strategy)
    on_slurm = "SLURM_JOB_ID" in os.environ  # SLURM starts one task per rank itself: nothing to re-launch
    if ddp and HydraConfig.get().mode == RunMode.MULTIRUN and not on_slurm:
        code = run_ddp_cell_in_own_process(run_dir)  # it skips a complete cell itself
        if code and not cfg.sweep.continue_on_error:
            sys.exit(code)
        return
    if not on_slurm:
        pin_gpu_for_parallel_cells(cfg)
    child = "LOCAL_RANK" in os.environ  # a DDP rank > 0 started by Lightning: it must not re-point anything
    original_argv = sys.argv if child else point_ddp_children_at_this_cell(run_dir)
    if cfg.extras.print_config and not child:
        from vit_locality.config.tree import config_tree_text

        print(config_tree_text(cfg), flush=True)
    try:
        record = run_cell(cfg, run_dir, build_callbacks)
    except CellInterrupted as stop:
        log.error("%s", stop)
        sys.exit(stop.exit_code)
    except Exception as error:
        log.error("%s failed: %s", cfg.run_name, _one_line(error) if not isinstance(error, ConfigError) else error)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            log.exception("full traceback")
        if cfg.sweep.continue_on_error:
            return float("nan") if cfg.optimized_metric else None  # recorded as failed; the verdict reports it
        sys.exit(2 if isinstance(error, ConfigError | DataError) else 3 if isinstance(error, NonFiniteLossError) else 1)
    finally:
        sys.argv = original_argv
    return objective_value(record, cfg.optimized_metric) if cfg.optimized_metric else None


def cli() -> None:
    """`python train.py` and the installed `vit-locality-train`: check every cell, run, give the verdict."""
    problems = check_command(sys.argv[1:], CONF_DIR)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        sys.exit(2)
    main()
    from vit_locality.run.sweep_verdict import incomplete_cells

    if incomplete_cells:
        shown = ", ".join(f"{run_dir.name} ({status})" for run_dir, status in incomplete_cells)
        print(f"error: {len(incomplete_cells)} cell(s) not complete: {shown}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    cli()
