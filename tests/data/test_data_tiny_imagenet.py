"""Tiny-ImageNet loading on a fake official tree: class order, val labels, greyscale, the cache, errors."""

from __future__ import annotations

import dataclasses
import shutil
import stat
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from data_fakes import FakeTiny, served, write_fake_tiny_imagenet
from PIL import Image
from torchvision.datasets.utils import calculate_md5

from vit_locality.data.base import DataError
from vit_locality.data.download import safe_extract
from vit_locality.data.tiny_imagenet import CACHE_NAME, TinyImageNetDataModule


def _dm(root: Path, **kwargs) -> TinyImageNetDataModule:
    options = {"verify": False, "download": False, **kwargs}
    return TinyImageNetDataModule(root=str(root), batch_size=4, num_workers=0, **options)


def _check_colours(images: torch.Tensor, labels: torch.Tensor, fake: FakeTiny) -> int:
    """Every image has its class's colour (or grey level); returns how many came from greyscale JPEGs."""
    classes = sorted(fake.wnids)
    greys = 0
    for image, label in zip(images, labels.tolist(), strict=True):
        wnid = classes[label]
        mean = image.float().mean(dim=(1, 2))
        if torch.equal(image[0], image[1]) and torch.equal(image[1], image[2]):
            greys += 1
            assert (mean - fake.greys[wnid]).abs().max() < 4, (wnid, mean)
        else:
            assert (mean - torch.tensor(fake.colours[wnid], dtype=torch.float)).abs().max() < 8, (wnid, mean)
    return greys


def test_loads_with_sorted_classes_for_train_and_val(tmp_path: Path) -> None:
    fake = write_fake_tiny_imagenet(tmp_path, n_classes=4, n_train_per_class=3, n_val_per_class=2, seed=0)
    assert fake.wnids != sorted(fake.wnids)  # file order differs, so a wrong mapping shows in the colours
    colour_file = next(path for path in fake.train_files if path not in fake.greyscale_files)
    colour = fake.colours[colour_file.name.split("_")[0]]
    Image.new("RGB", (64, 64), colour).convert("CMYK").save(colour_file, quality=95)

    dm = _dm(tmp_path)
    dm.setup()
    arrays = dm.arrays
    assert arrays.train_images.shape == (12, 3, 64, 64) and arrays.train_images.dtype == torch.uint8
    assert arrays.test_images.shape == (8, 3, 64, 64) and arrays.test_images.dtype == torch.uint8
    assert arrays.train_labels.dtype == torch.int64 and arrays.test_labels.dtype == torch.int64
    assert dm.num_classes == 4 and TinyImageNetDataModule.num_classes == 200
    assert torch.bincount(arrays.train_labels).tolist() == [3, 3, 3, 3]
    assert torch.bincount(arrays.test_labels).tolist() == [2, 2, 2, 2]
    assert dm.arrays.class_names == [fake.names.get(wnid, wnid) for wnid in sorted(fake.wnids)]
    assert fake.wnids[-1] in dm.arrays.class_names  # no words.txt entry: the wnid stands in

    greys = _check_colours(arrays.train_images, arrays.train_labels, fake)
    greys += _check_colours(arrays.test_images, arrays.test_labels, fake)
    assert greys == len(fake.greyscale_files) > 0

    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (4, 3, 64, 64) and images.dtype == torch.uint8 and labels.dtype == torch.int64


def test_cache_is_written_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = write_fake_tiny_imagenet(tmp_path, n_classes=3, n_train_per_class=2, n_val_per_class=1, seed=1)
    first = _dm(tmp_path)
    first.setup()
    cache = fake.folder / CACHE_NAME
    assert cache.is_file()
    stamp = cache.stat().st_mtime_ns
    assert [p.name for p in fake.folder.iterdir() if p.name.startswith(".")] == []  # no temp file left

    shutil.rmtree(fake.folder / "train")
    shutil.rmtree(fake.folder / "val")

    def no_decoding(self, path):
        raise AssertionError(f"decoded {path} although the cache is valid")

    monkeypatch.setattr(TinyImageNetDataModule, "_decode", no_decoding)
    second = _dm(tmp_path)
    second.setup()
    assert cache.stat().st_mtime_ns == stamp
    for key in ("train_images", "train_labels", "test_images", "test_labels"):
        assert torch.equal(getattr(second.arrays, key), getattr(first.arrays, key))
    assert second.arrays.class_names == first.arrays.class_names


