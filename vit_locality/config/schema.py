"""The config's sections, each declared once as a frozen stdlib dataclass: its keys and types, each field's range and
the rules across its own fields beside them. One class is both the schema Hydra's ConfigStore types the composed
config with (OmegaConf refuses an unknown key or a value of the wrong type while composing) and the schema pydantic
v2's TypeAdapter validates the composed values against, once per cell (settings.py). Stdlib dataclasses, because
OmegaConf reads them and ignores the `Annotated` pydantic metadata (pydantic dataclasses it cannot read).

Each option file of a group names its schema first in its defaults list (`- /optim_schema@_here_`). The schemas
are stored as top-level configs rather than inside their group, so they are never offered as a group's options.
A schema must not add a key that its YAML files leave out: the run identity is the whole config, so a new key
would change every cell's identity. A field whose values span several types (`trainer.devices`: 2, -1, auto or a
list) is `Any` to OmegaConf, which has no unions beyond Optional, and checked by its rule. Torch-free and
Lightning-free: the pre-check composes and validates with these before either loads.
"""

from dataclasses import dataclass, field
from typing import Annotated, Any, Optional

from omegaconf import MISSING, OmegaConf
from pydantic import Field

from vit_locality.catalog import DATASETS, GRID_SIZE, POSITION_INITS
from vit_locality.config.protocol_sections import AugConfig, LossConfig
from vit_locality.config.trainer_checks import ACCELERATORS, PRECISIONS, STRATEGIES, limit_allowed, limit_ok
from vit_locality.config.value_rules import (
    Flag,
    Int,
    Number,
    OneOf,
    Rule,
    SafeName,
    StrChoice,
    check,
    is_finite,
    is_int,
    outside_identity,
)

# OmegaConf reads the annotations at runtime and knows `Optional[X]`, not `X | None` on Python 3.10.
# ruff: noqa: UP007, UP045

# Official training-set sizes, which data.val_size must leave images of (the generated sets' is data.train_size).
TRAIN_SIZES = {"cifar10": 50_000, "cifar100": 50_000, "tiny_imagenet": 100_000}
# Sizes beyond what this project's runs are for; stated so that a typo (an extra zero) is refused before it allocates.
MAX_IMAGE_SIZE = 512  # pixels a side: 64 x 64 patches of 8 pixels at the 8 x 8 grid
MAX_SYNTHETIC_IMAGES = 2_000_000  # per split
MAX_DEPTH = 64  # blocks; ViT-G has 48
MAX_DIM = 8192
MODEL_STEMS = ("patch", "conv")
GLYPH_CLASSES = 10  # the stroke alphabet's glyphs (data/glyphs.py)
NUMBER_GE_0 = "a number >= 0, finite"
ON_OFF_AUTO = (True, False, "auto")


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


class CkptMode(StrChoice):
    """`ckpt_mode` (with `ckpt_path`): `weights` starts a new cell from the checkpoint's weights (its content hash is
    in the identity); `resume` continues the cell that wrote it, only when its identity is this run's."""

    weights = "weights"
    resume = "resume"


@dataclass(frozen=True)
class DataConfig:
    """What every data set's loaders share (conf/data/*.yaml set `name` and what differs)."""

    name: OneOf(DATASETS) = MISSING
    batch_size: Int(1) = 128
    eval_batch_size: outside_identity(
        Rule(
            lambda v: v is None or (is_int(v) and v >= 1),
            "an integer >= 1, or null (the training batch size)",
            Optional[int],
        )
    ) = 512
    num_workers: outside_identity(Int(0)) = 4  # per-sample workers; unused with on-device data
    # auto (on with CUDA) | true | false: the uint8 splits live on the training device and batches are augmented
    # there (crop, flip, AutoAugment/ColorJitter), no workers.
    on_device: OneOf(ON_OFF_AUTO, "auto (on with CUDA), true or false", Any) = "auto"
    val_size: Annotated[int, Field(strict=True)] = (
        0  # > 0 holds out that many training images and evaluates on them instead of the test set
    )
    split_seed: Int(0) = 0

    @property
    def train_size_total(self) -> int:
        """Images in the training split before data.val_size holds some out."""
        return TRAIN_SIZES[self.name]

    @property
    def train_batches(self) -> int:
        """Training batches in an epoch: full global batches of what val_size leaves (the loaders drop the last)."""
        return (self.train_size_total - self.val_size) // self.batch_size

    def __post_init__(self) -> None:
        total, held = self.train_size_total, self.val_size
        allowed = f"an integer in [0, {total - 1}]: held out of the {total} training images of {self.name}"
        check(is_int(held) and 0 <= held < total, "data.val_size", held, allowed)
        left = f" left after data.val_size={held}" if held else ""
        allowed = f"at most the {total - held} training images{left}"
        check(self.batch_size <= total - held, "data.batch_size", self.batch_size, allowed)


