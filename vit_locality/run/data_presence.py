"""Whether a run could read its data set, answered before anything is made.

A data set that comes as an official archive (CIFAR-10/100, Tiny-ImageNet) is read from `<data.root>/<folder>`,
extracted from `<data.root>/<archive>` or, with `data.download=true` (the default), downloaded first. With download
off and neither folder nor archive there, the run would print its config and fail inside a new run directory; the
pre-check says so in one line instead and creates nothing. (Whether a download would succeed is the download's to
say: a pre-check that tried the network would stall every offline command.) Torch-free (the pre-check answers
before torch loads); the archives' names are the data modules' own (tests/test_newcomer.py compares them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vit_locality.errors import ConfigError


@dataclass(frozen=True)
class Archive:
    """Where a data set's files come from: the folder they are read from, and the archive that unpacks into it."""

    folder: str
    filename: str
    url: str


ARCHIVES = {
    "cifar10": Archive("cifar-10-batches-py", "cifar-10-python.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"),
    "cifar100": Archive("cifar-100-python", "cifar-100-python.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"),
    "tiny_imagenet": Archive("tiny-imagenet-200", "tiny-imagenet-200.zip", "http://cs231n.stanford.edu/tiny-imagenet-200.zip"),
}  # fmt: skip


def check_data_present(data: Any) -> None:
    """ConfigError when download is off and the data set can be neither read nor extracted; nothing is created.
    `data`: the data section (typed, or as composed)."""
    archive = ARCHIVES.get(str(data.name))
    if archive is None or getattr(data, "root", None) is None:
        return
    root = Path(os.path.expanduser(str(data.root)))
    if (root / archive.folder).exists() or (root / archive.filename).is_file():
        return  # present (whether it is complete and sound is the data module's to say, naming the file)
    missing = f"{data.name} is not in data.root={root} (no {archive.folder}/ nor {archive.filename})"
    by_hand = f"fetch {archive.url} into {root}/ by hand, or set data.root to where the data set is"
    if not getattr(data, "download", False):
        raise ConfigError(f"{missing} and data.download=false; {by_hand}")