def test_stale_cache_is_rebuilt(tmp_path: Path) -> None:
    fake = write_fake_tiny_imagenet(tmp_path, n_classes=3, n_train_per_class=2, n_val_per_class=1, seed=2)
    _dm(tmp_path).setup()
    dropped = fake.wnids[0]
    (fake.folder / "wnids.txt").write_text("".join(f"{w}\n" for w in fake.wnids[1:]))
    annotations = fake.folder / "val" / "val_annotations.txt"
    kept = [line for line in annotations.read_text().splitlines(keepends=True) if dropped not in line]
    annotations.write_text("".join(kept))

    dm = _dm(tmp_path)
    with pytest.warns(UserWarning, match="another class list; rebuilding"):
        dm.setup()
    assert dm.num_classes == 2 and len(dm.arrays.train_labels) == 4 and len(dm.arrays.test_labels) == 2
    with np.load(fake.folder / CACHE_NAME) as cache:
        assert cache["classes"].tolist() == sorted(fake.wnids[1:])


def test_missing_val_annotations(tmp_path: Path) -> None:
    fake = write_fake_tiny_imagenet(tmp_path, n_classes=2, n_train_per_class=1, n_val_per_class=1)
    (fake.folder / "val" / "val_annotations.txt").unlink()
    with pytest.raises(DataError, match=r"val/val_annotations\.txt is missing"):
        _dm(tmp_path).setup()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_unreadable_jpeg_is_named(tmp_path: Path, damage: str) -> None:
    fake = write_fake_tiny_imagenet(tmp_path, n_classes=2, n_train_per_class=2, n_val_per_class=1)
    path = fake.val_files[1]
    data = path.read_bytes()
    path.write_bytes(b"this is not a JPEG" if damage == "garbage" else data[: len(data) // 2])
    with pytest.raises(DataError, match=rf"{path.name}: cannot decode the image"):
        _dm(tmp_path).setup()
    assert not (fake.folder / CACHE_NAME).exists()


def test_val_wnid_not_in_wnids(tmp_path: Path) -> None:
    fake = write_fake_tiny_imagenet(tmp_path, n_classes=2, n_train_per_class=1, n_val_per_class=1)
    annotations = fake.folder / "val" / "val_annotations.txt"
    with open(annotations, "a") as handle:
        handle.write("val_99.JPEG\tn09999999\t0\t0\t63\t63\n")
    with pytest.raises(DataError, match=r"val_annotations\.txt, line 3: wnid 'n09999999' is not in .*wnids\.txt"):
        _dm(tmp_path).setup()


def test_missing_class_folder(tmp_path: Path) -> None:
    fake = write_fake_tiny_imagenet(tmp_path, n_classes=3, n_train_per_class=1, n_val_per_class=1)
    shutil.rmtree(fake.folder / "train" / fake.wnids[1])
    with pytest.raises(DataError, match=rf"class folder .*train/{fake.wnids[1]}/images is missing"):
        _dm(tmp_path).setup()


def test_missing_data_without_download(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        _dm(tmp_path).setup()
    message = str(err.value)
    assert "\n" not in message
    assert str(tmp_path / "tiny-imagenet-200" / "wnids.txt") in message
    assert "http://cs231n.stanford.edu/tiny-imagenet-200.zip" in message
    assert f"place tiny-imagenet-200.zip in {tmp_path}/" in message


def test_failed_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno 101] Network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError) as err:
        _dm(tmp_path, download=True, verify=True).setup()
    message = str(err.value)
    assert "\n" not in message
    assert str(tmp_path / "tiny-imagenet-200") in message
    assert "downloading http://cs231n.stanford.edu/tiny-imagenet-200.zip failed (URLError" in message
    assert list(tmp_path.iterdir()) == []


def _zip_tree(folder: Path, archive: Path) -> None:
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, path.relative_to(folder.parent).as_posix())


