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
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vit_locality.config import ConfigError, register_resolvers
from vit_locality.data import DataError
from vit_locality.preflight import check_command

CONF_DIR = Path(__file__).resolve().parent / "conf"
log = logging.getLogger("vit_locality")
failed_cells: list[str] = []  # cells that failed while sweep.continue_on_error let the sweep go on

register_resolvers()  # before Hydra resolves run_name in the output directory


def _one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0]


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    # Heavy imports only after Hydra has parsed the command line (so --help and typos answer at once).
    from callbacks import build_callbacks
    from vit_locality.module import NonFiniteLossError
    from vit_locality.pipeline import CellInterrupted, run_cell

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run_cell(cfg, run_dir, build_callbacks(cfg, run_dir))
    except CellInterrupted as stop:
        log.error("%s", stop)
        sys.exit(stop.exit_code)
    except Exception as error:
        log.error("%s failed: %s", cfg.run_name, _one_line(error) if not isinstance(error, ConfigError) else error)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            log.exception("full traceback")
        if cfg.sweep.continue_on_error:
            failed_cells.append(cfg.run_name)
            return
        sys.exit(2 if isinstance(error, ConfigError | DataError) else 3 if isinstance(error, NonFiniteLossError) else 1)


if __name__ == "__main__":
    problems = check_command(sys.argv[1:], CONF_DIR)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        sys.exit(2)
    main()
    if failed_cells:
        print(f"error: {len(failed_cells)} cell(s) failed: {', '.join(failed_cells)}", file=sys.stderr)
        sys.exit(1)
