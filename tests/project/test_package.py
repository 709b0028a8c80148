"""What `pip install .` (a wheel) and `pip install -e .` (editable) install works from any directory.

The checkout keeps `conf/` and `callbacks/` at the top level; installed, they must be `vit_locality.conf` and
`vit_locality.callbacks` (pyproject's package-dir mapping), with no generic top-level `conf` or `callbacks`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers import REPO, Spawner

SCRIPTS = (
    "vit-locality-train",
    "vit-locality-report",
    "vit-locality-summary",
    "vit-locality-analyze",
)
ABSENT = "is absent from the `packages` configuration"  # setuptools' warning for a folder it would leave out


def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files a clean clone would have (tracked, plus new files git does not ignore): building in the checkout
    would reuse its `build/` folder, whose stale modules end up in the wheel."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    copy = tmp_path_factory.mktemp("source")
    for name in listed:
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    return copy


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory, spawns: Spawner) -> Path:
    """The built wheel; what the build printed is saved beside it as build.log."""
    out = tmp_path_factory.mktemp("dist")
    source = source_copy(tmp_path_factory)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        text=True,
    )
    (out / "build.log").write_text(done.stdout + done.stderr)
    (built,) = out.glob("vit_locality-*.whl")
    return built


def new_venv(tmp_path_factory: pytest.TempPathFactory, install: list[str]) -> Path:
    """A new venv holding only this package (`install`: pip's arguments); the heavy dependencies come from this venv
    through a .pth file."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(
        subprocess.check_output(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            *install,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (venv / "install.log").write_text(done.stdout + done.stderr)
    return venv


@pytest.fixture(scope="module", params=["wheel", "editable"])
def fresh_venv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, spawns: Spawner) -> Path:
    if request.param == "wheel":
        return new_venv(tmp_path_factory, [str(request.getfixturevalue("wheel"))])
    return new_venv(tmp_path_factory, ["-e", str(REPO)])


def test_wheel_ships_configs_entry_points_and_license(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    configs = {f"vit_locality/conf/{p.relative_to(REPO / 'conf').as_posix()}" for p in (REPO / "conf").rglob("*.yaml")}
    assert "vit_locality/conf/experiment/demo.yaml" in configs
    assert {name for name in names if name.endswith(".yaml")} == configs
    assert not any(name.startswith(("benchmarks/", "vit_locality/bench/")) for name in names)
    assert "vit_locality/callbacks/__init__.py" in names
    assert not any(name.startswith("callbacks/") for name in names)  # no generic top-level package
    assert "hydra_plugins/vit_locality/slurm.py" in names  # where Hydra accepts a launcher from
    assert not any(name.startswith("vit_locality/sweep/plugins") for name in names)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: MIT" in meta
    assert any(name.endswith("licenses/LICENSE") for name in names)
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    for script in SCRIPTS:
        assert f"{script} = " in entry


def test_package_list_covers_every_package_folder() -> None:
    """A sub-package missing from pyproject's explicit list would be left out of the wheel (tests pass in the
    checkout, the installed command fails); so would a config group folder's yaml files."""
    import tomllib

    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, installed_as = set(setuptools["packages"]), {v: k for k, v in setuptools["package-dir"].items()}
    folders = [p.parent.relative_to(REPO).as_posix() for p in (REPO / "vit_locality").rglob("__init__.py")]
    found = {installed_as.get(folder, folder.replace("/", ".")) for folder in folders}
    groups = [p for p in (REPO / "conf").rglob("*") if p.is_dir() and p.name != "__pycache__"]
    found |= {".".join(("vit_locality", *p.relative_to(REPO).parts)) for p in groups}
    found |= {"vit_locality.conf", "vit_locality.callbacks"}
    assert listed == found


def test_wheel_build_and_install_print_no_package_warnings(wheel: Path, fresh_venv: Path) -> None:
    """Every config folder is a declared package: neither the wheel's build nor an (editable) install warns that
    setuptools would leave one out (about 30 lines per folder)."""
    assert (wheel.parent / "build.log").read_text().count(ABSENT) == 0
    assert (fresh_venv / "install.log").read_text().count(ABSENT) == 0


def test_installed_package_has_no_top_level_conf_or_callbacks(fresh_venv: Path, tmp_path: Path) -> None:
    code = (
        "import importlib.util as u, vit_locality.callbacks as c, vit_locality.paths as p; "
        "print(u.find_spec('callbacks'), u.find_spec('conf'), (p.CONF_DIR / 'train.yaml').is_file(), c.__name__)"
    )
    done = subprocess.run([fresh_venv / "bin" / "python", "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.stdout.split() == ["None", "None", "True", "vit_locality.callbacks"], done.stderr


def test_installed_launcher_and_sweeper_import_as_hydra_plugins(fresh_venv: Path, tmp_path: Path) -> None:
    code = (
        "from hydra_plugins.vit_locality.slurm import FollowingSlurmLauncher as cls; "
        "from hydra_plugins.vit_locality.search import OneLineOptunaSweeper as search; "
        "print(cls.__mro__[1].__name__, search.__mro__[1].__name__)"
    )
    done = subprocess.run([fresh_venv / "bin" / "python", "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.stdout.split() == ["SlurmLauncher", "OptunaSweeper"], done.stderr


def test_installed_train_runs_a_cell_from_any_directory(fresh_venv: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = tmp_path / "run"
    args = ["data=synthetic", "model=vit_tiny", "trainer=cpu", "data.train_size=128", "data.test_size=64",
            "data.batch_size=64", "trainer.max_epochs=1", "callbacks.progress_bar=none",  # workers on
            f"hydra.run.dir={run_dir}"]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [fresh_venv / "bin" / "vit-locality-train", *args], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((run_dir / "results.json").read_text())["status"] == "complete"
    report = subprocess.run(
        [fresh_venv / "bin" / "vit-locality-summary", str(run_dir.parent)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0 and "synthetic" in report.stdout, report.stderr
    bad = subprocess.run(
        [fresh_venv / "bin" / "vit-locality-train", "data=imagenet"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "data=imagenet is not allowed" in bad.stderr


def test_python_m_vit_locality_points_to_the_four_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m vit_locality` names each installed command with its module form (each module runs as one)."""
    import importlib.util
    import re

    from vit_locality.__main__ import COMMANDS, main

    section = (REPO / "pyproject.toml").read_text().split("[project.scripts]")[1].split("\n[")[0]
    scripts = dict(re.findall(r'^([\w-]+) = "([\w.:]+)"$', section, re.MULTILINE))
    assert main([]) == 0 and main(["--help"]) == 0
    shown = capsys.readouterr().out
    for name, module, _ in COMMANDS:
        assert f"{name}  " in shown and f"python -m {module} " in shown
        target = scripts[name].split(":")[0]  # the module form is the command's module, or its package's __main__
        assert target in (module, f"{module}.__main__")
        assert "__main__" in (REPO / importlib.util.find_spec(target).origin).read_text()
    assert sorted(scripts) == sorted(name for name, _, _ in COMMANDS)
    assert main(["train"]) == 2
    assert "runs no command (got 'train')" in capsys.readouterr().err
