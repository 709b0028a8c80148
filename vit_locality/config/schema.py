"""The config's sections, one pydantic model per config group: each field's type, range, identity mark and refusal
words beside it, a section's own rules in its `model_validator`. Torch- and Lightning-free."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vit_locality.catalog import DATASETS, GRID_SIZE, POSITION_INITS
from vit_locality.config.extensions import check_entry_shape, user_entries
from vit_locality.config.fields import (
    Choice,
    Flag,
    Int,
    NeutralAt,
    Number,
    OneOf,
    Rule,
    SafeName,
    check,
    is_finite,
    is_int,
    outside_identity,
)
from vit_locality.config.protocol import SECTION
from vit_locality.config.trainer_checks import (
    ACCELERATORS,
    MAX_EPOCHS_RULE,
    PRECISIONS,
    STRATEGIES,
    epochs_ok,
    limit_allowed,
    limit_ok,
    trains_a_batch,
)
from vit_locality.datasets import BUILT_IN_MODULES, DatasetSpec, declared, spec_of
from vit_locality.errors import ConfigError

# OmegaConf-free, but pydantic reads these annotations at runtime on Python 3.10: Optional, not `X | None`.
# ruff: noqa: UP007, UP045

# Sizes beyond what this project's runs are for; stated so that a typo (an extra zero) is refused before it allocates.
MAX_IMAGE_SIZE = 512  # pixels a side: 64 x 64 patches of 8 pixels at the 8 x 8 grid
MAX_SYNTHETIC_IMAGES = 2_000_000  # per split
MAX_DEPTH = 64  # blocks; ViT-G has 48
MAX_DIM = 8192
GLYPH_CLASSES = 10  # the stroke alphabet's glyphs (data/glyphs.py)
NUMBER_GE_0 = "a number >= 0, finite"
ON_OFF_AUTO = (True, False, "auto")
IMAGE_SIZE_RULE = f"a multiple of {GRID_SIZE} (the {GRID_SIZE} x {GRID_SIZE} patch grid) in [16, {MAX_IMAGE_SIZE}]"
COUNT = "an integer >= 1"


class DataConfig(BaseModel):
    """What every data set's loaders share (conf/data/_shared.yaml); this class validates a name nothing declares."""

    model_config = SECTION

    name: Choice(*DATASETS)
    module: outside_identity(Optional[str]) = None  # declares the data set (DatasetSpec); None: the built-in ones
    batch_size: Int(1)
    eval_batch_size: outside_identity(
        Rule(lambda v: v is None or (is_int(v) and v >= 1), "an integer >= 1, or null (the training batch size)")
    )
    num_workers: outside_identity(Int(0))  # per-sample workers; unused with on-device data
    on_device: OneOf(ON_OFF_AUTO, "auto (on with CUDA), true or false")
    val_size: Rule(is_int, "an integer")  # > 0 holds out that many training images; range checked below
    split_seed: Int(0)

    @property
    def spec(self) -> DatasetSpec:
        """The data set's declaration."""
        return spec_of(self.name, self.module)

    @property
    def train_size_total(self) -> int:
        """Images in the training split before data.val_size holds some out (a generated set: data.train_size)."""
        return int(self.spec.train_images or getattr(self, "train_size", 0))

    @property
    def train_batches(self) -> int:
        """Training batches in an epoch: full global batches of what val_size leaves (the loaders drop the last)."""
        return (self.train_size_total - self.val_size) // self.batch_size

    @model_validator(mode="after")
    def _sizes(self) -> DataConfig:
        total, held = self.train_size_total, self.val_size
        allowed = f"an integer in [0, {total - 1}]: held out of the {total} training images of {self.name}"
        check(0 <= held < total, "data.val_size", held, allowed)
        left = f" left after data.val_size={held}" if held else ""
        check(
            self.batch_size <= total - held,
            "data.batch_size",
            self.batch_size,
            f"at most the {total - held} training images{left}",
        )
        return self


class DownloadableDataConfig(DataConfig):
    """The data sets fetched from an official archive."""

    name: SafeName()
    root: outside_identity(Rule(lambda v: isinstance(v, str) and v != "", "a directory path", str))
    download: outside_identity(Flag())
    verify: outside_identity(Flag())  # the official checksums (per file on CIFAR, the archive on Tiny-ImageNet)


class GeneratedDataConfig(DataConfig):
    """What the generated sets share (data/base.py): sizes, classes, pixel noise and the data's own seed."""

    name: SafeName()
    train_size: Int(1, MAX_SYNTHETIC_IMAGES, below=COUNT)
    test_size: Int(1, MAX_SYNTHETIC_IMAGES, below=COUNT)
    num_classes: Int(2)
    image_size: Int(16, MAX_IMAGE_SIZE, IMAGE_SIZE_RULE, multiple_of=GRID_SIZE)
    noise: Number(NUMBER_GE_0, ge=0)
    generator_seed: Int(0)


class SyntheticDataConfig(GeneratedDataConfig):
    """The built-in seeded textures (conf/data/synthetic.yaml)."""

    period: Number("a number of pixels >= 2, finite", ge=2)


