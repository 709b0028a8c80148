"""One cell's config as one typed, frozen object, `RunSettings`: what every function below the entry point takes,
built by the gate from the composed values (`from_values`) or from a record's config (`from_record`)."""

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
# The per-epoch figures: `val/*` on a held-out split (data.val_size > 0), else `test_epoch/*` on the test set (the
# paper's protocol); `test/*` after fit. A search never selects on the test set.
HELD_OUT, TEST_EPOCH, TEST = "val", "test_epoch", "test"
# What every record holds that optimized_metric may name: the epoch figures and the attention headline pair.
ATTENTION_METRICS = ("min_mad_early", "mean_entropy_early")
RECORD_METRICS = (
    *(f"{split}/{figure}" for split in (HELD_OUT, TEST_EPOCH, TEST) for figure in ("acc1", "acc5", "loss")),
    "train/acc1",
    "train/loss_epoch",
    *ATTENTION_METRICS,
)
METRIC_RULE = f"null or a figure every record has: one of {', '.join(RECORD_METRICS)}"
RESUME_MODE = "resume"  # ckpt_mode that continues the checkpoint's own cell; `weights` starts a new one from it


def eval_prefix(val_size: int) -> str:
    """The name of the per-epoch evaluation figures: `val` with a held-out split, `test_epoch` without."""
    return HELD_OUT if val_size and val_size > 0 else TEST_EPOCH


def selection_problem(metric: str, val_size: int) -> str | None:
    """Why selecting on `metric` would select on the test set (one line), or None."""
    prefix = metric.split("/", 1)[0] if "/" in metric else ""
    if prefix == HELD_OUT and not (val_size and val_size > 0):
        return f"optimized_metric={metric} needs data.val_size > 0: the evaluation split is the test set"
    if prefix in (TEST, TEST_EPOCH):
        return f"optimized_metric={metric} is measured on the test set: select on val/* with data.val_size > 0"
    return None


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
    """A cell's validated config: every section typed, the Trainer's other arguments apart (`trainer_options`) and
    the rules across sections checked."""

    model_config = ConfigDict(frozen=True, extra="forbid", ignored_types=(cached_property,))

    seed: Int(0, MAX_SEED)
    # The thread count changes the order of float sums (a cell's last bits): recorded with the run facts.
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
    # The content hash of the `ckpt_path` bytes the running cell read (run/start.py); None: hashed from the file.
    _start_sha256: Optional[str] = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _across_sections(self) -> RunSettings:
        check_policy_device(self.aug, self.data.spec.default_policy)
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
        if test_set:  # a search must never select on the test set
            raise ConfigError(test_set)
        resume_alone = self.ckpt_path is None and self.ckpt_mode == RESUME_MODE
        check(not resume_alone, "ckpt_mode", RESUME_MODE, "only with ckpt_path=FILE (the checkpoint to resume from)")
        return self

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RunSettings:
        """Resolved config values (Hydra's own section left out) as settings; ConfigError, in one line, names the
        first setting that is not allowed or missing (one deleted with `~key` is never replaced by a default)."""
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
        """A record's config as settings: a setting added since takes its NeutralAt value, the one its run had."""
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
        """The config as JSON data, each value as validated, the Trainer's other arguments in its section: the
        record's `config`, W&B's config and the identity's source."""
        values = self.model_dump(mode="json", exclude={"trainer_options"}, serialize_as_any=True)
        values["trainer"] = self.trainer_arguments()
        return values

    def named(self, run_name: Any) -> RunSettings:
        """The same settings under the cell's run name (computed from the rest: precheck/names.py)."""
        check(safe_name(run_name), "run_name", run_name, SAFE_NAME_RULE)
        return self.model_copy(update={"run_name": str(run_name)})

    @property
    def data_on_device(self) -> bool:
        """`data.on_device`: auto is on when the cell trains on CUDA, where CPU workers would starve the GPU; always
        in a pack, which gathers its cells' batches on its device and augments them in its step."""
        setting = self.data.on_device
        return self.packs or (uses_cuda(self.trainer.accelerator) if setting == "auto" else bool(setting))

    @property
    def packs(self) -> bool:
        """Whether the cell trains in a pack (`sweep.packed`, set by hydra/launcher=packed, and it fits one)."""
        return self.sweep.packed and self.pack_refusal() is None

    def pack_refusal(self) -> str | None:
        """Why the cell cannot share a fused program with others (one line), or None: a pack fuses the patch stem
        without stochastic depth, in one process, from the start, in a loop of its own (no Lightning Trainer)."""
        trainer = self.trainer
        reasons = {
            "model.stem=conv (a pack fuses the patch stem)": getattr(self.model, "stem", "patch") != "patch",
            "model.drop_path > 0 (stochastic depth is not fused)": float(getattr(self.model, "drop_path", 0.0)) > 0,
            "several processes (trainer.devices, trainer.num_nodes, trainer.strategy)": trainer.devices not in (1, [0])
            or trainer.num_nodes != 1
            or str(trainer.strategy) != "auto",
            "a ckpt_path to start from": self.ckpt_path is not None,
            "Trainer arguments beyond the declared ones": bool(self.trainer_options),
            "trainer.limit_train_batches or limit_val_batches": trainer.limit_train_batches is not None
            or trainer.limit_val_batches is not None,
            "trainer.check_val_every_n_epoch != 1": trainer.check_val_every_n_epoch != 1,
            "user callbacks (callbacks.<name>._target_), which need a Lightning Trainer": bool(
                self.callbacks.user_entries()
            ),
        }
        return "; ".join(reason for reason, applies in reasons.items() if applies) or None

    @cached_property
    def protocol(self) -> TrainingProtocol:
        """The cell's training protocol, the one place it is derived from the settings."""
        return TrainingProtocol.of(self.aug, self.loss, self.data.spec.default_policy, self.data_on_device)

    @property
    def compiles(self) -> bool:
        """`model.compile`: the training step compiled as one graph (model/classifier.py); auto: on for CUDA."""
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


def _fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every field below `model` by dotted key (variants included), not descending into a section marked outside."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        yield key, field
        if OUTSIDE_IDENTITY not in field.metadata:
            section = _model_in(field.annotation, "", None)
            for variant in VARIANTS.get(key, [section] if section is not None else []):
                yield from _fields(variant, key + ".")


def applies_when_marks() -> dict[str, str]:
    """Each setting that acts only while a flag is on, with that flag: `{"aug.cutmix_alpha": "aug.cutmix", ...}`."""
    marks: dict[str, str] = {}
    for key, field in _fields(RunSettings):
        extra = field.json_schema_extra
        if isinstance(extra, dict) and extra.get("when"):
            marks[key] = f"{key[: key.rfind('.') + 1]}{extra['when']}"
    return marks


def identity_marks() -> tuple[tuple[str, ...], dict[str, Any]]:
    """The dotted keys outside the identity (marked, then undeclared), and the keys left out at a NeutralAt value."""
    fields = list(_fields(RunSettings))
    keys = [key for key, field in fields if OUTSIDE_IDENTITY in field.metadata]
    neutral = {key: mark.value for key, field in fields for mark in field.metadata if isinstance(mark, NeutralAt)}
    return tuple(dict.fromkeys([*keys, *UNDECLARED_OUTSIDE_IDENTITY])), neutral
