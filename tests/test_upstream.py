"""The private upstream APIs still have the shape this project relies on, and a vanished one fails clearly."""

from __future__ import annotations

import subprocess
import sys

import hydra._internal.utils
import pytest
import torch
from torchvision.transforms import v2

from vit_locality.augment.per_sample import autoaugment_policy
from vit_locality.catalog import AUTOAUGMENT_POLICIES
from vit_locality.upstream import (
    UpstreamChanged,
    apply_autoaugment_op,
    autoaugment_space,
    autoaugment_sub_policies,
    hydra_args_parser,
)

OPS = {
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
    "Invert",
}


def _augment(policy: str = "cifar10") -> v2.AutoAugment:
    return v2.AutoAugment(autoaugment_policy(policy))


def test_autoaugment_sub_policies() -> None:
    sub_policies = autoaugment_sub_policies(_augment("cifar10"))
    assert len(sub_policies) == 25
    for sub in sub_policies:
        assert len(sub) == 2
        for name, p, bin_ in sub:
            assert name in OPS and 0.0 <= p <= 1.0 and (bin_ is None or 0 <= bin_ < 10)


def test_autoaugment_space() -> None:
    space = autoaugment_space()
    used = {
        name
        for policy in AUTOAUGMENT_POLICIES
        for sub in autoaugment_sub_policies(_augment(policy))
        for name, *_ in sub
    }
    assert used == OPS and set(space) >= OPS
    for name in OPS:
        magnitudes_fn, signed = space[name]
        magnitudes = magnitudes_fn(10, 32, 32)
        assert isinstance(signed, bool)
        assert magnitudes is None or (isinstance(magnitudes, torch.Tensor) and magnitudes.shape == (10,))


def test_apply_autoaugment_op() -> None:
    images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    out = apply_autoaugment_op(_augment(), images, "Rotate", 30.0)
    expected = v2.functional.rotate(images, angle=30.0, interpolation=v2.InterpolationMode.NEAREST)
    assert out.dtype == torch.uint8 and torch.equal(out, expected) and not torch.equal(out, images)


def test_hydra_args_parser() -> None:
    args = hydra_args_parser().parse_args(["-m", "a=1"])
    assert args.multirun is True and args.overrides == ["a=1"]
    assert args.config_name is None and args.config_path is None and args.config_dir is None


def test_importing_upstream_does_not_import_hydra() -> None:
    code = "import sys, vit_locality.upstream; assert 'hydra' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("owner", "attribute", "call"),
    [
        (v2.AutoAugment, "_AUGMENTATION_SPACE", autoaugment_space),
        (hydra._internal.utils, "get_args_parser", hydra_args_parser),
    ],
)
def test_a_vanished_private_api_names_itself_and_upstream_py(owner, attribute, call, monkeypatch) -> None:
    monkeypatch.delattr(owner, attribute)
    with pytest.raises(UpstreamChanged, match=rf"{attribute}.*vit_locality/upstream\.py needs updating"):
        call()


@pytest.mark.parametrize(
    ("attribute", "call"),
    [
        ("_policies", autoaugment_sub_policies),
        ("_fill", lambda augment: apply_autoaugment_op(augment, torch.zeros(1, 3, 8, 8), "Rotate", 0.0)),
    ],
)
def test_a_vanished_instance_attribute_names_itself(attribute, call) -> None:
    augment = _augment()
    delattr(augment, attribute)
    with pytest.raises(UpstreamChanged, match=rf"torchvision \S+ has no v2\.AutoAugment\.{attribute}, .*upstream\.py"):
        call(augment)
