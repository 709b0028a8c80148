"""One cell's config as one typed, frozen object (`RunSettings`), validated once.

Hydra composes the YAML files (its struct mode refuses an unknown key); `settings_of` validates the resolved values
with pydantic against the section models (schema.py, protocol_sections.py) and the rules across sections below,
once per resolved config and process, so the pre-check's validation is the cell's when both run in one process.
`refusal` turns pydantic's first error into the project's one line (`model.depth=0 is not allowed: an integer in
[1, 64]`), never pydantic's report.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    model_validator,
)

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
from vit_locality.config.file_access import file_problem
from vit_locality.config.metric_names import selection_problem
from vit_locality.config.protocol_sections import AugConfig, LossConfig, check_policy_device
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
# What every record holds that optimized_metric may name: the figures the LightningModule logs each epoch
# (model/classifier.py; the last value of each is in the record's `metrics`; `train/loss` and `lr` are logged every
# log_every_n_steps only) and, with stats.enabled, the final attention headline pair (`attention.final`).
ATTENTION_METRICS = ("min_mad_early", "mean_entropy_early")
RECORD_METRICS = (
    *(f"{split}/{figure}" for split in ("val", "test_epoch", "test") for figure in ("acc1", "acc5", "loss")),
    "train/acc1",
    "train/loss_epoch",
    *ATTENTION_METRICS,
)
METRIC_RULE = f"null or a figure every record has: one of {', '.join(RECORD_METRICS)}"


def _variant(section: str, values: Any) -> Any:
    """A data or model section in its variant's model (a synthetic set's, a conv stem's)."""
    return typed_section(variant_of(section, values), values, section)


def _tags(tags: Any) -> bool:
    return isinstance(tags, list) and all(isinstance(t, str) and 0 < len(t) <= 64 and t.isprintable() for t in tags)