@dataclass(frozen=True)
class DownloadableDataConfig(DataConfig):
    """The data sets fetched from an official archive."""

    root: outside_identity(Rule(lambda v: v != "", "a directory path", str)) = "${oc.env:VIT_LOCALITY_DATA,data}"
    download: outside_identity(Flag()) = True
    verify: outside_identity(Flag()) = True  # the official checksums (per file on CIFAR, the archive on Tiny-ImageNet)

    def __post_init__(self) -> None:
        check(self.name in TRAIN_SIZES, "data.name", self.name, f"one of {', '.join(TRAIN_SIZES)} (an archive's)")
        super().__post_init__()


IMAGE_SIZE_RULE = f"a multiple of {GRID_SIZE} (the {GRID_SIZE} x {GRID_SIZE} patch grid) in [16, {MAX_IMAGE_SIZE}]"


@dataclass(frozen=True)
class GeneratedDataConfig(DataConfig):
    """What the two generated sets share (data/generated.py): sizes, classes, pixel noise and the data's own seed."""

    train_size: Int(1, MAX_SYNTHETIC_IMAGES, below="an integer >= 1") = MISSING
    test_size: Int(1, MAX_SYNTHETIC_IMAGES, below="an integer >= 1") = MISSING
    num_classes: Int(2) = MISSING
    image_size: Int(16, MAX_IMAGE_SIZE, IMAGE_SIZE_RULE, multiple_of=GRID_SIZE) = MISSING
    noise: Number(NUMBER_GE_0, ge=0) = MISSING
    generator_seed: Int(0) = MISSING

    @property
    def train_size_total(self) -> int:
        return self.train_size


@dataclass(frozen=True)
class SyntheticDataConfig(GeneratedDataConfig):
    """The built-in seeded textures (conf/data/synthetic.yaml holds the values)."""

    period: Number("a number of pixels >= 2, finite", ge=2) = MISSING


@dataclass(frozen=True)
class GlyphsDataConfig(GeneratedDataConfig):
    """The built-in seeded stroke glyphs, the demo's locality variant (conf/data/glyphs.yaml holds the values)."""

    min_height: Number("a fraction of the image side in [0.2, 1]", ge=0.2, le=1) = MISSING
    max_height: float = MISSING
    clutter: Int(0) = MISSING

    def __post_init__(self) -> None:
        check(
            self.num_classes <= GLYPH_CLASSES,
            "data.num_classes",
            self.num_classes,
            f"an integer in [2, {GLYPH_CLASSES}]",
        )
        low, high = self.min_height, self.max_height
        check(
            is_finite(high) and low <= high <= 1, "data.max_height", high, f"a fraction in [data.min_height={low}, 1]"
        )
        super().__post_init__()


@dataclass(frozen=True)
class ModelConfig:
    name: SafeName() = MISSING
    depth: Int(1, MAX_DEPTH) = MISSING
    dim: Int(1, MAX_DIM) = MISSING
    heads: Int(1) = MISSING
    mlp_ratio: Number("> 0, finite", gt=0) = MISSING
    compile: outside_identity(OneOf(ON_OFF_AUTO, "auto, true or false", Any)) = "auto"  # the same maths either way

    def __post_init__(self) -> None:
        check(self.dim % self.heads == 0, "model.dim", self.dim, f"a multiple of model.heads={self.heads}")


@dataclass(frozen=True)
class ConvStemModelConfig(ModelConfig):
    stem: OneOf(MODEL_STEMS) = "patch"  # a string, not an enum: the model section is pickled into checkpoints


@dataclass(frozen=True)
class PositionCodeModelConfig(ModelConfig):
    """A model whose position embeddings start from a 2-D sine-cosine code (conf/model/vit_tiny_sincos.yaml). A
    schema of its own, like the conv stem's, so the other models' sections, and with them their run identities,
    are unchanged."""

    pos_init: OneOf(POSITION_INITS) = "learned"

    def __post_init__(self) -> None:
        fits = self.pos_init != "sincos" or self.dim % 4 == 0
        check(fits, "model.dim", self.dim, "a multiple of 4 with model.pos_init=sincos")
        super().__post_init__()


def _beta_pair(betas: Any) -> bool:
    return isinstance(betas, list) and len(betas) == 2 and all(is_finite(b) and 0 <= b < 1 for b in betas)


@dataclass(frozen=True)
class OptimConfig:
    lr: Number("> 0, finite", gt=0) = MISSING
    weight_decay: Number(">= 0, finite", ge=0) = MISSING
    betas: Rule(_beta_pair, "two numbers in [0, 1), e.g. [0.9,0.999]", list[float]) = field(
        default_factory=lambda: [0.9, 0.999]
    )
    # Any: a float would turn the YAML's 5 into 5.0 and so change the identity of every run made so far.
    warmup_epochs: Rule(lambda v: is_finite(v) and v >= 0, ">= 0, finite") = MISSING
    min_lr_ratio: Number("a number in [0, 1] (of optim.lr)", ge=0, le=1) = MISSING


DETERMINISTIC_RULE = "true, false or warn (warn: non-deterministic operations only warn)"


def _devices(devices: Any) -> bool:
    listed = isinstance(devices, list) and len(devices) > 0 and all(is_int(d) and d >= 0 for d in devices)
    return listed or devices in ("auto", -1) or (is_int(devices) and devices >= 1)


