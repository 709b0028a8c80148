"""The study's fixed vocabulary, importable without torch so `config` checks values before torch loads: the built-in
data sets, the patch grid, the augmentation policies, the names of the 8 protocol cells."""

from __future__ import annotations

from vit_locality.datasets import built_in

# Every data set is cut into an 8 x 8 patch grid: 32 px images get 4 px patches, 64 px images 8 px patches.
GRID_SIZE = 8

# torchvision's AutoAugment policies, by the value of `v2.AutoAugmentPolicy` (so the name is the enum's value).
AUTOAUGMENT_POLICIES = ("cifar10", "imagenet", "svhn")
# What `aug.autoaug=true` may apply: an AutoAugment policy, or ColorJitter(0.4, 0.4, 0.4) as the paper does on
# Tiny-ImageNet.
COLORJITTER = "colorjitter"
AUGMENT_POLICIES = (*AUTOAUGMENT_POLICIES, COLORJITTER)

# How a model's position embeddings start (`model.pos_init`): small random values (the paper's) or a 2-D
# sine-cosine code (vit_locality/model/vit.py); learned either way.
POSITION_INITS = ("learned", "sincos")

DATASETS = tuple(built_in())  # the built-in data sets (datasets.py); a user's is named by data.module


def resolve_policy(policy: str, default: str) -> str:
    """`auto` is the data set's own policy (`default`, its declaration's); any other value must be one of
    AUGMENT_POLICIES."""
    chosen = default if policy == "auto" else policy
    if chosen not in AUGMENT_POLICIES:
        raise ValueError(f"aug.policy={policy!r} is not allowed: auto, {', '.join(AUGMENT_POLICIES)}")
    return chosen


# The paper's names for the 8 cells of (AutoAugment, CutMix, label smoothing > 0), in the paper's order.
CELL_NAMES = {
    (False, False, False): "Baseline",
    (True, False, False): "+AA",
    (False, True, False): "+CM",
    (False, False, True): "+LS",
    (True, True, True): "Modern",
    (False, True, True): "-AA",
    (True, False, True): "-CM",
    (True, True, False): "-LS",
}
CELL_ORDER = list(CELL_NAMES.values())
CELL_FLAGS = {name: flags for flags, name in CELL_NAMES.items()}  # name -> (AA, CM, LS on)
