"""Counts Hydra's compositions in every Python process that starts with this folder on PYTHONPATH (train.py, its
launcher's workers, a SLURM job): one line per call of Hydra's config loader, appended to $COMPOSE_COUNT_FILE; and
the validations of a cell's config (RunSettings.from_values), one line each in $COMPOSE_COUNT_FILE.validated."""

import os

_LOG = os.environ.get("COMPOSE_COUNT_FILE")
if _LOG:
    from hydra._internal import config_loader_impl

    from vit_locality.config import settings

    _load = config_loader_impl.ConfigLoaderImpl.load_configuration
    _from_values = settings.RunSettings.from_values.__func__

    def _counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        with open(_LOG, "a") as log:
            log.write(f"{os.getpid()}\n")
        return _load(self, *args, **kwargs)

    def _validated(cls, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        with open(_LOG + ".validated", "a") as log:
            log.write(f"{os.getpid()}\n")
        return _from_values(cls, *args, **kwargs)

    config_loader_impl.ConfigLoaderImpl.load_configuration = _counted
    settings.RunSettings.from_values = classmethod(_validated)
