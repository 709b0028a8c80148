"""The OmegaConf resolvers `run_name` uses: one cell, one directory name, however its values were typed, computed
from the config being resolved, in the pre-check and in the job alike (precheck/names.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vit_locality.config.settings import RunSettings
from vit_locality.precheck.gate import resolved
from vit_locality.precheck.names import cell_name

RUN_NAME = "${run_name}"  # a directory template ending in it names the parent the cell's directory lives in


def _as_01(value: Any) -> int:
    return int(bool(value))


def _compact_number(value: Any) -> str:
    """0 and 0.0 both print as `0`, 0.10 as `0.1`: one cell, one directory name."""
    return f"{float(value):g}"


def _job() -> Any:
    """The Hydra config of the job being run, or None outside a Hydra job (a config composed in a test or a tool)."""
    hydra_config = sys.modules.get("hydra.core.hydra_config")
    if hydra_config is None or not hydra_config.HydraConfig.initialized():
        return None
    return hydra_config.HydraConfig.get()


def parent_directory(job: Any) -> Path | None:
    """Where the job's run directory lives, when its template is `<parent>/${run_name}` (a sweep's subdir is the
    run name; a single run's dir ends in it), else None: a directory of another shape is looked for nowhere."""
    from hydra.types import RunMode

    if job.mode == RunMode.MULTIRUN:
        subdir = OmegaConf.to_container(job.sweep, resolve=False)["subdir"]
        return Path(str(job.sweep.dir)) if subdir == RUN_NAME else None
    template = str(OmegaConf.to_container(job.run, resolve=False)["dir"])
    prefix = template[: -len(RUN_NAME)].rstrip("/") if template.endswith(RUN_NAME) else None
    return Path(prefix or ".") if prefix is not None and "${" not in prefix else None


def _cell_name(base: str, *, _root_: DictConfig) -> str:
    """A run directory's name (names.cell_name) from the job's own config; outside a Hydra job, `base` alone."""
    job = _job()
    if job is None:
        return base
    settings = RunSettings.from_values(resolved(_root_))
    return cell_name(base, list(job.overrides.task), settings, parent_directory(job))


# hydra/launcher=packed's and packed_slurm's classes (vit_locality/sweep/plugins/packed.py, slurm.py)
PACKED_LAUNCHERS = ("PackedLauncher", "PackedSlurmLauncher")


def _packed_launcher(*, _root_: DictConfig) -> bool:
    """`sweep.packed`: whether the command's launcher packs cells, read from the config's own Hydra section (the
    pre-check's composition) or the running job's; False outside Hydra."""
    target = OmegaConf.select(_root_, "hydra.launcher._target_", default=None)
    job = _job() if target is None else None
    if job is not None:
        target = job.launcher.get("_target_")
    return str(target or "").rsplit(".", 1)[-1] in PACKED_LAUNCHERS


OPEN_TRAINER = "trainer_open"  # conf/trainer/default.yaml starts from it


def register_resolvers() -> None:
    """What composing conf/ needs registered first (idempotent): `${as_01:...}`, `${compact_number:...}` and
    `${cell_name:<base>}` for `run_name`, `${packed_launcher:}` for `sweep.packed`; and an open section the trainer
    section starts from, so any argument of the installed Trainer is a `trainer.<name>` setting without `+`
    (checked by precheck/trainer_options.py)."""
    from hydra.core.config_store import ConfigStore

    open_section = OmegaConf.create({})
    OmegaConf.set_struct(open_section, False)
    ConfigStore.instance().store(name=OPEN_TRAINER, node=open_section)
    resolvers = (
        ("as_01", _as_01),
        ("compact_number", _compact_number),
        ("cell_name", _cell_name),
        ("packed_launcher", _packed_launcher),
    )
    for name, fn in resolvers:
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
