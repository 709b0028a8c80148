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
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vit_locality.config.preflight import check_command
from vit_locality.config.resolvers import register_resolvers
from vit_locality.config.schema import register_schemas
from vit_locality.errors import ConfigError, exit_code_of, first_line
from vit_locality.paths import CONF_DIR, CONF_PATH
from vit_locality.run.launch import (
    in_multirun,
    is_ddp,
    pin_gpu_for_parallel_cells,
    point_ddp_children_at_this_cell,
    run_ddp_cell_in_own_process,
)

log = logging.getLogger("vit_locality")


def objective_value(record: dict, name: str) -> float:
    """What a search sweeper (Optuna) optimises: a metric of the cell's record, or a final attention statistic."""
    metrics = record.get("metrics") or {}
    final = (record.get("attention") or {}).get("final") or {}
    for source in (metrics, final):
        if isinstance(source.get(name), int | float):
            return float(source[name])
    known = sorted(metrics) + sorted(k for k, v in final.items() if isinstance(v, int | float))
    raise ConfigError(f"optimized_metric={name!r} is not in the cell's record: one of {', '.join(known)}")


@hydra.main(version_base="1.3", config_path=CONF_PATH, config_name="train")
def main(cfg: DictConfig) -> float | None:
    # Heavy imports only after Hydra has parsed the command line (so --help and typos answer at once).
    from vit_locality.callbacks import build_callbacks
    from vit_locality.run.cell import CellInterrupted, run_cell
    from vit_locality.tracking.quiet import quiet_library_noise

    quiet_library_noise()

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    on_slurm = "SLURM_JOB_ID" in os.environ  # SLURM starts one task per rank itself: nothing to re-launch
    if is_ddp(cfg) and in_multirun() and not on_slurm:
        code = run_ddp_cell_in_own_process(run_dir)  # it skips a complete cell itself
        if code and not cfg.sweep.continue_on_error:
            sys.exit(code)
        return
    if not on_slurm:
        pin_gpu_for_parallel_cells(cfg)
    child = "LOCAL_RANK" in os.environ  # a DDP rank > 0 started by Lightning: it must not re-point anything
    original_argv = sys.argv if child else point_ddp_children_at_this_cell(run_dir)
    if cfg.startup.print_config and not child:
        from vit_locality.config.tree import config_tree_text

        print(config_tree_text(cfg), flush=True)
    try:
        record = run_cell(cfg, run_dir, build_callbacks)
    except CellInterrupted as stop:
        log.error("%s", stop)
        sys.exit(stop.exit_code)
    except Exception as error:
        log.error("%s failed: %s", cfg.run_name, first_line(error))
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            log.exception("full traceback")
        if cfg.sweep.continue_on_error:
            return float("nan") if cfg.optimized_metric else None  # recorded as failed; the verdict reports it
        sys.exit(exit_code_of(error))
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
    register_resolvers()  # before main(): Hydra resolves run_name when it builds the output directory
    register_schemas()  # before main(): the config groups' files name their schemas
    from vit_locality.run.sweep_verdict import report_verdict, sweep_dir_of

    sweep_dir, started = sweep_dir_of(sys.argv[1:], CONF_DIR), time.time()
    main()
    if sweep_dir is not None and (status := report_verdict(sweep_dir, since=started)):
        sys.exit(status)


if __name__ == "__main__":
    cli()
