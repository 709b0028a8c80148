"""The `aug` and `loss` sections, and the protocol a cell trains with, derived from them in one place
(`TrainingProtocol.of`) or read back from a record; it names, describes and tags the cell. Torch-free."""

from __future__ import annotations

import math
from typing import Annotated, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vit_locality.catalog import CELL_NAMES, COLORJITTER, resolve_policy
from vit_locality.config.fields import Choice, Flag, NeutralAt, Number, Rule, check

# ruff: noqa: UP045  (pydantic reads these annotations at runtime on Python 3.10)

SECTION = ConfigDict(frozen=True, extra="forbid")  # every section: read-only once validated, no unknown key
ALPHA_RULE = "> 0, finite"
SHARES_RULE = "two shares of the image 0 <= a <= b <= 1, e.g. [0.02,0.33]"


def _shares(pair: tuple[float, float]) -> bool:
    return len(pair) == 2 and all(math.isfinite(v) for v in pair) and 0 <= pair[0] <= pair[1] <= 1


def applies_when(flag: str) -> dict[str, Any]:
    """A setting that matters only while `flag` is on: the record holds None for it otherwise."""
    return {"json_schema_extra": {"when": flag}}


class AugConfig(BaseModel):
    """The `aug` section. `policy: auto` is the data set's own (its declaration's, datasets.py); `device`: where
    AutoAugment runs, per sample in the data workers (cpu) or batched on the training device (gpu)."""

    model_config = SECTION

    autoaug: Flag() = False
    policy: Choice("auto", "cifar10", "imagenet", "svhn", "colorjitter") = Field("auto", **applies_when("autoaug"))
    device: Choice("cpu", "gpu") = "cpu"
    cutmix: Flag() = False
    cutmix_alpha: Number(ALPHA_RULE, gt=0) = Field(1.0, **applies_when("cutmix"))
    cutmix_prob: Number("a number in [0, 1]", ge=0, le=1) = Field(1.0, **applies_when("cutmix"))
    mixup: Flag() = False
    mixup_alpha: Number(ALPHA_RULE, gt=0) = Field(1.0, **applies_when("mixup"))
    # Random Erasing, CutMix's box without its label mixing; while off, left out of the identity (NeutralAt).
    erasing: Annotated[Flag(), NeutralAt(False)] = False
    erasing_prob: Annotated[Number("a number in [0, 1]", ge=0, le=1), NeutralAt(0.5)] = Field(
        0.5, **applies_when("erasing")
    )
    erasing_scale: Annotated[Rule(_shares, SHARES_RULE, tuple[float, float]), NeutralAt([0.02, 0.33])] = Field(
        (0.02, 0.33), **applies_when("erasing")
    )

    @model_validator(mode="after")
    def _one_mixer(self) -> AugConfig:
        # One batch mixer at a time: MixUp is CutMix's spatially global control, not an addition to it.
        check(not (self.mixup and self.cutmix), "aug.mixup", self.mixup, "false when aug.cutmix=true (one mixer)")
        after_batched = self.erasing and self.autoaug and self.device == "gpu"  # the workers would erase first
        check(not after_batched, "aug.erasing", True, "false with aug.autoaug=true and aug.device=gpu (use cpu)")
        return self


class LossConfig(BaseModel):
    """The `loss` section: label smoothing's epsilon, applied once, in the loss."""

    model_config = SECTION

    ls: Number("a number in [0, 1)", ge=0, lt=1) = 0.0


def check_policy_device(aug: AugConfig, default_policy: str) -> None:
    """Batched AutoAugment has the policies' operations; ColorJitter (Tiny-ImageNet's) runs per sample only."""
    if aug.autoaug and aug.device == "gpu":
        resolved = resolve_policy(str(aug.policy), default_policy)
        check(resolved != COLORJITTER, "aug.device", "gpu", "cpu when the policy is colorjitter (Tiny-ImageNet)")


