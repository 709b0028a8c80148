"""The config's `aug` and `loss` sections: what augments a batch and what softens its targets, each field's range
beside it (the Protocol that a cell builds from them: vit_locality/protocol.py)."""

from __future__ import annotations

from dataclasses import dataclass

from vit_locality.catalog import COLORJITTER, resolve_policy
from vit_locality.config.value_rules import Flag, Number, StrChoice, check


class Policy(StrChoice):
    """`aug.policy`: `auto` is the data set's own (catalog.DATASET_DEFAULT_POLICY)."""

    auto = "auto"
    cifar10 = "cifar10"
    imagenet = "imagenet"
    svhn = "svhn"
    colorjitter = "colorjitter"


class AugDevice(StrChoice):
    """`aug.device`: where AutoAugment runs, per sample in the data workers or batched on the training device."""

    cpu = "cpu"
    gpu = "gpu"


ALPHA_RULE = "> 0, finite"


@dataclass(frozen=True)
class AugConfig:
    """The `aug` section (conf/aug/default.yaml)."""

    autoaug: Flag() = False
    policy: Policy = Policy.auto
    device: AugDevice = AugDevice.cpu
    cutmix: Flag() = False
    cutmix_alpha: Number(ALPHA_RULE, gt=0) = 1.0
    cutmix_prob: Number("a number in [0, 1]", ge=0, le=1) = 1.0
    mixup: Flag() = False
    mixup_alpha: Number(ALPHA_RULE, gt=0) = 1.0

    def __post_init__(self) -> None:
        # One batch mixer at a time: MixUp is CutMix's spatially global control, not an addition to it.
        check(not (self.mixup and self.cutmix), "aug.mixup", self.mixup, "false when aug.cutmix=true (one mixer)")


@dataclass(frozen=True)
class LossConfig:
    """The `loss` section (conf/loss/default.yaml)."""

    ls: Number("a number in [0, 1)", ge=0, lt=1) = 0.0


def check_policy_device(aug: AugConfig, data_name: str) -> None:
    """Batched AutoAugment has the policies' operations; ColorJitter (Tiny-ImageNet's) runs per sample only."""
    if aug.autoaug and aug.device == AugDevice.gpu:
        resolved = resolve_policy(str(aug.policy), data_name)
        check(resolved != COLORJITTER, "aug.device", "gpu", "cpu when the policy is colorjitter (Tiny-ImageNet)")
