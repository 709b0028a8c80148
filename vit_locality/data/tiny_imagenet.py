"""Tiny-ImageNet-200 from the official zip, decoded once into a uint8 cache that records its class list. Classes
are numbered by sorted(wnids.txt), which also sets `num_classes`; the official val set is the test set."""

from __future__ import annotations

import warnings
import zipfile
from functools import partial
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from vit_locality.data.base import DataError, ImageArrays
from vit_locality.data.download import DownloadableDataModule
from vit_locality.datasets import Archive, DatasetSpec
from vit_locality.errors import first_line
from vit_locality.store.atomic import replace_atomically

CACHE_NAME = "cache_uint8.npz"
CACHE_VERSION = 1
_SPLITS = ("train_images", "train_labels", "test_images", "test_labels")

TINY_IMAGENET = DatasetSpec(
    name="tiny_imagenet",
    default_policy="colorjitter",
    config="vit_locality.config.schema:DownloadableDataConfig",
    datamodule="TinyImageNetDataModule",
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
)


class TinyImageNetDataModule(DownloadableDataModule):
    """Tiny-ImageNet-200: 100k train / 10k val (used as test), 64 px, 200 classes; `verify` checks the zip only."""

    name = "tiny_imagenet"
    image_size = 64
    num_classes = 200
    mean = (0.485, 0.456, 0.406)
    std = (0.229, 0.224, 0.225)
    archive = TINY_IMAGENET.archive()

    @property
    def wnids_path(self) -> Path:
        return self.folder / "wnids.txt"

    def required_files(self) -> tuple[Path, ...]:
        return (self.wnids_path,)

    def prepare_data(self) -> None:
        """Download, extract and decode once per node."""
        super().prepare_data()
        classes = self._read_wnids()
        if self._load_cache(classes, keys=()) is None:
            self._build_cache(classes)

    def load_arrays(self) -> ImageArrays:
        self.ensure_extracted()
        classes = self._read_wnids()
        self.num_classes = len(classes)
        arrays = self._load_cache(classes) or self._build_cache(classes)
        return ImageArrays(
            **{key: torch.from_numpy(arrays[key]) for key in _SPLITS}, class_names=self._class_names(classes)
        )

    def _read_wnids(self) -> list[str]:
        """The class list, sorted: a class's label is its index here."""
        path = self.wnids_path
        wnids = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not wnids or len(set(wnids)) != len(wnids):
            raise DataError(
                f"{path}: expected distinct wnids, one per line, found {len(wnids)} lines; {self.redo_hint()}"
            )
        return sorted(wnids)

    def _class_names(self, classes: list[str]) -> list[str]:
        """The first synonym in words.txt for each wnid, else the wnid."""
        path = self.folder / "words.txt"
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []
        names = {wnid: text.split(",")[0].strip() for wnid, _, text in (line.partition("\t") for line in lines)}
        return [names.get(wnid) or wnid for wnid in classes]

    def _load_cache(self, classes: list[str], keys: tuple[str, ...] = _SPLITS) -> dict[str, np.ndarray] | None:
        """The cached arrays named by `keys`, or None when the cache is absent, stale or unreadable."""
        path = self.folder / CACHE_NAME
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as cache:
                if int(cache["version"]) != CACHE_VERSION or cache["classes"].tolist() != classes:
                    warnings.warn(f"{path} was built for another class list; rebuilding it", stacklevel=2)
                    return None
                return {key: cache[key] for key in keys}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
            warnings.warn(f"{path} is unreadable ({first_line(err)}); rebuilding it", stacklevel=2)
            return None

    def _build_cache(self, classes: list[str]) -> dict[str, np.ndarray]:
        """Decode every train and val JPEG and write the cache atomically."""
        index = {wnid: label for label, wnid in enumerate(classes)}
        train = self._train_files(classes)
        test = self._val_files(index)
        with tqdm(total=len(train) + len(test), desc=f"decoding {self.archive.folder}", unit="img") as bar:
            arrays = dict(zip(_SPLITS, (*self._decode_all(train, bar), *self._decode_all(test, bar)), strict=True))
        write = partial(np.savez, version=np.int64(CACHE_VERSION), classes=np.array(classes), **arrays)
        replace_atomically(self.folder / CACHE_NAME, write)
        return arrays

    def _train_files(self, classes: list[str]) -> list[tuple[Path, int]]:
        files = []
        for label, wnid in enumerate(classes):
            directory = self.folder / "train" / wnid / "images"
            if not directory.is_dir():
                raise DataError(
                    f"{self.name}: class folder {directory} is missing (the class is listed in "
                    f"{self.wnids_path}); {self.redo_hint()}"
                )
            images = sorted(p for p in directory.iterdir() if p.suffix.lower() in (".jpeg", ".jpg"))
            if not images:
                raise DataError(f"{self.name}: class folder {directory} holds no JPEG images; {self.redo_hint()}")
            files += [(path, label) for path in images]
        return files

    def _val_files(self, index: dict[str, int]) -> list[tuple[Path, int]]:
        """The official val set, labelled by val_annotations.txt (file, wnid, box; tab separated)."""
        path = self.folder / "val" / "val_annotations.txt"
        if not path.is_file():
            raise DataError(f"{self.name}: {path} is missing, so the val images have no labels; {self.redo_hint()}")
        images = self.folder / "val" / "images"
        files = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            fields = line.split("\t")
            where = f"{path}, line {number}"
            if len(fields) < 2:
                raise DataError(f"{where}: expected 'file<TAB>wnid<TAB>box', got {line!r}")
            filename, wnid = fields[0].strip(), fields[1].strip()
            if wnid not in index:
                raise DataError(f"{where}: wnid {wnid!r} is not in {self.wnids_path}; {self.redo_hint()}")
            # The name alone is checked, so images that are symlinks (a shared data layout) still load.
            name = PurePosixPath(filename.replace("\\", "/"))
            if name.is_absolute() or ".." in name.parts or PureWindowsPath(filename).drive:
                raise DataError(
                    f"{where}: file name {filename!r} leads out of {images}; expected a name such as 'val_0.JPEG': "
                    f"{self.redo_hint()}"
                )
            files.append((images / name, index[wnid]))
        return files

    def _decode_all(self, files: list[tuple[Path, int]], bar: tqdm) -> tuple[np.ndarray, np.ndarray]:
        size = self.image_size
        images = np.empty((len(files), 3, size, size), dtype=np.uint8)
        for i, (path, _) in enumerate(files):
            images[i] = self._decode(path).transpose(2, 0, 1)
            bar.update()
        return images, np.array([label for _, label in files], dtype=np.int64)

    def _decode(self, path: Path) -> np.ndarray:
        """One image as (H, W, 3) uint8 RGB, its size checked from the header before anything is decoded."""
        try:
            with Image.open(path) as image:
                if image.size != (self.image_size, self.image_size):
                    raise DataError(
                        f"{path}: image is {image.size[0]}x{image.size[1]} px, "
                        f"expected {self.image_size}x{self.image_size}; {self.redo_hint()}"
                    )
                rgb = image.convert("RGB")
        except FileNotFoundError:
            raise DataError(f"{self.name}: image {path} is missing; {self.redo_hint()}") from None
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
            raise DataError(
                f"{path}: cannot decode the image ({first_line(err)}); the file is corrupted: {self.redo_hint()}"
            ) from None
        return np.asarray(rgb)
