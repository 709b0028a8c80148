"""One cell's config as one typed, frozen object, `RunSettings`: what every function below the entry point takes.
The gate (precheck/gate.py) builds it from the composed values (`from_values`); a record's config comes back
through `from_record`. refusal.py turns pydantic's first error into the project's one line."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, PlainValidator, PrivateAttr, SerializeAsAny, model_validator

from vit_locality.catalog import GRID_SIZE
from vit_locality.config.fields import (
    OUTSIDE_IDENTITY,
    SAFE_NAME_RULE,
    Choice,
    Int,
    NeutralAt,
    Rule,
    SafeName,
    check,
    integer_rule,
    outside_identity,
    safe_name,
)
from vit_locality.config.metric_names import selection_problem
from vit_locality.config.protocol import AugConfig, LossConfig, TrainingProtocol, check_policy_device
from vit_locality.config.refusal import _model_in, missing, typed_section
from vit_locality.config.schema import (
    DECLARED_TRAINER_KEYS,
    VARIANTS,
    CallbacksConfig,
    DataConfig,
    LoggerConfig,
    ModelConfig,
    OptimConfig,
    StartupConfig,
    StatsConfig,
    SweepConfig,
    TrainerConfig,
    variant_of,
)
from vit_locality.config.trainer_checks import (
    check_epoch_limit,
    check_global_batch,
    check_trainer_limits,
    check_val_check_interval,
)
from vit_locality.errors import ConfigError

# ruff: noqa: UP007, UP045

MAX_SEED = 2**32 - 1  # the range of numpy's seed, which Lightning's seed_everything enforces
MAX_THREADS = 1024  # torch threads per cell: more than any machine here has cores; an extra zero is a typo
TAGS_RULE = "a list of strings of 1 to 64 printable characters (no newline or escape), e.g. tags=[paper,v2]"
# What every record holds that optimized_metric may name: the figures the LightningModule logs each epoch (the last
# value of each is in the record's `metrics`) and, with stats.enabled, the final attention headline pair.
ATTENTION_METRICS = ("min_mad_early", "mean_entropy_early")
RECORD_METRICS = (
    *(f"{split}/{figure}" for split in ("val", "test_epoch", "test") for figure in ("acc1", "acc5", "loss")),
    "train/acc1",
    "train/loss_epoch",
    *ATTENTION_METRICS,
)
METRIC_RULE = f"null or a figure every record has: one of {', '.join(RECORD_METRICS)}"
RESUME_MODE = "resume"  # ckpt_mode that continues the checkpoint's own cell; `weights` starts a new one from it


def _variant(section: str, values: Any) -> Any:
    """A data or model section in its variant's model (a synthetic set's, a conv stem's)."""
    return typed_section(variant_of(section, values), values, section)


def _tags(tags: Any) -> bool:
    return isinstance(tags, list) and all(isinstance(t, str) and 0 < len(t) <= 64 and t.isprintable() for t in tags)


def uses_cuda(accelerator: str) -> bool:
    """Whether `trainer.accelerator` trains on CUDA (auto: when this machine has it); torch is imported only here."""
    if accelerator in ("gpu", "cuda"):
        return True
    import torch

    return accelerator == "auto" and torch.cuda.is_available()


