"""A varied set of cells whose identity hashes and run directory names are saved in tests/saved_names_expected.py,
so that a change to how either is computed shows up as a test failure (tests/config/test_saved_names.py). Each row
also keeps `old_name`, the name the cell had before names held the identity hash: such a directory must still be
found.

`python tests/saved_names.py` rewrites the file from the current code (then `ruff format` it): only when a change of
names is intended.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]
from omegaconf import DictConfig  # noqa: E402

from vit_locality.config.identity import identity_hash  # noqa: E402
from vit_locality.config.settings import RunSettings  # noqa: E402
from vit_locality.paths import CONF_DIR  # noqa: E402
from vit_locality.precheck.gate import resolved  # noqa: E402
from vit_locality.precheck.names import cell_name  # noqa: E402
from vit_locality.precheck.resolvers import register_resolvers  # noqa: E402

SAVED = Path(__file__).parent / "saved_names_expected.py"
TINY = ["data=synthetic", "model=vit_tiny"]
CELLS: list[list[str]] = [
    [],
    ["data=synthetic"],
    ["data=glyphs"],
    ["data=cifar10"],
    ["data=synthetic", "model=vit_tiny"],
    ["data=glyphs", "model=vit_tiny_sincos"],
    ["data=cifar10", "model=vit_convstem"],
    ["data=synthetic", "model=vit_convstem"],
    ["experiment=demo"],
    ["experiment=demo", "aug.cutmix=true", "loss.ls=0.1"],
    ["experiment=demo_textures"],
    [*TINY, "protocol=baseline"],
    [*TINY, "optim.lr=3e-3"],
    [*TINY, "optim.lr=0.003"],
    [*TINY, "model.mlp_ratio=2"],
    [*TINY, "model.mlp_ratio=2.0"],
    [*TINY, "model.mlp_ratio=3"],
    [*TINY, "trainer.devices=2"],
    [*TINY, "trainer.limit_train_batches=1"],
    [*TINY, "trainer.limit_train_batches=0.5"],
    [*TINY, "protocol=baseline", "aug.mixup=true", "aug.cutmix=false"],
    [*TINY, "stats.units=grid"],  # display only: the same identity and name as the unit-square cell
    [*TINY, "loss.ls=0.10"],
    [*TINY, "seed=3", "tags=[a,b]", "threads=2"],
    [*TINY, "data.num_workers=0", "trainer.accelerator=cpu", "logger=wandb"],
    [*TINY, "aug.policy=cifar10", "aug.cutmix_alpha=0.8", "aug.cutmix_prob=0.5", "optim.betas=[0.9,0.95]"],
    [*TINY, "data.val_size=500", "optimized_metric=val/acc1"],
    [*TINY, "+trainer.max_steps=10", "trainer.gradient_clip_val=1.0"],
    [
        *TINY,
        "optim.lr=0.002",
        "optim.weight_decay=0.1",
        "optim.warmup_epochs=2",
        "optim.min_lr_ratio=0.01",
        "aug.cutmix_alpha=0.8",
        "data.noise=0.1",
        "data.split_seed=1",
        "trainer.max_epochs=3",
    ],
    ["data=glyphs", "model=vit_tiny_sincos", "model.pos_init=learned", "data.clutter=2", "stats.early_layers=1"],
]


def composed(overrides: list[str]) -> DictConfig:
    """The cell's config with Hydra's own section (which the identity leaves out), as a Hydra job sees it."""
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=True)


def cell_names(overrides: list[str], typed: bool = True) -> dict[str, str]:
    """A cell's identity hash and its run directory's name, as a Hydra job of these overrides computes them; the hash
    from the cell's settings (`typed`) or from its record's config, as a reader of results.json computes it."""
    cfg = composed(overrides)
    settings = RunSettings.from_values(resolved(cfg))
    record = json.loads(json.dumps(settings.as_record()))
    return {
        "identity_hash": identity_hash(settings if typed else record),
        "name": cell_name(str(cfg.run_name), overrides, settings, None),  # outside a job run_name is the base
    }


def saved() -> list[dict[str, Any]]:
    from saved_names_expected import SAVED as rows

    return rows


if __name__ == "__main__":
    old = {json.dumps(row["overrides"]): row.get("old_name", row["name"]) for row in saved()}
    rows = [{"overrides": cell, **cell_names(cell), "old_name": old.get(json.dumps(cell))} for cell in CELLS]
    header = SAVED.read_text().split("SAVED = ", 1)[0]
    SAVED.write_text(f"{header}SAVED = {json.dumps(rows, indent=4)}\n")
    print(f"{len(rows)} cells -> {SAVED}")
