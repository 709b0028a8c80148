"""One cell's config as one typed, frozen object (`RunSettings`), validated once.

The sections are the schema's frozen stdlib dataclasses (schema.py, protocol_sections.py), which Hydra's
ConfigStore types the config with while composing; after composition the resolved values are validated by
pydantic v2's TypeAdapter
against the same classes: each field's range beside the field (`Annotated[..., Field(...), Allowed(...)]`), the
rules across a section's fields in its `__post_init__`, the rules across sections in `RunSettings.__post_init__`.
Stdlib dataclasses rather than pydantic models because one class then serves both: OmegaConf reads a stdlib
dataclass and ignores the pydantic metadata, and cannot read a pydantic dataclass. A refusal is the project's one
line (`model.depth=0 is not allowed: an integer in [1, 64]`), never pydantic's report.

`settings_of(cfg)` builds the object once per resolved config and process, so the pre-check's validation is the
cell's when both run in one process.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import AfterValidator, PlainValidator, TypeAdapter, ValidationError

from vit_locality.config.file_access import file_problem
from vit_locality.config.metric_names import selection_problem
from vit_locality.config.protocol_sections import AugConfig, LossConfig, check_policy_device
from vit_locality.config.schema import (
    DECLARED_TRAINER_KEYS,
    VARIANTS,
    CallbacksConfig,
    CkptMode,
    DataConfig,
    LoggerConfig,
    ModelConfig,
    OptimConfig,
    StartupConfig,
    StatsConfig,
    TrainerConfig,
)
from vit_locality.config.trainer_checks import check_global_batch, check_trainer_limits, check_val_check_interval
from vit_locality.config.value_rules import (
    OUTSIDE_IDENTITY,
    SAFE_NAME_RULE,
    Allowed,
    Flag,
    Int,
    Rule,
    SafeName,
    check,
    integer_rule,
    outside_identity,
    safe_name,
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


@functools.cache
def _adapter(cls: Any) -> TypeAdapter:
    return TypeAdapter(cls)


def refusal(error: ValidationError, cls: Any, values: Any, prefix: str = "") -> ConfigError:
    """pydantic's first error as the project's one line: the dotted setting, its value as composed and what the
    field allows (its `Allowed`), or the rule's own ConfigError where a `__post_init__` raised one."""
    first = error.errors(include_url=False)[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        return cause
    if first["type"] == "missing":
        return missing(".".join(str(part) for part in (prefix, *first["loc"]) if part))
    path, rule = _field_rule(cls, [str(part) for part in first["loc"]])
    under = first["type"] in ("greater_than", "greater_than_equal") and rule is not None and rule.below
    allowed = rule.below if under else rule.text if rule else None
    value = values
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else first["input"]
    key = ".".join([prefix, *path] if prefix else path)
    return ConfigError(f"{key}={value!r} is not allowed: {allowed or first['msg']}")


def _field_rule(cls: Any, loc: list[str]) -> tuple[list[str], Allowed | None]:
    """The path down to the deepest declared field on `loc`, and that field's `Allowed` (None if it has none)."""
    path: list[str] = []
    allowed = None
    hint: Any = cls
    for part in loc:
        hint = _dataclass_in(hint)
        if hint is None:
            break
        hints = typing.get_type_hints(hint, include_extras=True)
        if part not in hints:
            break
        path.append(part)
        hint = hints[part]
        rules = [meta for meta in getattr(hint, "__metadata__", ()) if isinstance(meta, Allowed)]
        allowed = rules[0] if rules else None
    return path, allowed


def _dataclass_in(hint: Any) -> Any:
    """The dataclass a field's type holds (`Optional[WandbConfig]` -> WandbConfig), or None. Classes only: pydantic's
    validators in `Annotated` metadata (AfterValidator(...)) are dataclass instances, not sections."""

    def is_section(candidate: Any) -> bool:
        return isinstance(candidate, type) and dataclasses.is_dataclass(candidate)

    for candidate in (hint, *typing.get_args(hint)):
        if is_section(candidate):
            return candidate
        inner = typing.get_args(candidate)
        if inner and is_section(inner[0]):
            return inner[0]
    return None


def typed_section(cls: Any, values: Any, prefix: str, context: dict | None = None) -> Any:
    """One section's values validated into `cls` (raises the one-line ConfigError)."""
    try:
        return _adapter(cls).validate_python(values, context=context)
    except ValidationError as error:
        raise refusal(error, cls, values, prefix) from None


def _variant(section: str, values: Any) -> Any:
    """A data or model section in the schema whose fields are its keys (a synthetic set's, a conv stem's)."""
    keys = set(values) if isinstance(values, Mapping) else set()
    for cls in VARIANTS[section]:
        if keys == {f.name for f in dataclasses.fields(cls)}:
            return typed_section(cls, values, section)
    return typed_section(VARIANTS[section][-1], values, section)


def _tags(tags: Any) -> bool:
    return isinstance(tags, list) and all(isinstance(t, str) and 0 < len(t) <= 64 and t.isprintable() for t in tags)


@dataclass(frozen=True)
class SweepConfig:
    continue_on_error: Flag() = False  # true: a failed cell is recorded (status "failed") and the sweep goes on


@dataclass(frozen=True)
class RunSettings:
    """A cell's validated config: every section typed, the Trainer's other arguments apart (`trainer_options`), and
    the rules across sections checked (CutMix needs two images a batch, the early layers are the model's, ...)."""

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
    run_name: outside_identity(SafeName(Any))
    # The thread count changes the order of float sums, hence a cell's last bits (as the accelerator and
    # model.compile do): how a cell is computed, recorded with the run facts, not which cell it is.
    threads: outside_identity(Int(1, MAX_THREADS, nullable=True)) = None  # null: torch's default
    tags: outside_identity(Rule(_tags, TAGS_RULE, Any)) = ()  # labels for W&B and the record
    optimized_metric: outside_identity(Rule(lambda m: m is None or m in RECORD_METRICS, METRIC_RULE, Any)) = None
    # A start from weights enters the identity as the file's content hash (identity.start_checkpoint), not its path.
    ckpt_path: outside_identity(Optional[str]) = None
    ckpt_mode: outside_identity(CkptMode) = CkptMode.weights
    # The resolved config as plain data, as composed: the record's `config`, W&B's config, the identity's source.
    config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_policy_device(self.aug, self.data.name)
        batch = self.data.batch_size
        check(batch >= 2 or not self.aug.cutmix, "data.batch_size", batch, ">= 2 when aug.cutmix=true")
        check_global_batch(batch, self.trainer.devices, self.trainer.num_nodes)
        check_val_check_interval({**self.trainer.arguments(), **self.trainer_options}, self.data.train_batches)
        early_layers_rule(self.stats.early_layers, self.model.depth)
        self._check_metric()
        self._check_start()

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
        resume_alone = checkpoint is None and self.ckpt_mode == CkptMode.resume
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


def missing(key: str) -> ConfigError:
    return ConfigError(f"{key}: missing, and the run needs it (deleted with ~{key}?)")


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The composed config as plain data, interpolations resolved (Hydra's own section left out); a setting the run
    needs that the config lacks, or a value that does not resolve, is a one-line ConfigError naming its key."""
    for name in REQUIRED:
        if name not in cfg:
            raise missing(name)
    values: dict[str, Any] = {}
    for key in cfg:
        if key == "hydra":
            continue
        try:
            node = cfg[key]
            values[str(key)] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        except OmegaConfBaseException as error:
            raise ConfigError(f"{key}: {str(error).splitlines()[0]}") from None
    return values


REQUIRED = tuple(
    f.name
    for f in dataclasses.fields(RunSettings)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name != "trainer_options"
)


def undeclared_trainer_arguments(values: Mapping[str, Any]) -> dict[str, Any]:
    """The `trainer.*` settings the schema does not declare: other Trainer arguments, as written."""
    trainer = values.get("trainer") or {}
    return {name: value for name, value in trainer.items() if name not in DECLARED_TRAINER_KEYS}


def build_settings(values: Mapping[str, Any]) -> RunSettings:
    """A resolved config validated into RunSettings: every rule of the config, none of this machine's
    (run.checks.validate adds those)."""
    plain = {**values, "trainer_options": undeclared_trainer_arguments(values), "config": dict(values)}
    return typed_section(RunSettings, plain, "")


_BUILT: dict[str, RunSettings] = {}  # canonical JSON of a resolved config, less run_name -> settings
_CACHED = 8


def settings_of(cfg: DictConfig | Mapping[str, Any]) -> RunSettings:
    """The cell's settings, built once per resolved config in this process: the pre-check's, when the cell runs in
    the process that checked its command. The run's name is no part of the lookup: the pre-check names a cell by
    its base, the Hydra job by its full name."""
    values = resolved(cfg) if isinstance(cfg, DictConfig) else dict(cfg)
    key = json.dumps({k: v for k, v in values.items() if k != "run_name"}, sort_keys=True, default=str)
    built = _BUILT.get(key)
    if built is not None:
        return built if built.config == values else _renamed(built, values)
    settings = build_settings(values)
    if len(_BUILT) >= _CACHED:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[key] = settings
    return settings


def _renamed(settings: RunSettings, values: dict[str, Any]) -> RunSettings:
    """Validated settings under another run name (the only difference): the name checked, the rest kept."""
    name = values.get("run_name")
    check(safe_name(name), "run_name", name, SAFE_NAME_RULE)
    renamed = copy.copy(settings)
    renamed.__dict__.update(run_name=name, config=values)  # a frozen dataclass: its fields are set once, here
    return renamed


def as_settings(cfg: RunSettings | DictConfig) -> RunSettings:
    """The cell's settings: given, or validated from a composed config (once per process: settings_of), without
    the checks of this machine (a config composed to build or inspect a part, not to start a cell)."""
    return cfg if isinstance(cfg, RunSettings) else settings_of(cfg)


# Keys the schema cannot mark: Hydra's own section, and Trainer arguments it does not declare that change no number.
UNDECLARED_OUTSIDE_IDENTITY = ("hydra", "trainer.profiler", "trainer.enable_model_summary", "trainer.detect_anomaly")


def outside_identity_keys() -> tuple[str, ...]:
    """Every dotted key marked OUTSIDE_IDENTITY in the schema (a marked section covers its keys), then the
    undeclared ones: what identity.NOT_IDENTITY holds."""
    keys: list[str] = []

    def walk(cls: Any, prefix: str) -> None:
        for name, hint in typing.get_type_hints(cls, include_extras=True).items():
            key = f"{prefix}{name}"
            if OUTSIDE_IDENTITY in getattr(hint, "__metadata__", ()):
                keys.append(key)
                continue
            section = _dataclass_in(hint)
            for variant in VARIANTS.get(key, [section] if section is not None else []):
                walk(variant, key + ".")

    walk(RunSettings, "")
    return tuple(dict.fromkeys([*keys, *UNDECLARED_OUTSIDE_IDENTITY]))
