"""The OmegaConf resolvers `run_name` uses: one cell, one directory name, however its values were typed.

A run directory's name needs the config of the cell's data and model choices alone (identity.identity_settings).
The entry point's pre-check composes that reference, names every cell of the command, and hands both to the jobs in
an environment variable (CellNames), which every launcher passes on: joblib's workers, submitit's processes, a SLURM
job (sbatch exports the environment) and DDP's child processes. The resolver only looks the name up.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from vit_locality.config.identity import identity_hash
from vit_locality.precheck.names import (
    config_lookup,
    fitted_name,
    identity_settings,
    named_settings,
    reference_choices,
)

CELL_NAMES_ENV = "VIT_LOCALITY_CELL_NAMES"
# An environment variable is limited (128 KiB a string on Linux): a larger table hands over the references alone.
MAX_HANDED_CHARS = 96_000


class CellNames:
    """Run directory names by the cell's identity hash (None: two names for one identity, told apart by their
    reference), and the reference configs (plain, resolved) by the data and model choices they were composed from."""

    def __init__(self, names: dict[str, str | None] | None = None, references: dict[str, Any] | None = None) -> None:
        self.names: dict[str, str | None] = dict(names or {})
        self.references: dict[str, Any] = dict(references or {})

    def add_name(self, identity: str, name: str) -> None:
        self.names[identity] = name if self.names.get(identity, name) == name else None

    def add_reference(self, choices: tuple[str, ...], reference: DictConfig) -> None:
        reference = reference.copy()
        with open_dict(reference):
            reference.pop("run_name", None)  # the name is what it serves; it would resolve this resolver
        try:
            self.references[" ".join(choices)] = OmegaConf.to_container(reference, resolve=True, enum_to_str=True)
        except Exception:  # a value only the job resolves (an environment variable): the cell's name is listed
            return

    def update(self, other: CellNames) -> None:
        for identity, name in other.names.items():
            self.names[identity] = name if self.names.get(identity, name) == name else None  # None stays None
        self.references.update(other.references)

    def __bool__(self) -> bool:
        return bool(self.names or self.references)

    def hand_over(self) -> None:
        """Into this process's environment, for the jobs it starts (and those they start)."""
        text = json.dumps({"names": self.names, "references": self.references}, separators=(",", ":"), default=str)
        if len(text) > MAX_HANDED_CHARS:
            text = json.dumps({"names": {}, "references": self.references}, separators=(",", ":"), default=str)
        if len(text) <= MAX_HANDED_CHARS:
            os.environ[CELL_NAMES_ENV] = text

    def name(self, base: str, root: DictConfig, choices: tuple[str, ...]) -> str:
        """The name of the cell whose config is `root`: the pre-check's where it listed the cell; else named against
        the handed reference of its choices (a trial a search sweeper chose); else against its own config, as a
        config composed from a saved cell's config.yaml alone (a DDP child) has no other."""
        try:
            listed = self.names.get(identity_hash(root))
        except Exception:  # a value that does not resolve: no identity to look up
            listed = None
        if listed is not None:
            return listed
        reference = self.references.get(" ".join(choices))
        return fitted_name(base, identity_settings(root, OmegaConf.create(reference) if reference else root))


@functools.lru_cache(maxsize=4)
def _handed(text: str) -> CellNames:
    table = json.loads(text)
    return CellNames(table.get("names"), table.get("references"))


def handed_names() -> CellNames | None:
    """The names the entry point handed to this process, or None where none did (a config composed in a test or a
    tool)."""
    text = os.environ.get(CELL_NAMES_ENV)
    return _handed(text) if text else None


def _as_01(value: Any) -> int:
    return int(bool(value))


def _compact_number(value: Any) -> str:
    """0 and 0.0 both print as `0`, 0.10 as `0.1`: one cell, one directory name."""
    return f"{float(value):g}"


def _job_overrides() -> list[str] | None:
    """The overrides of the job Hydra is running; None outside a Hydra job (a config composed in a test or a tool)."""
    hydra_config = sys.modules.get("hydra.core.hydra_config")
    if hydra_config is None or not hydra_config.HydraConfig.initialized():
        return None
    return list(hydra_config.HydraConfig.get().overrides.task)


def _cell_name(base: str, *, _root_: DictConfig) -> str:
    """A run directory's name: `base` (data, model, the three flags, seed) and every identity setting that differs
    from the config of the job's data and model choices alone, whatever set it (identity.identity_settings),
    shortened to fit (identity.fitted_name), as the entry point's pre-check named it (CellNames). Outside a Hydra
    job: `base` alone. In a job no entry point started (a Hydra app of one's own calling `main`), there is no
    reference: `base` and the identity settings its command line sets, as it typed them."""
    overrides = _job_overrides()
    if overrides is None:
        return fitted_name(base, {})
    from hydra.core.hydra_config import HydraConfig

    handed = handed_names()
    if handed is not None:
        return handed.name(base, _root_, reference_choices(HydraConfig.get().runtime.choices))
    return fitted_name(base, named_settings(overrides, config_lookup(_root_)))


OPEN_TRAINER = "trainer_open"  # conf/trainer/default.yaml starts from it


def register_resolvers() -> None:
    """What composing conf/ needs registered first: `${as_01:...}` (bool -> 0/1), `${compact_number:...}` (0.10 ->
    0.1) and `${cell_name:<base>}`, used by `run_name`; and an empty section open to new keys that the trainer
    section starts from, so any argument the installed Trainer takes is a `trainer.<name>` setting without `+` (Hydra's
    struct mode refuses unknown keys everywhere else; run/checks.py asks Lightning about the trainer's). Idempotent."""
    from hydra.core.config_store import ConfigStore

    open_section = OmegaConf.create({})
    OmegaConf.set_struct(open_section, False)
    ConfigStore.instance().store(name=OPEN_TRAINER, node=open_section)
    resolvers = (
        ("as_01", _as_01),
        ("compact_number", _compact_number),
        ("cell_name", _cell_name),
    )
    for name, fn in resolvers:
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
