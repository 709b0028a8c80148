"""The training protocol as one typed value: what augments a batch and what softens its targets.

Its settings are the config's `aug` and `loss` sections (config/protocol_sections.py).
`Protocol` is built once per cell from the validated sections (`RunSettings.protocol`), or from a record
(`from_record`); the module's batch mixing, the run record, the one-line description, the cell name, the W&B tags
and the report's grouping all read it, so a new knob is a field with its rule here, its use in the mixing code and
its line in one YAML file. Importable without torch: the config checks run before torch loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from vit_locality.catalog import CELL_NAMES, COLORJITTER, resolve_policy
from vit_locality.config.protocol_sections import AugConfig, LossConfig, check_policy_device

if TYPE_CHECKING:
    from omegaconf import DictConfig


# The protocol's fields are all in the record; these are the ones a report groups runs by (the others, such as
# the CutMix alpha, are settings whose differences inside a cell the report notes).
GROUPED_FIELDS = ("autoaug", "cutmix", "ls", "mixup")
WHERE_SHOWN = {"gpu": ", batched on gpu", "data_on_device": ", batched on the device"}  # in the description


def _applies_when(flag: str, default: Any) -> Any:
    """A setting that applies only while `flag` is on: the record holds None for it otherwise."""
    return field(default=default, metadata={"when": flag})


CASTS = {"bool": bool, "float": float}  # a field's plain type (a config may give an int where a float is meant)


@dataclass(frozen=True, kw_only=True)
class Protocol:
    """One cell's protocol. Built once from the cell's validated settings (`RunSettings.protocol`, through
    `from_sections`) or from a record (`from_record`); the module, the record, the description, the cell name,
    the W&B tags and the report's grouping all read it. A field named as an `aug` or `loss` setting takes that
    setting's value; the record holds the fields in this order (the description before `autoaug_device`).

    `policy` is the resolved policy (`auto` already replaced by the data set's own; None in a record of a run
    without AutoAugment); `autoaug_device` is where AutoAugment runs (cpu, gpu or data_on_device)."""

    autoaug: bool = False
    cutmix: bool = False
    ls: float = 0.0
    policy: str | None = _applies_when("autoaug", None)
    cutmix_alpha: float = _applies_when("cutmix", 1.0)
    cutmix_prob: float = _applies_when("cutmix", 1.0)
    mixup: bool = False
    mixup_alpha: float = _applies_when("mixup", 1.0)
    autoaug_device: str = _applies_when("autoaug", "cpu")

    @classmethod
    def from_sections(cls, aug: AugConfig, loss: LossConfig, data_name: str, on_device: bool = False) -> Protocol:
        """The protocol of validated `aug` and `loss` sections, the policy resolved for `data_name`; `on_device`: the
        data sit on the training device and augment there (data.on_device.data_on_device)."""
        names = {f.name for f in fields(cls)}
        settings = {name: getattr(s, name) for s in (aug, loss) for name in type(s).model_fields if name in names}
        settings["policy"] = resolve_policy(str(aug.policy), data_name)
        settings["autoaug_device"] = "data_on_device" if on_device else str(aug.device)
        return cls(**settings).normalized()

    @classmethod
    def of_settings(cls, settings: Any, on_device: bool = False) -> Protocol:
        """The protocol of a cell's validated settings (config.settings.RunSettings), built once per settings object
        and data path: the module, the record and the W&B tags of a cell read the same object."""
        key = (id(settings), on_device)
        if key not in _OF_SETTINGS:
            if len(_OF_SETTINGS) >= _REMEMBERED:
                _OF_SETTINGS.pop(next(iter(_OF_SETTINGS)))
            protocol = cls.from_sections(settings.aug, settings.loss, settings.data.name, on_device)
            _OF_SETTINGS[key] = (settings, protocol)  # the settings kept alive, so their id is not reused meanwhile
        return _OF_SETTINGS[key][1]

    @classmethod
    def from_cfg(cls, cfg: DictConfig, on_device: bool = False) -> Protocol:
        """The protocol of a composed config's `aug`, `loss` and `data.name`, its sections validated on the way
        (ConfigError names a value out of range). A cell takes its protocol from its settings instead."""
        from omegaconf import OmegaConf

        from vit_locality.config.refusal import typed_section

        aug = typed_section(AugConfig, OmegaConf.to_container(cfg.aug, resolve=True), "aug")
        loss = typed_section(LossConfig, OmegaConf.to_container(cfg.loss, resolve=True), "loss")
        check_policy_device(aug, str(cfg.data.name))
        return cls.from_sections(aug, loss, str(cfg.data.name), on_device)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Protocol:
        """The protocol of a record's `protocol` section; a key the record lacks (or holds None for, as a setting
        that did not apply) is at its default: a record from before MixUp is a run without it."""
        given = {f.name: record[f.name] for f in fields(cls) if record.get(f.name) is not None}
        return cls(**given).normalized()

    def normalized(self) -> Protocol:
        """The same protocol with plain Python types (the config may give an int where a float is meant)."""
        return replace(self, **{f.name: CASTS[f.type](getattr(self, f.name)) for f in fields(self) if f.type in CASTS})

    def _applies(self, setting: Field) -> bool:
        when = setting.metadata.get("when")
        return when is None or bool(getattr(self, when))

    def record(self) -> dict[str, Any]:
        """The record's `protocol` section: the flags, the settings that apply (None when off) and the description."""
        values = {f.name: getattr(self, f.name) if self._applies(f) else None for f in fields(self)}
        device = values.pop("autoaug_device")
        return {**values, "description": self.describe(), "autoaug_device": device}

    @property
    def batched_autoaugment(self) -> bool:
        """AutoAugment runs batched inside the LightningModule (aug.device=gpu without on-device data)."""
        return self.autoaug and self.autoaug_device == "gpu"

    @property
    def per_sample_autoaugment(self) -> bool:
        """AutoAugment runs per sample in the data workers."""
        return self.autoaug and self.autoaug_device == "cpu"

    @property
    def cutmix_mixes(self) -> bool:
        """Whether CutMix mixed any batch: `aug.cutmix=true` with `aug.cutmix_prob=0` never does."""
        return self.cutmix and self.cutmix_prob > 0

    @property
    def flags(self) -> tuple[bool, bool, bool]:
        """(AA, CM, LS on), by what the protocol did: the coordinates of the cell in the paper's 2 x 2 x 2 design. A
        run that never mixed is not a CutMix cell, whatever its `aug.cutmix` said."""
        return (self.autoaug, self.cutmix_mixes, self.ls > 0)

    @property
    def cell_name(self) -> str:
        """The paper's name of the cell (catalog.CELL_NAMES), `+MU` added under MixUp (`Baseline+MU`): a cell the
        paper did not run is never named as one it did."""
        return CELL_NAMES[self.flags] + ("+MU" if self.mixup else "")

    def describe(self) -> str:
        """One line stating the effective protocol: `crop+flip | autoaugment(cifar10) | cutmix(alpha=1.0)`."""
        parts = ["crop+flip"]
        if self.autoaug:  # where it runs: per sample in the workers (cpu), or batched on the training device
            where = WHERE_SHOWN.get(self.autoaug_device, "")
            jitter = f"colorjitter(0.4,0.4,0.4{where})"
            parts.append(jitter if self.policy == COLORJITTER else f"autoaugment({self.policy}{where})")
        if self.cutmix:
            p = "" if self.cutmix_prob >= 1 else f", p={self.cutmix_prob}"
            parts.append(f"cutmix(alpha={self.cutmix_alpha}{p})")
        if self.mixup:
            parts.append(f"mixup(alpha={self.mixup_alpha})")
        if self.ls:
            parts.append(f"ls={self.ls}")
        return " | ".join(parts)

    def tags(self) -> list[str]:
        """W&B tags: the cell's name and its flags (`Modern`, `aa1`, `cm1`, `ls0.1`), and `mu1` under MixUp (runs
        without it keep the four tags they always had)."""
        tags = [self.cell_name, f"aa{int(self.autoaug)}", f"cm{int(self.cutmix_mixes)}", f"ls{self.ls:g}"]
        return [*tags, "mu1"] if self.mixup else tags

    def group_key(self) -> Protocol:
        """What puts two runs in one group of a report: the GROUPED_FIELDS, every other field at its default."""
        grouped = {name: getattr(self, name) for name in GROUPED_FIELDS}
        return Protocol(**{**grouped, "cutmix": self.cutmix_mixes})


_OF_SETTINGS: dict[tuple[int, bool], tuple[Any, Protocol]] = {}  # (id of settings, on device) -> (settings, protocol)
_REMEMBERED = 16