# What puts runs in one report group; the protocol's other fields are settings the report compares.
GROUPED_FIELDS = ("autoaug", "cutmix", "ls", "mixup", "erasing")
WHERE_SHOWN = {"gpu": ", batched on gpu", "data_on_device": ", batched on the device"}  # in the description


class TrainingProtocol(AugConfig):
    """A cell's protocol: its `aug` section with the policy resolved for the data set, where AutoAugment runs
    (`autoaug_device`: cpu, gpu or data_on_device) and label smoothing's epsilon."""

    policy: Optional[str] = Field(None, **applies_when("autoaug"))  # type: ignore[assignment]
    ls: Number("a number in [0, 1)", ge=0, lt=1) = 0.0
    autoaug_device: str = Field("cpu", **applies_when("autoaug"))

    @classmethod
    def of(cls, aug: AugConfig, loss: LossConfig, default_policy: str, on_device: bool) -> TrainingProtocol:
        """The protocol of a cell's validated sections; `on_device`: its data augment on the training device."""
        return cls(
            **aug.model_dump(exclude={"policy"}),
            policy=resolve_policy(str(aug.policy), default_policy),
            ls=loss.ls,
            autoaug_device="data_on_device" if on_device else aug.device,
        )

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TrainingProtocol:
        """The protocol of a record's (or a checkpoint's) `protocol` section; a key it lacks or holds None for is at
        its default."""
        return cls(**{name: record[name] for name in cls.model_fields if record.get(name) is not None})

    def _applies(self, name: str) -> bool:
        extra = type(self).model_fields[name].json_schema_extra
        when = extra.get("when") if isinstance(extra, dict) else None
        return when is None or bool(getattr(self, str(when)))

    def record(self) -> dict[str, Any]:
        """The record's `protocol` section: the flags, the settings that apply (None when off), the description."""
        values = {name: getattr(self, name) if self._applies(name) else None for name in type(self).model_fields}
        values.pop("device")
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
        """(AA, CM, LS on) by what the protocol did: the cell's place in the paper's 2 x 2 x 2 design."""
        return (self.autoaug, self.cutmix_mixes, self.ls > 0)

    @property
    def cell_name(self) -> str:
        """The paper's name of the cell, `+MU` added under MixUp and `+RE` under Random Erasing (`Baseline+RE`)."""
        return CELL_NAMES[self.flags] + ("+MU" if self.mixup else "") + ("+RE" if self.erasing else "")

    def describe(self) -> str:
        """One line stating the effective protocol: `crop+flip | autoaugment(cifar10) | cutmix(alpha=1.0)`."""
        parts = ["crop+flip"]
        if self.autoaug:
            where = WHERE_SHOWN.get(self.autoaug_device, "")
            jitter = f"colorjitter(0.4,0.4,0.4{where})"
            parts.append(jitter if self.policy == COLORJITTER else f"autoaugment({self.policy}{where})")
        if self.cutmix:
            p = "" if self.cutmix_prob >= 1 else f", p={self.cutmix_prob}"
            parts.append(f"cutmix(alpha={self.cutmix_alpha}{p})")
        if self.mixup:
            parts.append(f"mixup(alpha={self.mixup_alpha})")
        if self.erasing:
            parts.append(f"erasing(p={self.erasing_prob}, scale={self.erasing_scale})")
        if self.ls:
            parts.append(f"ls={self.ls}")
        return " | ".join(parts)

    def tags(self) -> list[str]:
        """W&B tags: the cell's name and its flags (`Modern`, `aa1`, `cm1`, `ls0.1`, `mu1`, `re1`)."""
        tags = [self.cell_name, f"aa{int(self.autoaug)}", f"cm{int(self.cutmix_mixes)}", f"ls{self.ls:g}"]
        return tags + ["mu1"] * self.mixup + ["re1"] * self.erasing

    def group_key(self) -> TrainingProtocol:
        """What puts two runs in one report group: the GROUPED_FIELDS, every other field at its default."""
        grouped = {name: getattr(self, name) for name in GROUPED_FIELDS}
        return TrainingProtocol(**{**grouped, "cutmix": self.cutmix_mixes})