@dataclass(frozen=True)
class TrainerConfig:
    """The declared Trainer settings (conf/trainer/default.yaml). The stored schema is left open (not struct): any
    other Trainer argument may be set, by the command line or a debug config; the typed config holds those apart
    (RunSettings.trainer_options), checked against the installed Trainer."""

    accelerator: outside_identity(OneOf(ACCELERATORS)) = MISSING
    # data.batch_size is the global batch whatever the device count; the process count enters the identity apart
    devices: outside_identity(
        Rule(_devices, "an integer >= 1, -1 or auto (every device), or a list of device indices")
    ) = MISSING
    num_nodes: outside_identity(Int(1)) = MISSING
    strategy: outside_identity(OneOf(STRATEGIES)) = MISSING
    max_epochs: Int(1) = MISSING
    # auto, a name (bf16-mixed) or a number (16)
    precision: Rule(lambda v: (str(v) if is_int(v) else v) in PRECISIONS, f"one of {', '.join(PRECISIONS)}") = MISSING
    log_every_n_steps: outside_identity(Int(1)) = MISSING
    deterministic: OneOf((True, False, "warn"), DETERMINISTIC_RULE, Any) = MISSING
    check_val_every_n_epoch: Int(1) = MISSING
    gradient_clip_val: Rule(
        lambda v: v is None or (is_finite(v) and v >= 0), "null or a number >= 0", Optional[float]
    ) = None
    # A count (int) or a fraction (float): Lightning reads the type.
    limit_train_batches: Rule(limit_ok, limit_allowed("trainer.limit_train_batches")) = None
    limit_val_batches: Rule(limit_ok, limit_allowed("trainer.limit_val_batches")) = None

    def arguments(self) -> dict[str, Any]:
        """The declared settings as plain values (precision as written: 16 or bf16-mixed)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


DECLARED_TRAINER_KEYS = frozenset(TrainerConfig.__dataclass_fields__)
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"  # W&B's own rule (wandb_settings.Settings.validate_project), with <= 128 chars
WANDB_PROJECT_RULE = f"a name of 1 to 128 characters without any of {' '.join(WANDB_PROJECT_FORBIDDEN)} (W&B's rule)"


def _wandb_project(name: Any) -> bool:
    return isinstance(name, str) and 0 < len(name) <= 128 and not any(c in WANDB_PROJECT_FORBIDDEN for c in name)


@dataclass  # not frozen: OmegaConf creates a nested section's node while merging, read-only if its class is frozen
class WandbConfig:
    project: Rule(_wandb_project, WANDB_PROJECT_RULE, str) = MISSING
    entity: Optional[str] = None
    mode: WandbMode = WandbMode.auto
    group: Optional[str] = None
    job_type: Optional[str] = None
    log_model: Flag() = False


@dataclass(frozen=True)
class LoggerConfig:
    wandb: Optional[WandbConfig] = None  # null: the CSV record only


@dataclass(frozen=True)
class CallbacksConfig:
    progress_bar: ProgressBar = MISSING
    checkpoint_every_n_epochs: Int(1) = MISSING


@dataclass(frozen=True)
class StatsConfig:
    enabled: Flag() = MISSING
    probe_size: Int(1) = MISSING
    batch_size: outside_identity(Int(1)) = MISSING  # statistics do not depend on how probe images are batched
    every_n_epochs: Int(1) = MISSING
    early_layers: Annotated[int, Field(strict=True)] = (
        MISSING  # in [1, model.depth]: checked with the model (settings.early_layers_rule)
    )
    renormalize: Flag() = MISSING
    units: Units = MISSING
    pictures: outside_identity(Flag()) = MISSING


@dataclass(frozen=True)
class TrainRunConfig:
    """The top-level keys of conf/train.yaml typed while composing: where a cell starts from, its thread count. The
    others are typed in the cell's settings (settings.RunSettings)."""

    ckpt_path: outside_identity(Optional[str]) = None
    ckpt_mode: outside_identity(CkptMode) = CkptMode.weights
    threads: outside_identity(Optional[int]) = None  # torch's thread count in every cell; null: torch's default


@dataclass(frozen=True)
class StartupConfig:
    """What a cell shows when it starts; nothing here changes a result."""

    print_config: Flag() = MISSING


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
# A section's values are validated by the schema whose fields are its keys.
VARIANTS = {
    "data": (SyntheticDataConfig, GlyphsDataConfig, DownloadableDataConfig),
    "model": (ModelConfig, ConvStemModelConfig, PositionCodeModelConfig),
}


def register_schemas() -> None:
    """Store every schema in Hydra's ConfigStore; call before composing. Idempotent (storing again replaces). The
    frozen classes give read-only nodes: made writable, since the YAML files and the command line set them."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        node = OmegaConf.structured(schema)
        OmegaConf.set_readonly(node, False)
        if name in OPEN_SCHEMAS:
            OmegaConf.set_struct(node, False)
        store.store(name=name, node=node)