class RunSettings(BaseModel):
    """A cell's validated config: every section typed, the Trainer's other arguments apart (`trainer_options`), and
    the rules across sections checked (CutMix needs two images a batch, the early layers are the model's, ...)."""

    model_config = ConfigDict(frozen=True, extra="forbid", ignored_types=(cached_property,))

    seed: Int(0, MAX_SEED)
    # The thread count changes the order of float sums, hence a cell's last bits: how a cell is computed, recorded
    # with the run facts, not which cell it is.
    threads: outside_identity(Int(1, MAX_THREADS, nullable=True))  # null: torch's default
    optimized_metric: outside_identity(Rule(lambda m: m is None or m in RECORD_METRICS, METRIC_RULE))
    tags: outside_identity(Rule(_tags, TAGS_RULE))  # labels for W&B and the record
    # A start from weights enters the identity as the file's content hash (identity.start_checkpoint), not its path.
    ckpt_path: outside_identity(Rule(lambda v: v is None or isinstance(v, str), "null or a file path"))
    ckpt_mode: outside_identity(Choice("weights", RESUME_MODE))
    sweep: outside_identity(SweepConfig)
    sweep_name: outside_identity(SafeName(Any))
    run_name: outside_identity(Optional[SafeName(Any)]) = None  # None while the name itself is being computed
    data: Annotated[SerializeAsAny[DataConfig], PlainValidator(lambda values: _variant("data", values))]
    model: Annotated[SerializeAsAny[ModelConfig], PlainValidator(lambda values: _variant("model", values))]
    aug: AugConfig
    loss: LossConfig
    optim: OptimConfig
    trainer: TrainerConfig
    trainer_options: Annotated[dict[str, Any], AfterValidator(check_trainer_limits)] = {}
    logger: outside_identity(LoggerConfig)
    callbacks: outside_identity(CallbacksConfig)
    stats: StatsConfig
    startup: outside_identity(StartupConfig)  # what a cell shows when it starts
    # The content hash of the `ckpt_path` bytes the running cell read once (run/start.py): its identity names those
    # bytes, whatever happens to the file later. None: hashed from the file (the pre-check, a record's config).
    _start_sha256: Optional[str] = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _across_sections(self) -> RunSettings:
        check_policy_device(self.aug, self.data.name)
        batch = self.data.batch_size
        check(batch >= 2 or not self.aug.cutmix, "data.batch_size", batch, ">= 2 when aug.cutmix=true")
        check_global_batch(batch, self.trainer.devices, self.trainer.num_nodes)
        check_val_check_interval(self.trainer_arguments(), self.data.train_batches)
        check_epoch_limit(self.trainer_arguments())
        early_layers_rule(self.stats.early_layers, self.model.depth)
        size = getattr(self.data, "image_size", None)  # a generated set's; the official sets' patches are 4 and 8 px
        patch = size // GRID_SIZE if size else 4
        conv_fits = getattr(self.model, "stem", "patch") != "conv" or (patch >= 2 and patch & (patch - 1) == 0)
        check(conv_fits, "data.image_size", size, f"{GRID_SIZE} x a power of 2 >= 2 with model.stem=conv")
        metric = self.optimized_metric
        measured = metric not in ATTENTION_METRICS or self.stats.enabled
        check(measured, "optimized_metric", metric, "a figure the cell measures: set stats.enabled=true for it")
        test_set = selection_problem(metric, self.data.val_size) if metric else None
        if test_set:  # a search selects: it must never select on the test set (metric_names.py)
            raise ConfigError(test_set)
        resume_alone = self.ckpt_path is None and self.ckpt_mode == RESUME_MODE
        check(not resume_alone, "ckpt_mode", RESUME_MODE, "only with ckpt_path=FILE (the checkpoint to resume from)")
        return self

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RunSettings:
        """Resolved config values (Hydra's own section left out) as settings; ConfigError, in one line, names the
        first setting that is not allowed, or one the config lacks (the YAML files hold every key: one deleted with
        `~key` is refused, never replaced by a default)."""
        for name, field in cls.model_fields.items():
            section = values.get(name)
            model = variant_of(name, section) if name in VARIANTS else _model_in(field.annotation, "", None)
            if isinstance(section, Mapping) and model is not None:
                absent = next((key for key in model.model_fields if key not in section), None)
                if absent is not None:
                    raise missing(f"{name}.{absent}")
        others = undeclared_trainer_arguments(values)
        plain = dict(values)
        if isinstance(plain.get("trainer"), Mapping):
            plain["trainer"] = {k: v for k, v in plain["trainer"].items() if k not in others}
        return typed_section(cls, {**plain, "trainer_options": others}, "")

    @classmethod
    def from_record(cls, config: Mapping[str, Any]) -> RunSettings:
        """A record's config as settings: a setting added since the record was written takes the value at which it
        changes nothing (NeutralAt), the value its run had in effect."""
        values = {key: dict(value) if isinstance(value, Mapping) else value for key, value in config.items()}
        for key, value in identity_marks()[1].items():
            section, _, name = key.rpartition(".")
            if isinstance(values.get(section), dict):
                values[section].setdefault(name, value)
        values.pop("hydra", None)
        return cls.from_values(values)

    def reading_start(self, sha256: str | None) -> RunSettings:
        """The same settings, their start checkpoint's hash the one of the bytes the cell read (`sha256`)."""
        copy = self.model_copy()
        copy._start_sha256 = sha256
        return copy

    @property
    def start_sha256(self) -> str | None:
        return self._start_sha256

    def trainer_arguments(self) -> dict[str, Any]:
        """Every `trainer.*` setting, declared or not, as written."""
        return {**self.trainer.arguments(), **self.trainer_options}

    def as_record(self) -> dict[str, Any]:
        """The config as JSON data, each value as validated (`loss.ls=0` and `0.0` are one value), the Trainer's
        other arguments in its section: the record's `config` as written and read back, W&B's config and the
        identity's source."""
        values = self.model_dump(mode="json", exclude={"trainer_options"}, serialize_as_any=True)
        values["trainer"] = self.trainer_arguments()
        return values

    def named(self, run_name: Any) -> RunSettings:
        """The same settings under the cell's run name (computed from the rest: precheck/names.py)."""
        check(safe_name(run_name), "run_name", run_name, SAFE_NAME_RULE)
        return self.model_copy(update={"run_name": str(run_name)})

    @property
    def data_on_device(self) -> bool:
        """`data.on_device`: auto is on when the cell trains on CUDA, where CPU workers would starve the GPU."""
        setting = self.data.on_device
        return uses_cuda(self.trainer.accelerator) if setting == "auto" else bool(setting)

    @cached_property
    def protocol(self) -> TrainingProtocol:
        """The cell's training protocol, the one place it is derived from the settings."""
        return TrainingProtocol.of(self.aug, self.loss, self.data.name, self.data_on_device)

    @property
    def compiles(self) -> bool:
        """`model.compile`: the training step compiled as one graph (model/step_graph.py); auto: on for CUDA."""
        setting = self.model.compile
        return uses_cuda(self.trainer.accelerator) if setting == "auto" else bool(setting)


