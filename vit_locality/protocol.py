"""The training protocol as one typed value: what augments a batch and what softens its targets.

Every place that needs to know the protocol (the module's batch mixing, the run record, the one-line description,
the cell name, the W&B tags, the report's grouping) reads it from `Protocol`, so a new knob is added here, in the
mixing code and in one YAML file. Importable without torch: the config checks run before torch loads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from omegaconf import DictConfig

from vit_locality.catalog import AUGMENT_POLICIES, CELL_NAMES, COLORJITTER, resolve_policy
from vit_locality.errors import ConfigError


class Policy(str, Enum):
    """`aug.policy`: `auto` is the data set's own (catalog.DATASET_DEFAULT_POLICY). Prints as its value."""

    __str__ = str.__str__
    __format__ = str.__format__

    auto = "auto"
    cifar10 = "cifar10"
    imagenet = "imagenet"
    svhn = "svhn"
    colorjitter = "colorjitter"


class AugDevice(str, Enum):
    """`aug.device`: where AutoAugment runs, per sample in the data workers or batched on the training device."""

    __str__ = str.__str__
    __format__ = str.__format__

    cpu = "cpu"
    gpu = "gpu"


@dataclass
class AugConfig:
    """Schema of the `aug` config group (conf/aug/default.yaml)."""

    autoaug: bool = False
    policy: Policy = Policy.auto
    device: AugDevice = AugDevice.cpu
    cutmix: bool = False
    cutmix_alpha: float = 1.0
    cutmix_prob: float = 1.0
    mixup: bool = False
    mixup_alpha: float = 1.0


@dataclass
class LossConfig:
    """Schema of the `loss` config group (conf/loss/default.yaml)."""

    ls: float = 0.0


# The protocol's fields are all in the record; these are the ones a report groups runs by (the others, such as
# the CutMix alpha, are settings whose differences inside a cell the report notes).
GROUPED_FIELDS = ("autoaug", "cutmix", "ls", "mixup")
# Where AutoAugment runs: per sample in the workers, batched in the module, or batched by the on-device data.
AUTOAUG_DEVICES = ("cpu", "gpu", "data_on_device")
WHERE_SHOWN = {"gpu": ", batched on gpu", "data_on_device": ", batched on the device"}  # in the description
POLICY_CHOICES = ("auto", *AUGMENT_POLICIES)


def _plain(value: Any) -> Any:
    """A structured config's enum member as its value (`Policy.auto` -> "auto"); anything else as it is."""
    return value.value if isinstance(value, Enum) else value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _check(condition: bool, key: str, value: Any, allowed: str) -> None:
    """The config checks' one-line message: `aug.cutmix_alpha=0 is not allowed: > 0, finite`."""
    if not condition:
        raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


