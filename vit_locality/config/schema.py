"""Typed schemas of the config groups, stored in Hydra's ConfigStore so that OmegaConf itself refuses an unknown key
or a value of the wrong type the moment it is set, before any check of ranges runs.

Each option file of a group names its schema first in its defaults list (`- /optim_schema@_here_`). The schemas
are stored as top-level configs rather than inside their group, so they are never offered as a group's options
(in `--help`, in tab completion, as `optim=optim_schema`). The data group's shared keys live here too, as the
defaults of the base schemas every data set's file builds on.

A schema must not add a key that its YAML files leave out: the run identity is the whole config, so a new key
would change every cell's identity. A field whose values span several types (`trainer.devices`: 2, -1, auto or a
list) is `Any` here and checked in checks.py; OmegaConf 2.3 has no unions beyond Optional. Torch-free, and
Lightning-free: the pre-check composes with these before either loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from omegaconf import MISSING, OmegaConf

from vit_locality.protocol import AugConfig, LossConfig

# OmegaConf reads the annotations at runtime and knows `Optional[X]`, not `X | None` on Python 3.10.
# ruff: noqa: UP007, UP045


class StrChoice(str, Enum):
    """A closed set of names: each member equals its string, and prints and formats as it (`f"{units}"` gives
    `grid`, not `Units.grid`), so code comparing or formatting the setting as a string works unchanged."""

    __str__ = str.__str__
    __format__ = str.__format__


class Units(StrChoice):
    """`stats.units`: distances on the unit square, in patch steps, in pixels, or over the image diagonal
    (attention.metrics.UNITS)."""

    unit = "unit"
    grid = "grid"
    pixels = "pixels"
    diagonal = "diagonal"


class ProgressBar(StrChoice):
    """`callbacks.progress_bar` (callbacks.progress_display)."""

    tqdm = "tqdm"
    rich = "rich"
    none = "none"


class WandbMode(StrChoice):
    """`logger.wandb.mode`; auto: online with an API key, else offline (tracking.wandb_run.resolve_mode)."""

    auto = "auto"
    online = "online"
    offline = "offline"
    disabled = "disabled"


@dataclass
class DataConfig:
    """What every data set's loaders share (conf/data/*.yaml set `name` and what differs)."""

    name: str = MISSING
    batch_size: int = 128
    eval_batch_size: Optional[int] = 512
    num_workers: int = 4  # per-sample workers; unused with on-device data
    # auto (on with CUDA) | true | false: the uint8 splits live on the training device and batches are augmented
    # there (crop, flip, AutoAugment/ColorJitter), no workers.
    on_device: Any = "auto"
    val_size: int = 0  # > 0 holds out that many training images and evaluates on them instead of the test set
    split_seed: int = 0


@dataclass
class DownloadableDataConfig(DataConfig):
    """The data sets fetched from an official archive."""

    root: str = "${oc.env:VIT_LOCALITY_DATA,data}"  # downloaded here when missing
    download: bool = True
    verify: bool = True  # the official checksums (per file on CIFAR, the archive on Tiny-ImageNet)


@dataclass
class GeneratedDataConfig(DataConfig):
    """What the two generated sets share (data/generated.py): sizes, classes, pixel noise and the data's own seed."""

    train_size: int = MISSING
    test_size: int = MISSING
    num_classes: int = MISSING
    image_size: int = MISSING
    noise: float = MISSING
    generator_seed: int = MISSING


@dataclass
class SyntheticDataConfig(GeneratedDataConfig):
    """The built-in seeded textures (conf/data/synthetic.yaml holds the values)."""

    period: float = MISSING


@dataclass
class GlyphsDataConfig(GeneratedDataConfig):
    """The built-in seeded stroke glyphs, the demo's locality variant (conf/data/glyphs.yaml holds the values)."""

    min_height: float = MISSING
    max_height: float = MISSING
    clutter: int = MISSING


@dataclass
class ModelConfig:
    name: str = MISSING
    depth: int = MISSING
    dim: int = MISSING
    heads: int = MISSING
    mlp_ratio: float = MISSING
    compile: Any = "auto"  # auto | true | false


@dataclass
class ConvStemModelConfig(ModelConfig):
    stem: str = "patch"  # patch | conv; a string, not a choice: the model section is pickled into checkpoints