class GlyphsDataConfig(GeneratedDataConfig):
    """The built-in seeded stroke glyphs, the demo's locality variant (conf/data/glyphs.yaml)."""

    num_classes: Int(2, GLYPH_CLASSES)
    min_height: Number("a fraction of the image side in [0.2, 1]", ge=0.2, le=1)
    max_height: Number("a fraction of the image side in [data.min_height, 1]", le=1)
    clutter: Int(0)

    @model_validator(mode="after")
    def _heights(self) -> GlyphsDataConfig:
        low, high = self.min_height, self.max_height
        check(low <= high, "data.max_height", high, f"a fraction in [data.min_height={low}, 1]")
        return self


class ModelConfig(BaseModel):
    """The architecture (conf/model/*.yaml); model/vit.py builds it from these fields."""

    model_config = SECTION

    name: SafeName()
    depth: Int(1, MAX_DEPTH)
    dim: Int(1, MAX_DIM)
    heads: Int(1)
    mlp_ratio: Number("> 0, finite", gt=0)
    # Stochastic depth's rate at the last block (DeiT, timm); 0 is the paper's ViT, and leaves the identity as it was.
    drop_path: Annotated[Number("a number in [0, 1)", ge=0, lt=1), NeutralAt(0.0)]
    # Outside the settings hashed: a compiled step marks its own random stream instead (identity.identity_hash).
    compile: outside_identity(OneOf(ON_OFF_AUTO, "auto, true or false"))

    def architecture(self) -> dict[str, Any]:
        """The network's keyword arguments (VisionTransformer's): every field but the name and compile."""
        return self.model_dump(exclude={"name", "compile"})

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        check(self.dim % self.heads == 0, "model.dim", self.dim, f"a multiple of model.heads={self.heads}")
        return self


class ConvStemModelConfig(ModelConfig):
    stem: Choice("patch", "conv")  # a string, not an enum: the model section is pickled into checkpoints


class PositionCodeModelConfig(ModelConfig):
    """A model whose position embeddings start from a 2-D sine-cosine code (conf/model/vit_tiny_sincos.yaml)."""

    pos_init: Choice(*POSITION_INITS)

    @model_validator(mode="after")
    def _code_fits(self) -> PositionCodeModelConfig:
        fits = self.pos_init != "sincos" or self.dim % 4 == 0
        check(fits, "model.dim", self.dim, "a multiple of 4 with model.pos_init=sincos")
        return self


def _beta_pair(betas: Any) -> bool:
    return isinstance(betas, list) and len(betas) == 2 and all(is_finite(b) and 0 <= b < 1 for b in betas)


class OptimConfig(BaseModel):
    """AdamW's settings and the warm-up + cosine schedule's (conf/optim/adamw.yaml)."""

    model_config = SECTION

    lr: Number("> 0, finite", gt=0) = 1e-3
    weight_decay: Number(">= 0, finite", ge=0) = 0.05
    betas: Rule(_beta_pair, "two numbers in [0, 1), e.g. [0.9,0.999]", list[float]) = [0.9, 0.999]
    # Any: a float would turn the YAML's 5 into 5.0 and so change the identity of every run made so far.
    warmup_epochs: Rule(lambda v: is_finite(v) and v >= 0, ">= 0, finite") = 5
    min_lr_ratio: Number("a number in [0, 1] (of optim.lr)", ge=0, le=1) = 0.0


def _devices(devices: Any) -> bool:
    listed = isinstance(devices, list) and len(devices) > 0 and all(is_int(d) and d >= 0 for d in devices)
    return listed or devices in ("auto", -1) or (is_int(devices) and devices >= 1)


class TrainerConfig(BaseModel):
    """The declared Trainer settings (conf/trainer/default.yaml); any other Trainer argument may be set too
    (RunSettings.trainer_options)."""

    model_config = SECTION

    accelerator: outside_identity(Choice(*ACCELERATORS))
    # data.batch_size is the global batch whatever the device count; the process count enters the identity apart
    devices: outside_identity(Rule(_devices, "an integer >= 1, -1 or auto (every device), or a list of device indices"))
    num_nodes: outside_identity(Int(1))
    strategy: outside_identity(Choice(*STRATEGIES))
    max_epochs: Rule(epochs_ok, MAX_EPOCHS_RULE, Annotated[int, Field(strict=True)])
    # auto, a name (bf16-mixed) or a number (16)
    precision: Rule(lambda v: (str(v) if is_int(v) else v) in PRECISIONS, f"one of {', '.join(PRECISIONS)}")
    log_every_n_steps: outside_identity(Int(1))
    deterministic: OneOf((True, False, "warn"), "true, false or warn (warn: non-deterministic operations only warn)")
    check_val_every_n_epoch: Int(1)
    gradient_clip_val: Rule(lambda v: v is None or (is_finite(v) and v >= 0), "null or a number >= 0")
    # A count (int) or a fraction (float): Lightning reads the type.
    limit_train_batches: Rule(trains_a_batch, limit_allowed("trainer.limit_train_batches"))
    limit_val_batches: Rule(limit_ok, limit_allowed("trainer.limit_val_batches"))

    def arguments(self) -> dict[str, Any]:
        """The declared settings as plain values (precision as written: 16 or bf16-mixed)."""
        return {name: getattr(self, name) for name in type(self).model_fields}


