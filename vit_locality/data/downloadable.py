"""The base of the data sets that come as one official archive: CIFAR-10/100 and Tiny-ImageNet.

What they share is the way to their files: look for them under `root`, fetch and extract the archive when one
is missing, and say how to start over when a file is bad. A subclass names its archive and the files it needs.
"""

from __future__ import annotations

import os
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar, NoReturn

from vit_locality.data.base import DataError, ImageDataModule
from vit_locality.data.download import ArchiveSpec, fetch_and_extract


class DownloadableDataModule(ImageDataModule):
    """A datamodule whose files are extracted from `archive` into `<root>/<archive.folder>`.

    `download`: fetch and extract the official archive into `root` when a required file is missing.
    `verify`: check the archive's size and md5 before extracting it; subclasses may check their files too.
    With `verify=False` files load as they are, which is how tests load the fake files they write.
    """

    archive: ClassVar[ArchiveSpec]

    def __init__(self, download: bool = True, verify: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.download = download
        self.verify = verify

    @property
    def folder(self) -> Path:
        return Path(self.root) / self.archive.folder

    @abstractmethod
    def required_files(self) -> tuple[Path, ...]:
        """The files whose absence means the archive has to be (fetched and) extracted."""

    def _refuse_linked_folder(self, missing: Path) -> NoReturn:
        """A symlinked data set folder (`data/cifar-10-batches-py -> /shared/...`) is used as it is, never
        extracted into: the archive would write through the link into a copy others share, and tarfile's data
        filter refuses that anyway as a path that escapes `root`. Say which link and which target is wrong."""
        link, target = self.folder, os.readlink(self.folder)
        if not self.folder.exists():
            problem = "which does not exist: mount or restore it"
        elif not self.folder.is_dir():
            problem = "which is not a folder: point the link at the data set folder"
        else:
            problem = f"which lacks {missing.relative_to(link)}: complete the shared copy"
        raise DataError(
            f"{self.name}: {link} is a symlink to {target}, {problem}, or remove the link to have the data set "
            f"extracted into {self.root}"
        )

    def redo_hint(self, path: Path | None = None) -> str:
        """How to get a clean copy: delete `path` (a required file, so it is extracted again) or the folder."""
        if path is None:
            return f"delete {self.folder} and re-run to extract or download it again"
        return f"delete {path} (or all of {self.folder}) and re-run to download it again"

    def prepare_data(self) -> None:
        """Download and extract once per node (Lightning calls this on one process only)."""
        self.ensure_extracted()

    def ensure_extracted(self) -> None:
        """Make sure every required file exists, extracting (and if allowed downloading) the archive otherwise."""
        missing = [path for path in self.required_files() if not path.is_file()]
        if not missing:
            return
        if self.folder.is_symlink():
            self._refuse_linked_folder(missing[0])
        root = Path(self.root)
        fetch_and_extract(
            self.archive, root, dataset=self.name, download=self.download, verify=self.verify, missing=missing[0]
        )
        for path in missing:
            if not path.is_file():
                raise DataError(
                    f"{self.name}: {path} is missing even after extracting {root / self.archive.filename}: the "
                    "archive is not the official one; delete it and re-run to download it again"
                )