def early_layers_rule(early_layers: int, depth: int | None) -> None:
    """`stats.early_layers`: the first N layers of the model (`depth`, unknown to `analyze` until it reads the run)."""
    allowed = integer_rule(1, depth)
    check(early_layers >= 1 and (depth is None or early_layers <= depth), "stats.early_layers", early_layers, allowed)


REQUIRED = tuple(name for name, field in RunSettings.model_fields.items() if field.is_required())


def undeclared_trainer_arguments(values: Mapping[str, Any]) -> dict[str, Any]:
    """The `trainer.*` settings the schema does not declare: other Trainer arguments, as written."""
    trainer = values.get("trainer") or {}
    return {name: value for name, value in trainer.items() if name not in DECLARED_TRAINER_KEYS}


# Keys the schema cannot mark: Hydra's own section, and Trainer arguments it does not declare that change no number.
UNDECLARED_OUTSIDE_IDENTITY = ("hydra", "trainer.profiler", "trainer.enable_model_summary", "trainer.detect_anomaly")


def _marks(model: type[BaseModel]) -> Iterator[tuple[str, Any, list[Any]]]:
    for name, field in model.model_fields.items():
        yield name, field.annotation, field.metadata


def _sections(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    """Every section model below `model` (variants included), with its dotted prefix: `("aug.", AugConfig)`."""
    for name, hint, _ in _marks(model):
        section = _model_in(hint, "", None)
        for variant in VARIANTS.get(f"{prefix}{name}", [section] if section is not None else []):
            yield f"{prefix}{name}.", variant
            yield from _sections(variant, f"{prefix}{name}.")


def applies_when_marks() -> dict[str, str]:
    """Each setting that acts only while a flag is on (`applies_when` in its declaration), with that flag:
    `{"aug.cutmix_alpha": "aug.cutmix", ...}`. Off, the setting cannot change a result."""
    marks: dict[str, str] = {}
    for prefix, section in _sections(RunSettings):
        for name, field in section.model_fields.items():
            extra = field.json_schema_extra
            if isinstance(extra, dict) and extra.get("when"):
                marks[f"{prefix}{name}"] = f"{prefix}{extra['when']}"
    return marks


def identity_marks() -> tuple[tuple[str, ...], dict[str, Any]]:
    """The dotted keys marked OUTSIDE_IDENTITY (a marked section covers its keys), then the undeclared ones: what
    identity.NOT_IDENTITY holds; and the keys left out of the identity at a neutral value (NeutralAt), with it."""
    keys: list[str] = []
    neutral: dict[str, Any] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, hint, metadata in _marks(model):
            key = f"{prefix}{name}"
            if OUTSIDE_IDENTITY in metadata:
                keys.append(key)
                continue
            for mark in metadata:
                if isinstance(mark, NeutralAt):
                    neutral[key] = mark.value
            section = _model_in(hint, "", None)
            for variant in VARIANTS.get(key, [section] if section is not None else []):
                walk(variant, key + ".")

    walk(RunSettings, "")
    return tuple(dict.fromkeys([*keys, *UNDECLARED_OUTSIDE_IDENTITY])), neutral