def test_download_verify_and_extract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = write_fake_tiny_imagenet(tmp_path / "src", n_classes=2, n_train_per_class=2, n_val_per_class=1)
    archive = tmp_path / "tiny-imagenet-200.zip"
    _zip_tree(fake.folder, archive)
    with served(tmp_path) as url:
        spec = dataclasses.replace(
            TinyImageNetDataModule.archive,
            url=f"{url}/{archive.name}",
            size=archive.stat().st_size,
            md5=calculate_md5(archive),
        )
        monkeypatch.setattr(TinyImageNetDataModule, "archive", spec)
        root = tmp_path / "data"
        dm = _dm(root, download=True, verify=True)
        dm.prepare_data()
        assert (root / "tiny-imagenet-200" / CACHE_NAME).is_file()
        dm.setup()
        assert dm.num_classes == 2 and dm.arrays.train_images.shape == (4, 3, 64, 64)
        assert (root / "tiny-imagenet-200.zip").is_file()

        monkeypatch.setattr(TinyImageNetDataModule, "archive", dataclasses.replace(spec, size=123))
        other = tmp_path / "other"
        with pytest.raises(DataError, match=r"download of http://.*tiny-imagenet-200\.zip: \d+ bytes, expected 123"):
            _dm(other, download=True, verify=True).setup()
    assert not other.exists()  # no partial or unverified download, nor the data root it made, left behind


def _zip_with(archive: Path, kind: str, tmp_path: Path) -> str:
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("tiny-imagenet-200/wnids.txt", "n01\n")
        if kind == "dotdot":
            zf.writestr("tiny-imagenet-200/../../evil.txt", "evil")
            return "escapes"
        if kind == "absolute":
            zf.writestr(str(tmp_path / "abs_evil.txt"), "evil")
            return "absolute"
        info = zipfile.ZipInfo("tiny-imagenet-200/link")
        info.create_system = 3
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
        return "symlink"


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_unsafe_zip_members_are_refused(tmp_path: Path, kind: str) -> None:
    archive = tmp_path / "bad.zip"
    reason = _zip_with(archive, kind, tmp_path)
    target = tmp_path / "out"
    with pytest.raises(DataError, match=rf"bad\.zip: refusing to extract member .*{reason}"):
        safe_extract(archive, target)
    assert not target.exists()
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "abs_evil.txt").exists()


def test_symlinked_folder_is_used_as_it_is(tmp_path: Path) -> None:
    """A shared layout, data/tiny-imagenet-200 -> shared/tiny-imagenet-200: loaded through the link, with the
    val file names checked against the link's path, not the target's."""
    fake = write_fake_tiny_imagenet(tmp_path / "shared", n_classes=2, n_train_per_class=2, n_val_per_class=1)
    root = tmp_path / "data"
    root.mkdir()
    (root / "tiny-imagenet-200").symlink_to(fake.folder)
    dm = _dm(root)
    dm.setup()
    assert dm.num_classes == 2 and dm.arrays.train_images.shape == (4, 3, 64, 64)
    _check_colours(dm.arrays.test_images, dm.arrays.test_labels, fake)  # labels follow sorted wnids, as ever
    assert [p.name for p in root.iterdir()] == ["tiny-imagenet-200"]


def test_dangling_symlinked_folder_names_the_link_and_its_target(tmp_path: Path) -> None:
    fake = write_fake_tiny_imagenet(tmp_path / "src", n_classes=2, n_train_per_class=1, n_val_per_class=1)
    root = tmp_path / "data"
    root.mkdir()
    _zip_tree(fake.folder, root / "tiny-imagenet-200.zip")  # at hand, but not to be extracted through the link
    link, target = root / "tiny-imagenet-200", tmp_path / "unmounted" / "tiny-imagenet-200"
    link.symlink_to(target)
    with pytest.raises(DataError) as err:
        _dm(root).setup()
    message = str(err.value)
    assert "\n" not in message
    assert f"tiny_imagenet: {link} is a symlink to {target}, which does not exist: mount or restore it" in message
    assert sorted(p.name for p in root.iterdir()) == ["tiny-imagenet-200", "tiny-imagenet-200.zip"]
