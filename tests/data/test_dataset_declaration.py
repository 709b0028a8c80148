"""A data set is declared once, in its own module (a DatasetSpec constant): the catalog, the schema, the datamodule
registry and the data check read that declaration from the module's source; a missing declaration is refused by the
data check in one line, never skipped; whether the data check asks a server is its caller's argument."""

from __future__ import annotations

import logging
import socket
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from data_fakes import redeclare, undeclare
from helpers import compose_config

from vit_locality.catalog import DATASETS
from vit_locality.data import datamodule_class, workers
from vit_locality.datasets import BUILT_IN_MODULES, built_in, declared_in, spec_of
from vit_locality.errors import ConfigError
from vit_locality.precheck import data_presence
from vit_locality.precheck.data_presence import check_data_present
from vit_locality.precheck.gate import settings_from


def closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def downloadable(root: Path, name: str = "cifar10", download: bool = True) -> SimpleNamespace:
    """A downloadable data section as the gate hands it to the data check."""
    return SimpleNamespace(name=name, root=str(root), download=download)


# ---- every reader reads the declaration ----------------------------------------------------------------------


def test_the_declarations_read_from_source_are_the_modules_own() -> None:
    """What the pre-check reads without importing a module equals the constant the module's datamodule uses."""
    from importlib import import_module

    assert DATASETS == tuple(built_in()) == ("cifar10", "cifar100", "tiny_imagenet", "synthetic", "glyphs")
    for module in BUILT_IN_MODULES:
        imported = import_module(module)
        constants = [value for value in vars(imported).values() if type(value).__name__ == "DatasetSpec"]
        assert [replace(spec, module=module) for spec in constants] == list(declared_in(module))


def test_each_datamodule_matches_its_declaration() -> None:
    for name, spec in built_in().items():
        module = datamodule_class(name)
        assert module.name == name and module.__module__ == spec.module
        if spec.archives:
            assert module.archive == spec.archives[0]
            assert (module.num_classes, module.image_size) == (spec.num_classes, spec.image_size)
        cfg = compose_config([f"data={name}"])
        assert cfg.data.module == spec.module  # each YAML names the module that declares its data set


def test_the_cifar_declarations_are_torchvisions_archives() -> None:
    """The declaration is written out (the pre-check reads it without torch): held equal to torchvision's lists."""
    from torchvision.datasets import CIFAR10, CIFAR100

    for name, official in (("cifar10", CIFAR10), ("cifar100", CIFAR100)):
        archive = spec_of(name).archive()
        assert (archive.url, archive.filename, archive.md5, archive.folder) == (
            official.url,
            official.filename,
            official.tgz_md5,
            official.base_folder,
        )


