"""Train one protocol cell, or a sweep of them with `-m`.

python train.py                                   # paper ViT, Modern protocol, CIFAR-100
python train.py data=synthetic model=vit_tiny trainer.max_epochs=1
python train.py -m aug.cutmix=true,false aug.autoaug=true,false loss.ls=0,0.1   # the 8-cell ablation
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vit_locality.config import ConfigError, register_resolvers
from vit_locality.data import DataError

register_resolvers()  # before Hydra resolves run_name in the output directory


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    # Heavy imports only after Hydra has parsed the command line (so --help and typos answer at once).
    from callbacks import build_callbacks
    from vit_locality.pipeline import run_cell

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run_cell(cfg, run_dir, build_callbacks(cfg, run_dir))
    except (ConfigError, DataError) as error:
        logging.getLogger("vit_locality").error("%s", error)
        sys.exit(2)


if __name__ == "__main__":
    main()
