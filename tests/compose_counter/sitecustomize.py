"""Counts Hydra's compositions in every Python process that starts with this folder on PYTHONPATH (train.py, its
launcher's workers, a SLURM job): one line per call of Hydra's config loader, appended to $COMPOSE_COUNT_FILE."""

import os

_LOG = os.environ.get("COMPOSE_COUNT_FILE")
if _LOG:
    from hydra._internal import config_loader_impl

    _load = config_loader_impl.ConfigLoaderImpl.load_configuration

    def _counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        with open(_LOG, "a") as log:
            log.write(f"{os.getpid()}\n")
        return _load(self, *args, **kwargs)

    config_loader_impl.ConfigLoaderImpl.load_configuration = _counted
