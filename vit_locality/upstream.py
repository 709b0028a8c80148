"""The private upstream APIs this project depends on, each behind one function.

Batched AutoAugment reuses torchvision's own policy tables, magnitude bins and op dispatch rather than copying them,
and the preflight check parses a command line exactly as Hydra will; neither is public API in those libraries, so
a new release may rename or drop them. Every such access goes through this module: when one disappears, the caller
gets `UpstreamChanged` naming the library, its version and the attribute, instead of an AttributeError from deep
inside a training step, and this file is the one place to update.

Nothing heavy is imported at module level: the preflight check of `train.py` needs only the Hydra parser and must
answer before torch is loaded, and library code must not load Hydra.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torchvision.transforms import v2

__all__ = [
    "UpstreamChanged",
    "apply_autoaugment_op",
    "autoaugment_space",
    "autoaugment_sub_policies",
    "hydra_args_parser",
]

SubPolicy = tuple[tuple[str, float, int | None], ...]  # (op name, probability, magnitude bin or None) per op
Space = dict[str, tuple[Callable[[int, int, int], Any], bool]]  # op -> (magnitudes_fn -> tensor or None, signed)


class UpstreamChanged(RuntimeError):
    """A private upstream attribute this project relies on is gone from the installed version."""


def _changed(library: ModuleType, attribute: str) -> UpstreamChanged:
    return UpstreamChanged(
        f"{library.__name__} {library.__version__} has no {attribute}, a private API this project calls: "
        "vit_locality/upstream.py needs updating for this version"
    )


def _private(library: ModuleType, owner: Any, owner_name: str, attribute: str) -> Any:
    """`owner.attribute`, or UpstreamChanged if this version of `library` no longer has it."""
    try:
        return getattr(owner, attribute)
    except AttributeError:
        raise _changed(library, f"{owner_name}.{attribute}") from None


def autoaugment_sub_policies(augment: v2.AutoAugment) -> list[SubPolicy]:
    """The sub-policies `augment` draws from: each a pair of (op name, probability, magnitude bin) triples."""
    import torchvision

    return _private(torchvision, augment, "v2.AutoAugment", "_policies")


def autoaugment_space() -> Space:
    """AutoAugment's op name -> (magnitudes_fn(num_bins, height, width), signed)."""
    import torchvision
    from torchvision.transforms import v2

    return _private(torchvision, v2.AutoAugment, "v2.AutoAugment", "_AUGMENTATION_SPACE")


def apply_autoaugment_op(augment: v2.AutoAugment, images: torch.Tensor, name: str, magnitude: float) -> torch.Tensor:
    """Op `name` at `magnitude` on `images` (one image or a batch), with `augment`'s interpolation and fill."""
    import torchvision

    apply = _private(torchvision, augment, "v2.AutoAugment", "_apply_image_or_video_transform")
    fill = _private(torchvision, augment, "v2.AutoAugment", "_fill")
    return apply(images, name, magnitude, interpolation=augment.interpolation, fill=fill)


def hydra_args_parser() -> argparse.ArgumentParser:
    """The parser Hydra applies to the command line: overrides, -m/--multirun, --config-name/-path/-dir."""
    import hydra

    try:
        from hydra._internal.utils import get_args_parser
    except ImportError:
        raise _changed(hydra, "hydra._internal.utils.get_args_parser") from None
    return get_args_parser()
