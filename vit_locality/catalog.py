"""The study's fixed vocabulary, importable without torch so `config` checks values before torch loads: data sets,
their default policy, the patch grid, the augmentation policies, the names of the 8 protocol cells."""

from __future__ import annotations

from vit_locality.datasets import BUILT_IN

# Every data set is cut into an 8 x 8 patch grid: 32 px images get 4 px patches, 64 px images 8 px patches.
GRID_SIZE = 8

# torchvision's AutoAugment policies, by the value of `v2.AutoAugmentPolicy` (so the name is the enum's value).
AUTOAUGMENT_POLICIES = ("cifar10", "imagenet", "svhn")
# What `aug.autoaug=true` may apply: an AutoAugment policy, or ColorJitter(0.4, 0.4, 0.4) as the paper does on
# Tiny-ImageNet.
COLORJITTER = "colorjitter"
AUGMENT_POLICIES = (*AUTOAUGMENT_POLICIES, COLORJITTER)

# How a model's position embeddings start (`model.pos_init`): small random values (the paper's) or a 2-D
# sine-cosine code (vit_locality/model/position_code.py); learned either way.
POSITION_INITS = ("learned", "sincos")

# Data set name -> the policy `aug.policy=auto` means on it: views of each data set's declaration (datasets.py).
DATASET_DEFAULT_POLICY = {name: spec.default_policy for name, spec in BUILT_IN.items()}
DATASETS = tuple(BUILT_IN)


def resolve_policy(policy: str, dataset: str) -> str:
    """`auto` is the data set's own policy; any other value must be one of AUGMENT_POLICIES."""
    chosen = DATASET_DEFAULT_POLICY[dataset] if policy == "auto" else policy
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