DECLARED_TRAINER_KEYS = frozenset(TrainerConfig.model_fields)
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"  # W&B's own rule (wandb_settings.Settings.validate_project), with <= 128 chars
WANDB_PROJECT_RULE = f"a name of 1 to 128 characters without any of {' '.join(WANDB_PROJECT_FORBIDDEN)} (W&B's rule)"


def _wandb_project(name: Any) -> bool:
    return isinstance(name, str) and 0 < len(name) <= 128 and not any(c in WANDB_PROJECT_FORBIDDEN for c in name)


class WandbConfig(BaseModel):
    """`logger=wandb`; mode auto: online with an API key, else offline (tracking/wandb_mode.py)."""

    model_config = SECTION

    project: Rule(_wandb_project, WANDB_PROJECT_RULE, str)
    entity: Optional[str]
    mode: Choice("auto", "online", "offline", "disabled")
    group: Optional[str]
    job_type: Optional[str]
    log_model: Flag()


class UserEntries(BaseModel):
    """A section that also takes user entries by `_target_` (config/extensions.py), kept as given, or null (off)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    section: ClassVar[str]

    def user_entries(self) -> dict[str, dict[str, Any]]:
        """The user's entries by name, as given."""
        return user_entries(self.model_extra or {})

    @model_validator(mode="after")
    def _entries_shaped(self) -> UserEntries:
        for name, value in (self.model_extra or {}).items():
            check_entry_shape(self.section, name, value)
        return self


class LoggerConfig(UserEntries):
    """The CSV log always; W&B with `logger=wandb`; any Lightning logger as `logger.<name>._target_=<class>`."""

    section: ClassVar[str] = "logger"

    wandb: Optional[WandbConfig]  # null: the CSV record only


class CallbacksConfig(UserEntries):
    """The cell's own callbacks' settings; any Lightning callback as `callbacks.<name>._target_=<class>`."""

    section: ClassVar[str] = "callbacks"

    progress_bar: Choice("tqdm", "rich", "none")
    checkpoint_every_n_epochs: Int(1)


class StatsConfig(BaseModel):
    """How the attention statistics are measured and shown (docs/metrics.md); `units` is display only."""

    model_config = SECTION

    enabled: Flag() = True
    probe_size: Int(1) = 512
    batch_size: outside_identity(Int(1)) = 128  # statistics do not depend on how probe images are batched
    every_n_epochs: Int(1) = 1
    early_layers: Rule(is_int, "an integer") = 2  # in [1, model.depth]: checked with the model (early_layers_rule)
    renormalize: Flag() = True
    units: Choice("unit", "grid", "pixels", "diagonal") = "unit"  # display only (attention/units.py)
    pictures: outside_identity(Flag()) = True


class StartupConfig(BaseModel):
    """What a cell shows when it starts; nothing here changes a result."""

    model_config = SECTION

    print_config: Flag()


class SweepConfig(BaseModel):
    model_config = SECTION

    continue_on_error: Flag()  # true: a failed cell is recorded (status "failed") and the sweep goes on
    # true: the cell trains in a pack of cells (hydra/launcher=packed sets it; run/pack.py), its own random stream
    packed: outside_identity(Flag()) = False


# A section's values are validated by the variant `variant_of` picks: the data set's by the section class its
# declaration names (datasets.py), the model's by the fields its option file sets (a conv stem's, a position code's).
MODEL_VARIANTS = (ConvStemModelConfig, PositionCodeModelConfig)
VARIANTS = {
    "data": (SyntheticDataConfig, GlyphsDataConfig, DownloadableDataConfig, GeneratedDataConfig),
    "model": (ModelConfig, *MODEL_VARIANTS),
}


def variant_of(section: str, values: Any) -> type[BaseModel]:
    """The model that validates a data or model section."""
    if not isinstance(values, dict):
        return DownloadableDataConfig if section == "data" else ModelConfig
    if section == "data":  # a name nothing declares is validated by DataConfig, which refuses it
        return data_variant(values)
    extra = set(values) - set(ModelConfig.model_fields)
    return next((cls for cls in MODEL_VARIANTS if extra and extra <= set(cls.model_fields)), ModelConfig)


def data_variant(values: dict[str, Any]) -> type[BaseModel]:
    """The section class a data section's declaration names; for a name nothing declares, a refusal naming the sets
    its `data.module` may name (DataConfig's for a record without data.module)."""
    name, module = values.get("name"), values.get("module")
    known = declared(None if module is None else str(module))
    if isinstance(name, str) and name in known:
        return known[name].config_class()
    if module is None:
        return DataConfig
    where = "the built-in ones" if module in BUILT_IN_MODULES else f"declared in data.module={module}"
    raise ConfigError(f"data.name={name!r} is not allowed: one of {', '.join(known)} ({where})")