class RunSettings(BaseModel):
    """A cell's validated config: every section typed, the Trainer's other arguments apart (`trainer_options`), and
    the rules across sections checked (CutMix needs two images a batch, the early layers are the model's, ...)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    aug: AugConfig
    loss: LossConfig
    data: Annotated[DataConfig, PlainValidator(lambda values: _variant("data", values))]
    model: Annotated[ModelConfig, PlainValidator(lambda values: _variant("model", values))]
    optim: OptimConfig
    trainer: TrainerConfig
    trainer_options: Annotated[dict[str, Any], AfterValidator(check_trainer_limits)]
    stats: StatsConfig
    callbacks: outside_identity(CallbacksConfig)
    logger: outside_identity(LoggerConfig)
    startup: outside_identity(StartupConfig)  # what a cell shows when it starts
    seed: Int(0, MAX_SEED)
    sweep: outside_identity(SweepConfig)
    sweep_name: outside_identity(SafeName(Any))
    run_name: outside_identity(Optional[SafeName(Any)]) = None  # None while the name itself is being computed
    # The thread count changes the order of float sums, hence a cell's last bits (as the accelerator and
    # model.compile do): how a cell is computed, recorded with the run facts, not which cell it is.
    threads: outside_identity(Int(1, MAX_THREADS, nullable=True))  # null: torch's default
    tags: outside_identity(Rule(_tags, TAGS_RULE))  # labels for W&B and the record
    optimized_metric: outside_identity(Rule(lambda m: m is None or m in RECORD_METRICS, METRIC_RULE))
    # A start from weights enters the identity as the file's content hash (identity.start_checkpoint), not its path.
    ckpt_path: outside_identity(Rule(lambda v: v is None or isinstance(v, str), "null or a file path"))
    ckpt_mode: outside_identity(Choice("weights", "resume"))
    # The resolved config as plain data, each declared value as validated (`loss.ls=0` and `0.0` are one value):
    # the record's `config`, W&B's config, the identity's source.
    config: dict[str, Any] = Field(default_factory=dict, repr=False)

    @model_validator(mode="after")
    def _across_sections(self) -> RunSettings:
        check_policy_device(self.aug, self.data.name)
        batch = self.data.batch_size
        check(batch >= 2 or not self.aug.cutmix, "data.batch_size", batch, ">= 2 when aug.cutmix=true")
        check_global_batch(batch, self.trainer.devices, self.trainer.num_nodes)
        check_val_check_interval({**self.trainer.arguments(), **self.trainer_options}, self.data.train_batches)
        check_epoch_limit({**self.trainer.arguments(), **self.trainer_options})
        early_layers_rule(self.stats.early_layers, self.model.depth)
        self._check_metric()
        self._check_start()
        return self

    def _check_metric(self) -> None:
        metric = self.optimized_metric
        measured = metric not in ATTENTION_METRICS or self.stats.enabled
        check(measured, "optimized_metric", metric, "a figure the cell measures: set stats.enabled=true for it")
        test_set = selection_problem(metric, self.data.val_size) if metric else None
        if test_set:  # a search selects: it must never select on the test set (vit_locality/config/metric_names.py)
            raise ConfigError(test_set)

    def _check_start(self) -> None:
        """`ckpt_path`: a checkpoint file this user can read, or null; whether it is a checkpoint, and of which cell,
        the run itself finds out before anything is recorded (run/start.py)."""
        checkpoint = self.ckpt_path
        resume_alone = checkpoint is None and self.ckpt_mode == "resume"
        check(not resume_alone, "ckpt_mode", "resume", "only with ckpt_path=FILE (the checkpoint to resume from)")
        if checkpoint is not None:
            problem = file_problem(Path(checkpoint).expanduser()) if checkpoint != "" else "empty"
            allowed = f"null or a checkpoint file this user can read ({problem})"
            check(problem is None, "ckpt_path", checkpoint, allowed)

    def trainer_arguments(self) -> dict[str, Any]:
        """Every `trainer.*` setting, declared or not, as written."""
        return {**self.trainer.arguments(), **self.trainer_options}


def early_layers_rule(early_layers: int, depth: int | None) -> None:
    """`stats.early_layers`: the first N layers of the model (`depth`, unknown to `analyze` until it reads the run)."""
    allowed = integer_rule(1, depth)
    check(early_layers >= 1 and (depth is None or early_layers <= depth), "stats.early_layers", early_layers, allowed)


REQUIRED = tuple(
    name
    for name, field in RunSettings.model_fields.items()
    if field.is_required() and name not in ("trainer_options", "config")
)


def resolved(cfg: DictConfig, named: bool = True) -> dict[str, Any]:
    """The composed config as plain data, interpolations resolved (Hydra's own section left out); a setting the run
    needs that the config lacks, or a value that does not resolve, is a one-line ConfigError naming its key."""
    for name in REQUIRED:
        if name not in cfg:
            raise missing(name)
    values: dict[str, Any] = {}
    for key in cfg:
        if key == "hydra" or (key == "run_name" and not named):
            continue
        try:
            node = cfg[key]
            values[str(key)] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        except OmegaConfBaseException as error:
            raise ConfigError(f"{key}: {str(error).splitlines()[0]}") from None
    return values


def undeclared_trainer_arguments(values: Mapping[str, Any]) -> dict[str, Any]:
    """The `trainer.*` settings the schema does not declare: other Trainer arguments, as written."""
    trainer = values.get("trainer") or {}
    return {name: value for name, value in trainer.items() if name not in DECLARED_TRAINER_KEYS}


def build_settings(values: Mapping[str, Any]) -> RunSettings:
    """A resolved config validated into RunSettings: every rule of the config, none of this machine's
    (run.checks.validate adds those)."""
    plain = {k: v for k, v in values.items() if k != "config"}
    others = undeclared_trainer_arguments(values)
    if isinstance(plain.get("trainer"), Mapping):
        plain["trainer"] = {k: v for k, v in plain["trainer"].items() if k not in others}
    settings = typed_section(RunSettings, {**plain, "trainer_options": others}, "")
    return settings.model_copy(update={"config": _as_validated(dict(values), settings)})


def _as_validated(values: dict[str, Any], model: BaseModel) -> dict[str, Any]:
    """The resolved values with each declared value as its field validated it (an int where a float is declared
    becomes that float), keys and order as composed; undeclared keys (other Trainer arguments) as written."""
    typed = {}
    for key, value in values.items():
        field_value = getattr(model, key, None) if key in type(model).model_fields else None
        if isinstance(field_value, BaseModel) and isinstance(value, dict):
            typed[key] = _as_validated(value, field_value)
        elif key in type(model).model_fields and not isinstance(field_value, BaseModel):
            typed[key] = list(field_value) if isinstance(field_value, tuple) else field_value
        else:
            typed[key] = value
    return typed


_BUILT: dict[str, RunSettings] = {}  # canonical JSON of a resolved config, less run_name -> settings
_CACHED = 8


def settings_of(cfg: DictConfig | Mapping[str, Any], named: bool = True) -> RunSettings:
    """The cell's settings, built once per resolved config in this process: the pre-check's, when the cell runs in
    the process that checked its command. The run's name is no part of the lookup: a cell is validated before its
    name is known, and the name follows from the rest (`named=False`: the name is left unresolved, for what
    computes it)."""
    values = resolved(cfg, named) if isinstance(cfg, DictConfig) else dict(cfg)
    key = json.dumps({k: v for k, v in values.items() if k != "run_name"}, sort_keys=True, default=str)
    built = _BUILT.get(key)
    if built is not None:
        return built if built.run_name == values.get("run_name") else _renamed(built, values)
    settings = build_settings(values)
    if len(_BUILT) >= _CACHED:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[key] = settings
    return settings


def _renamed(settings: RunSettings, values: dict[str, Any]) -> RunSettings:
    """Validated settings under another run name (the only difference): the name checked, the rest kept."""
    name = values.get("run_name")
    check(name is None or safe_name(name), "run_name", name, SAFE_NAME_RULE)
    config = {**settings.config, "run_name": name} if name is not None else settings.config
    return settings.model_copy(update={"run_name": name, "config": config})


def as_settings(cfg: RunSettings | DictConfig) -> RunSettings:
    """The cell's settings: given, or validated from a composed config (once per process: settings_of), without
    the checks of this machine (a config composed to build or inspect a part, not to start a cell)."""
    return cfg if isinstance(cfg, RunSettings) else settings_of(cfg)


# Keys the schema cannot mark: Hydra's own section, and Trainer arguments it does not declare that change no number.
UNDECLARED_OUTSIDE_IDENTITY = ("hydra", "trainer.profiler", "trainer.enable_model_summary", "trainer.detect_anomaly")


def _marks(model: type[BaseModel]) -> typing.Iterator[tuple[str, Any, list[Any]]]:
    for name, field in model.model_fields.items():
        yield name, field.annotation, field.metadata


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