@dataclass(frozen=True)
class Protocol:
    """One cell's protocol. Built from the composed config (`from_cfg`, checked) or from a record (`from_record`);
    the module, the record, the description, the cell name, the W&B tags and the report's grouping all read it.

    `policy` is the resolved policy (`auto` already replaced by the data set's own; None in a record of a run
    without AutoAugment); `autoaug_device` is where AutoAugment runs (AUTOAUG_DEVICES)."""

    autoaug: bool = False
    policy: str | None = None
    autoaug_device: str = "cpu"
    cutmix: bool = False
    cutmix_alpha: float = 1.0
    cutmix_prob: float = 1.0
    ls: float = 0.0
    mixup: bool = False
    mixup_alpha: float = 1.0

    @classmethod
    def from_cfg(cls, cfg: DictConfig, on_device: bool = False) -> Protocol:
        """The protocol of a composed config (`aug`, `loss.ls`, `data.name`); `on_device`: the data sit on the
        training device and augment there (builders.data_on_device). Raises ConfigError on a value out of range."""
        aug = cfg.aug
        policy, device = _plain(aug.policy), _plain(aug.device)
        _check(device in ("cpu", "gpu"), "aug.device", device, "cpu (per sample, in the workers) or gpu (batched)")
        raw = cls(
            autoaug=aug.autoaug,
            policy=policy,
            autoaug_device=device,
            cutmix=aug.cutmix,
            cutmix_alpha=aug.cutmix_alpha,
            cutmix_prob=aug.get("cutmix_prob", 1.0),
            ls=cfg.loss.ls,
            mixup=aug.get("mixup", False),
            mixup_alpha=aug.get("mixup_alpha", 1.0),
        )
        raw.validate()
        _check(policy in POLICY_CHOICES, "aug.policy", policy, f"one of {', '.join(POLICY_CHOICES)}")
        resolved = resolve_policy(policy, cfg.data.name)
        if device == "gpu" and raw.autoaug:
            _check(resolved != COLORJITTER, "aug.device", device, "cpu when the policy is colorjitter (Tiny-ImageNet)")
        where = "data_on_device" if on_device else device
        return replace(raw.normalized(), policy=resolved, autoaug_device=where)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Protocol:
        """The protocol of a record's `protocol` section; a key the record lacks is off, or at its default."""

        def number(key: str, default: float) -> float:
            value = record.get(key)
            return default if value is None else float(value)

        return cls(
            autoaug=bool(record["autoaug"]),
            policy=record.get("policy"),
            autoaug_device=record.get("autoaug_device") or "cpu",
            cutmix=bool(record["cutmix"]),
            cutmix_alpha=number("cutmix_alpha", 1.0),
            cutmix_prob=number("cutmix_prob", 1.0),
            ls=float(record["ls"]),
            mixup=bool(record.get("mixup", False)),  # records from before MixUp have no key: off
            mixup_alpha=number("mixup_alpha", 1.0),
        )

    def validate(self) -> None:
        """Raise ConfigError, naming the config key, on the first field outside its range."""
        for key, value in (("aug.autoaug", self.autoaug), ("aug.cutmix", self.cutmix), ("aug.mixup", self.mixup)):
            _check(isinstance(value, bool), key, value, "true or false")
        _check(self.autoaug_device in AUTOAUG_DEVICES, "aug.device", self.autoaug_device, "cpu or gpu")
        alpha, prob, ls, mixup_alpha = self.cutmix_alpha, self.cutmix_prob, self.ls, self.mixup_alpha
        _check(_is_finite(alpha) and alpha > 0, "aug.cutmix_alpha", alpha, "> 0, finite")
        _check(_is_finite(prob) and 0 <= prob <= 1, "aug.cutmix_prob", prob, "a number in [0, 1]")
        _check(_is_number(ls) and 0 <= ls < 1, "loss.ls", ls, "a number in [0, 1)")
        _check(_is_finite(mixup_alpha) and mixup_alpha > 0, "aug.mixup_alpha", mixup_alpha, "> 0, finite")
        # One batch mixer at a time: MixUp is CutMix's spatially global control, not an addition to it.
        _check(not (self.mixup and self.cutmix), "aug.mixup", self.mixup, "false when aug.cutmix=true (one mixer)")

    def normalized(self) -> Protocol:
        """The same protocol with plain Python types (the config may give an int where a float is meant)."""
        return replace(
            self,
            autoaug=bool(self.autoaug),
            cutmix=bool(self.cutmix),
            cutmix_alpha=float(self.cutmix_alpha),
            cutmix_prob=float(self.cutmix_prob),
            ls=float(self.ls),
            mixup=bool(self.mixup),
            mixup_alpha=float(self.mixup_alpha),
        )

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

    def record(self) -> dict[str, Any]:
        """The record's `protocol` section: the flags, the settings that apply (None when off) and the description."""
        return {
            "autoaug": self.autoaug,
            "cutmix": self.cutmix,
            "ls": self.ls,
            "policy": self.policy if self.autoaug else None,
            "cutmix_alpha": self.cutmix_alpha if self.cutmix else None,
            "cutmix_prob": self.cutmix_prob if self.cutmix else None,
            "mixup": self.mixup,
            "mixup_alpha": self.mixup_alpha if self.mixup else None,
            "description": self.describe(),
            "autoaug_device": self.autoaug_device if self.autoaug else None,
        }

    def tags(self) -> list[str]:
        """W&B tags: the cell's name and its flags (`Modern`, `aa1`, `cm1`, `ls0.1`), and `mu1` under MixUp (runs
        without it keep the four tags they always had)."""
        tags = [self.cell_name, f"aa{int(self.autoaug)}", f"cm{int(self.cutmix_mixes)}", f"ls{self.ls:g}"]
        return [*tags, "mu1"] if self.mixup else tags

    def group_key(self) -> Protocol:
        """What puts two runs in one group of a report: the GROUPED_FIELDS, every other field at its default."""
        grouped = {name: getattr(self, name) for name in GROUPED_FIELDS}
        return Protocol(**{**grouped, "cutmix": self.cutmix_mixes})
