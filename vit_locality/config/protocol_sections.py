"""The config's `aug` and `loss` sections: what augments a batch and what softens its targets, each field's type and
range beside it; the values, and what each does, are in conf/aug/default.yaml and conf/loss/default.yaml. A cell
builds its Protocol from these sections (vit_locality/protocol.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator

from vit_locality.catalog import COLORJITTER, resolve_policy
from vit_locality.config.fields import Choice, Flag, Number, check

SECTION = ConfigDict(frozen=True, extra="forbid")  # every section: read-only once validated, no unknown key
ALPHA_RULE = "> 0, finite"


class AugConfig(BaseModel):
    """The `aug` section. `policy: auto` is the data set's own (catalog.DATASET_DEFAULT_POLICY); `device`: where
    AutoAugment runs, per sample in the data workers (cpu) or batched on the training device (gpu)."""

    model_config = SECTION

    autoaug: Flag()
    policy: Choice("auto", "cifar10", "imagenet", "svhn", "colorjitter")
    device: Choice("cpu", "gpu")
    cutmix: Flag()
    cutmix_alpha: Number(ALPHA_RULE, gt=0)
    cutmix_prob: Number("a number in [0, 1]", ge=0, le=1)
    mixup: Flag()
    mixup_alpha: Number(ALPHA_RULE, gt=0)

    @model_validator(mode="after")
    def _one_mixer(self) -> AugConfig:
        # One batch mixer at a time: MixUp is CutMix's spatially global control, not an addition to it.
        check(not (self.mixup and self.cutmix), "aug.mixup", self.mixup, "false when aug.cutmix=true (one mixer)")
        return self


class LossConfig(BaseModel):
    """The `loss` section: label smoothing's epsilon."""

    model_config = SECTION

    ls: Number("a number in [0, 1)", ge=0, lt=1)


def check_policy_device(aug: AugConfig, data_name: str) -> None:
    """Batched AutoAugment has the policies' operations; ColorJitter (Tiny-ImageNet's) runs per sample only."""
    if aug.autoaug and aug.device == "gpu":
        resolved = resolve_policy(str(aug.policy), data_name)
        check(resolved != COLORJITTER, "aug.device", "gpu", "cpu when the policy is colorjitter (Tiny-ImageNet)")