def test_a_declaration_must_be_literal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "computed.py").write_text(
        'from vit_locality.datasets import DatasetSpec\nNAME = "x"\n'
        'X = DatasetSpec(name=NAME, default_policy="cifar10", config="m:C", datamodule="D")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"computed\.py, line 3: a DatasetSpec is read without running its module"):
        declared_in("computed")
    with pytest.raises(ConfigError, match=r"^data\.module='no_such_module' is not allowed: no such Python module"):
        declared_in("no_such_module")


def test_the_data_check_follows_a_changed_declaration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No copy of the archive list is left in the data check: a declaration moved elsewhere moves what it looks for."""
    redeclare(monkeypatch, "cifar10", archives=(replace(spec_of("cifar10").archive(), folder="moved"),))
    (tmp_path / "moved").mkdir()
    check_data_present(downloadable(tmp_path, download=False), ask_servers=False)


# ---- the data check refuses, never skips ------------------------------------------------------------------------


def test_an_absent_archive_with_download_off_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        check_data_present(downloadable(tmp_path, download=False), ask_servers=False)
    (line,) = str(refused.value).splitlines()
    assert line.startswith(f"cifar10 is not in data.root={tmp_path}") and "data.download=false" in line


def test_a_download_without_a_declared_archive_is_refused_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    redeclare(monkeypatch, "cifar10", archives=None)
    with pytest.raises(ConfigError) as refused:
        check_data_present(downloadable(tmp_path), ask_servers=False)
    (line,) = str(refused.value).splitlines()
    assert line.startswith("data set cifar10: its declaration (DatasetSpec) lists no archive")


def test_a_data_set_without_a_declaration_is_refused_not_skipped(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        check_data_present(downloadable(tmp_path, name="toy"), ask_servers=False)
    (line,) = str(refused.value).splitlines()
    assert line.startswith("data set 'toy' declares nothing (no DatasetSpec)") and "cifar10, cifar100" in line
    with pytest.raises(ConfigError, match="^data set 'toy' declares nothing"):
        spec_of("toy")


def test_a_removed_declaration_is_refused_by_the_data_check_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The module is there, its DatasetSpec is not: the gate and the data check refuse in one line."""
    undeclare(monkeypatch, "cifar10")
    cfg = compose_config(["data=cifar10", f"data.root={tmp_path}", "data.download=false", "trainer=cpu"])
    with pytest.raises(ConfigError) as refused:
        settings_from(cfg, ask_servers=False)
    (line,) = str(refused.value).splitlines()
    assert (
        line
        == "data.name='cifar10' is not allowed: one of cifar100, tiny_imagenet, synthetic, glyphs (the built-in ones)"
    )
    with pytest.raises(ConfigError) as refused:
        check_data_present(downloadable(tmp_path, download=False), ask_servers=False)
    (line,) = str(refused.value).splitlines()
    assert line.startswith("data set 'cifar10' declares nothing (no DatasetSpec): known data sets are cifar100, ")


def test_a_generated_set_has_nothing_to_check() -> None:
    check_data_present(SimpleNamespace(name="synthetic"), ask_servers=True)


# ---- whether the check asks a server is an argument ------------------------------------------------------------


def test_the_server_is_asked_only_when_the_caller_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{closed_port()}/cifar-10-python.tar.gz"
    redeclare(monkeypatch, "cifar10", archives=(replace(spec_of("cifar10").archive(), url=url),))
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    data_presence.unreachable_reason.cache_clear()
    check_data_present(downloadable(tmp_path / "data"), ask_servers=False)
    with pytest.raises(ConfigError, match="127.0.0.1 cannot be reached to download it"):
        check_data_present(downloadable(tmp_path / "data"), ask_servers=True)


def test_the_gate_passes_its_callers_choice_to_the_data_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{closed_port()}/cifar-10-python.tar.gz"
    redeclare(monkeypatch, "cifar10", archives=(replace(spec_of("cifar10").archive(), url=url),))
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    data_presence.unreachable_reason.cache_clear()
    cfg = compose_config(["data=cifar10", f"data.root={tmp_path / 'data'}", "trainer=cpu", "data.num_workers=0"])
    assert settings_from(cfg, ask_servers=False).data.name == "cifar10"
    with pytest.raises(ConfigError, match="cannot be reached to download it"):
        settings_from(cfg, ask_servers=True)


# ---- the worker cap is said once per datamodule, with no module state ----------------------------------------------


def test_the_worker_cap_is_said_by_its_owner_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(workers, "usable_cores", lambda: 2)
    caplog.set_level(logging.INFO, logger="vit_locality")
    assert not hasattr(workers, "_CAPPED")
    assert not hasattr(data_presence, "_ASKING") and not hasattr(data_presence, "ask_servers")
    said: set[tuple[int, int]] = set()
    assert [workers.usable_workers(4, said) for _ in range(3)] == [2, 2, 2]
    assert workers.usable_workers(4, set()) == 2  # another owner (a new datamodule) says it again
    lines = [r.getMessage() for r in caplog.records if "data.num_workers" in r.getMessage()]
    assert lines == ["data.num_workers=4: 2 data workers, the cores this process may use"] * 2
