"""What makes two cells the same cell: the run identity, the data fingerprint, and the settings a directory name
must show.

The identity is the whole config minus an explicit list of settings that cannot change a result (paths, worker
counts, loggers, progress display, device placement), so a new setting is part of it unless someone decides
otherwise: a quick check (`trainer.limit_train_batches=1`) is never mistaken for a full run, and a checkpoint is
resumed only under the config that wrote it. The fingerprint covers what the config cannot: the data actually read.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Settings that do not change what a cell computes (dotted keys; a key covers everything below it).
NOT_IDENTITY = (
    "hydra",
    "run_name",
    "sweep_name",
    "sweep",
    "tags",  # labels for W&B and the record
    "logger",
    "callbacks",
    "startup",  # what a cell shows when it starts
    "optimized_metric",
    "data.root",
    "data.num_workers",
    "data.download",
    "data.verify",
    "data.eval_batch_size",
    "model.compile",  # the same maths, compiled or not
    "stats.pictures",
    "stats.batch_size",  # the probe's statistics do not depend on how its images are batched
    "trainer.accelerator",
    "trainer.devices",  # data.batch_size is the global batch whatever the device count
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.log_every_n_steps",
    "trainer.profiler",  # measuring where the time goes changes no number
    "trainer.enable_model_summary",
    "trainer.detect_anomaly",
)
# Keys (exact) the base of a run directory's name already shows (`<data>_<model>_aa<0|1>_cm<0|1>_ls<eps>_s<seed>`):
# the data and model choices, the three flags and their presets, the seed; and config groups that only hold settings
# outside the identity.
IN_BASE_NAME = (
    "data",
    "data.name",
    "model",
    "model.name",
    "aug.autoaug",
    "aug.cutmix",
    "loss.ls",
    "seed",
    "protocol",
    "experiment",
)
GROUPS_NOT_NAMED = ("trainer", "logger", "callbacks", "hydra")


def _covered(key: str, prefixes: Iterable[str]) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)


def run_identity(cfg: DictConfig) -> dict[str, Any]:
    """The settings that define the cell, as plain data (dotted key -> value)."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        elif not _covered(prefix, NOT_IDENTITY):
            flat[prefix] = node

    container = OmegaConf.to_container(cfg, resolve=False)
    walk({k: v for k, v in container.items() if k not in ("hydra", "run_name")}, "")
    resolved = {key: OmegaConf.select(cfg, key) for key in flat}  # resolve each kept value only
    return {key: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for key, v in resolved.items()}


def identity_hash(cfg: DictConfig) -> str:
    blob = json.dumps(run_identity(cfg), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def data_fingerprint(train_labels: Any, eval_labels: Any, test_labels: Any) -> dict[str, Any]:
    """Sizes and a hash of the labels of the splits a run read: equal configs on different files differ here."""
    digest = hashlib.sha256()
    sizes = {}
    for name, labels in (("train", train_labels), ("eval", eval_labels), ("test", test_labels)):
        array = labels.detach().cpu().contiguous().numpy() if hasattr(labels, "detach") else labels
        digest.update(name.encode())
        digest.update(array.astype("int64").tobytes())
        sizes[name] = int(len(array))
    return {"sizes": sizes, "labels_sha256": digest.hexdigest()[:16]}


def _override_key(override: str) -> str:
    """`+trainer.fast_dev_run=true` -> `trainer.fast_dev_run`; a group path `hydra/launcher` -> `hydra.launcher`."""
    return override.split("=", 1)[0].lstrip("+~").replace("/", ".")


def _name_part(text: str) -> str:
    """A value as it may appear in a directory name: no '=' or '/' (nor anything a shell or file system minds)."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_") or "_"


def settings_suffix(overrides: Iterable[str]) -> str:
    """`_<key>-<value>` for every setting a command sets that changes the result and the base name does not show,
    sorted by key: `-m optim.lr=1e-3,3e-3` gives `..._s0_optim.lr-1e-3` and `..._s0_optim.lr-3e-3`."""
    parts = []
    for override in overrides:
        key = _override_key(override)
        if "=" not in override or key in IN_BASE_NAME or key in GROUPS_NOT_NAMED or _covered(key, NOT_IDENTITY):
            continue
        value = override.split("=", 1)[1]
        parts.append((key, f"{_name_part(key)}-{_name_part(value)}"))
    return "".join(f"_{part}" for _, part in sorted(parts))