@dataclass
class PositionCodeModelConfig(ModelConfig):
    """A model whose position embeddings start from a 2-D sine-cosine code (conf/model/vit_tiny_sincos.yaml). A
    schema of its own, like the conv stem's, so the other models' sections, and with them their run identities,
    are unchanged."""

    pos_init: str = "learned"  # learned | sincos


@dataclass
class OptimConfig:
    lr: float = MISSING
    weight_decay: float = MISSING
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    # Any: a float would turn the YAML's 5 into 5.0 and so change the identity of every run made so far.
    warmup_epochs: Any = MISSING
    min_lr_ratio: float = MISSING


@dataclass
class TrainerConfig:
    """The declared Trainer settings (conf/trainer/default.yaml). The stored schema is left open (not struct): any
    other Trainer argument may be set, by the command line or a debug config, and trainer_options checks it against
    the installed Trainer."""

    accelerator: str = MISSING
    devices: Any = MISSING  # an integer, -1, auto or a list of indices
    num_nodes: int = MISSING
    strategy: str = MISSING
    max_epochs: int = MISSING
    precision: Any = MISSING  # auto, a name (bf16-mixed) or a number (16)
    log_every_n_steps: int = MISSING
    deterministic: Any = MISSING  # true, false or warn
    check_val_every_n_epoch: int = MISSING
    gradient_clip_val: Optional[float] = None
    limit_train_batches: Any = None  # a count (int) or a fraction (float): Lightning reads the type
    limit_val_batches: Any = None


@dataclass
class WandbConfig:
    project: str = MISSING
    entity: Optional[str] = None
    mode: WandbMode = WandbMode.auto
    group: Optional[str] = None
    job_type: Optional[str] = None
    log_model: bool = False


@dataclass
class LoggerConfig:
    wandb: Optional[WandbConfig] = None  # null: the CSV record only


@dataclass
class CallbacksConfig:
    progress_bar: ProgressBar = MISSING
    checkpoint_every_n_epochs: int = MISSING


@dataclass
class StatsConfig:
    enabled: bool = MISSING
    probe_size: int = MISSING
    batch_size: int = MISSING
    every_n_epochs: int = MISSING
    early_layers: int = MISSING
    renormalize: bool = MISSING
    units: Units = MISSING
    pictures: bool = MISSING


class CkptMode(StrChoice):
    """`ckpt_mode` (with `ckpt_path`): `weights` starts a new cell from the checkpoint's weights (its content hash is
    in the identity); `resume` continues the cell that wrote it, only when its identity is this run's."""

    weights = "weights"
    resume = "resume"


@dataclass
class TrainRunConfig:
    """The top-level keys of conf/train.yaml that are typed here: where a cell starts from. Open to the others
    (seed, tags, ... are checked in checks.py)."""

    ckpt_path: Optional[str] = None
    ckpt_mode: CkptMode = CkptMode.weights
    threads: Optional[int] = None  # torch's thread count in every cell; null: torch's default (run/threads.py)


@dataclass
class StartupConfig:
    """What a cell shows when it starts; nothing here changes a result."""

    print_config: bool = MISSING


# ConfigStore name -> schema; an option file names one in its defaults list as `/<name>@_here_`.
SCHEMAS: dict[str, type] = {
    "data_downloadable_schema": DownloadableDataConfig,
    "data_synthetic_schema": SyntheticDataConfig,
    "data_glyphs_schema": GlyphsDataConfig,
    "model_schema": ModelConfig,
    "model_convstem_schema": ConvStemModelConfig,
    "model_poscode_schema": PositionCodeModelConfig,
    "aug_schema": AugConfig,
    "loss_schema": LossConfig,
    "optim_schema": OptimConfig,
    "trainer_schema": TrainerConfig,
    "logger_schema": LoggerConfig,
    "callbacks_schema": CallbacksConfig,
    "stats_schema": StatsConfig,
    "startup_schema": StartupConfig,
    "train_schema": TrainRunConfig,
}
OPEN_SCHEMAS = {"trainer_schema", "train_schema"}  # typed where declared, open to other keys
DECLARED_TRAINER_KEYS = frozenset(TrainerConfig.__dataclass_fields__)


def register_schemas() -> None:
    """Store every schema in Hydra's ConfigStore; call before composing. Idempotent (storing again replaces)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        node = OmegaConf.structured(schema)
        if name in OPEN_SCHEMAS:
            OmegaConf.set_struct(node, False)
        store.store(name=name, node=node)
