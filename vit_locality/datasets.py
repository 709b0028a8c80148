"""What a data set declares, once, for every place that needs it: the config schema (its section class, the training
images data.val_size must leave), the catalog (its name and default AutoAugment policy), the datamodule registry
(its class) and the data check (its official archives). Torch-free, so the pre-check reads it before torch loads."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from vit_locality.errors import ConfigError


@dataclass(frozen=True)
class Archive:
    """One official archive: the folder its files are read from, the file that unpacks into it, where it comes from,
    and (when known) the size and md5 a download must match."""

    folder: str  # under the data root, created by extracting the archive
    filename: str  # under the data root
    url: str
    size: int | None = None
    md5: str | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """One data set's declaration. `archives` None: a generated set (nothing to read or download); `train_images`
    None and `num_classes`/`image_size` None: the config's own (data.train_size, data.num_classes, data.image_size).
    `config` and `datamodule` are "module:Class" paths, imported only when used (the datamodule's pulls in torch)."""

    name: str
    default_policy: str  # what aug.policy=auto means on it (catalog.AUGMENT_POLICIES)
    config: str  # the pydantic section class that validates `data.*`
    datamodule: str  # the LightningDataModule class a run builds
    archives: tuple[Archive, ...] | None = None
    train_images: int | None = None
    num_classes: int | None = None
    image_size: int | None = None

    def config_class(self) -> Any:
        """The section class that validates this data set's `data.*`."""
        return load(self.config)

    def datamodule_class(self) -> Any:
        """The datamodule class a run builds (imports torch)."""
        return load(self.datamodule)

    def archive(self) -> Archive:
        """The one archive the data check and the download read; a ConfigError, never a skip, when none is declared."""
        if not self.archives:
            raise ConfigError(
                f"data set {self.name}: its declaration (DatasetSpec) lists no archive, yet its config downloads "
                "(data.download): declare `archives` with folder, filename and url, or make it a generated set"
            )
        return self.archives[0]


def load(path: str) -> Any:
    """The object a "module:name" path names."""
    module, _, name = path.partition(":")
    return getattr(import_module(module), name)


_SCHEMA = "vit_locality.config.schema"
_TORONTO = "https://www.cs.toronto.edu/~kriz"

# The built-in data sets, in the order the catalog lists them. CIFAR's archive names and md5s are torchvision's
# (CIFAR10.url, .filename, .tgz_md5, .base_folder: tests/data/test_dataset_declaration.py holds them equal).
BUILT_IN: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            name="cifar10",
            default_policy="cifar10",
            config=f"{_SCHEMA}:DownloadableDataConfig",
            datamodule="vit_locality.data.cifar:CIFAR10DataModule",
            archives=(
                Archive(
                    "cifar-10-batches-py",
                    "cifar-10-python.tar.gz",
                    f"{_TORONTO}/cifar-10-python.tar.gz",
                    170_498_071,
                    "c58f30108f718f92721af3b95e74349a",
                ),
            ),
            train_images=50_000,
            num_classes=10,
            image_size=32,
        ),
        DatasetSpec(
            name="cifar100",
            default_policy="cifar10",
            config=f"{_SCHEMA}:DownloadableDataConfig",
            datamodule="vit_locality.data.cifar:CIFAR100DataModule",
            archives=(
                Archive(
                    "cifar-100-python",
                    "cifar-100-python.tar.gz",
                    f"{_TORONTO}/cifar-100-python.tar.gz",
                    169_001_437,
                    "eb9058c3a382ffc7106e4002c42a8d85",
                ),
            ),
            train_images=50_000,
            num_classes=100,
            image_size=32,
        ),
        DatasetSpec(
            name="tiny_imagenet",
            default_policy="colorjitter",
            config=f"{_SCHEMA}:DownloadableDataConfig",
            datamodule="vit_locality.data.tiny_imagenet:TinyImageNetDataModule",
            archives=(
                Archive(
                    "tiny-imagenet-200",
                    "tiny-imagenet-200.zip",
                    "http://cs231n.stanford.edu/tiny-imagenet-200.zip",
                    248_100_043,
                    "90528d7ca1a48142e341f4ef8d21d0de",
                ),
            ),
            train_images=100_000,
            num_classes=200,
            image_size=64,
        ),
        DatasetSpec(
            name="synthetic",
            default_policy="cifar10",
            config=f"{_SCHEMA}:SyntheticDataConfig",
            datamodule="vit_locality.data.synthetic:SyntheticDataModule",
        ),
        DatasetSpec(
            name="glyphs",
            default_policy="cifar10",
            config=f"{_SCHEMA}:GlyphsDataConfig",
            datamodule="vit_locality.data.glyphs:GlyphsDataModule",
        ),
    )
}


def spec_of(name: str) -> DatasetSpec:
    """The declaration of data set `name`; a one-line ConfigError naming the known ones when there is none."""
    spec = BUILT_IN.get(name)
    if spec is None:
        raise ConfigError(
            f"data set {name!r} declares nothing (no DatasetSpec): known data sets are {', '.join(BUILT_IN)}"
        )
    return spec
