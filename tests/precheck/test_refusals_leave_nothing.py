"""A refused command leaves nothing behind: the pre-check decides, before the config tree, whether a missing data set
can be downloaded at all (its server answers, its root can be made), and refuses in one line, exit 2."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest
from data_fakes import redeclare, served
from helpers import Spawner
from record_fakes import complete_payload

from vit_locality.datasets import spec_of
from vit_locality.paths import CONF_DIR
from vit_locality.precheck import data_presence
from vit_locality.precheck.preflight import check_command, plan_command
from vit_locality.store.record import write_record

PROXIES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY")


def closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def asking(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy from the environment and nothing cached, for a pre-check that asks servers (as the entry point's)."""
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)
    if hasattr(data_presence, "unreachable_reason"):
        data_presence.unreachable_reason.cache_clear()


def cifar10_from(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """CIFAR-10 declared (data/cifar.py) with its archive at `url`."""
    redeclare(monkeypatch, "cifar10", archives=(replace(spec_of("cifar10").archive(), url=url),))


def test_a_download_whose_server_does_not_answer_is_refused_and_nothing_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asking: None
) -> None:
    root = tmp_path / "no" / "such" / "dir"
    cifar10_from(monkeypatch, f"http://127.0.0.1:{closed_port()}/cifar-10-python.tar.gz")
    (problem,) = check_command(["data=cifar10", f"data.root={root}"], CONF_DIR, ask_servers=True)
    assert problem.startswith(f"cifar10 is not in data.root={root} (no cifar-10-batches-py/ nor cifar-10-python")
    assert "127.0.0.1 cannot be reached to download it (" in problem and "refused" in problem
    assert problem.endswith(f"into {root}/ by hand, or set data.root to where the data set is")
    assert not (tmp_path / "no").exists()


def test_a_download_whose_server_answers_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asking: None) -> None:
    with served(tmp_path) as url:  # any answer will do (here a 404): what the download finds is its to say
        cifar10_from(monkeypatch, f"{url}/cifar-10-python.tar.gz")
        assert check_command(["data=cifar10", f"data.root={tmp_path / 'data'}"], CONF_DIR, ask_servers=True) == []
    assert not (tmp_path / "data").exists()


def test_a_data_root_that_cannot_be_made_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("x")
    (problem,) = check_command(["data=cifar10", f"data.root={tmp_path / 'a_file' / 'data'}"], CONF_DIR)
    assert "cannot hold a download" in problem and f"({tmp_path / 'a_file'} is a file)" in problem


def test_the_newcomers_offline_command_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawns: Spawner
) -> None:
    """`python train.py data=cifar10 data.root=/no/such/dir` without network (here: every request goes to a proxy
    that refuses it, so the test is the same on a machine with network)."""
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)
    proxy = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("https_proxy", proxy)
    monkeypatch.setenv("http_proxy", proxy)
    root = tmp_path / "no" / "such" / "dir"
    done = spawns.run_train(["data=cifar10", f"data.root={root}"], cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: cifar10 is not in data.root=") and "cannot be reached" in line, line
    assert done.stdout == ""  # no config tree
    assert not (tmp_path / "no").exists() and not (tmp_path / "outputs").exists()


def complete_record(identity: str) -> dict:
    """A minimal record that reads as a complete run of `identity`."""
    return complete_payload(identity_hash=identity)


def test_a_later_cells_directory_taken_by_other_settings_is_refused_before_any_cell(tmp_path: Path) -> None:
    """The third cell's directory holds a finished run of another config: refused before the first cell trains."""
    sweep = tmp_path / "sweep"
    command = ["-m", "data=synthetic", "model=vit_tiny", "seed=0,1,2", f"hydra.sweep.dir={sweep}"]
    checked = plan_command(command, CONF_DIR)
    assert checked.problems == []
    plans = [checked.plan]
    third = list(plans[0].run_dirs.values())[2]
    identity = plans[0].identities[third.name]
    write_record(third, complete_record("0123456789abcdef"), status="complete")
    assert check_command(command, CONF_DIR) == [
        f"run directory {third} already holds a complete run with a different config (nothing has run); move that "
        f"directory away or add hydra.sweep.dir={sweep}-2"
    ]
    write_record(third, complete_record("0123456789abcdef"), status="failed")  # unfinished: the cell sets it aside
    assert check_command(command, CONF_DIR) == []
    write_record(third, complete_record(identity), status="complete")  # this cell's own: the cell skips it
    assert check_command(command, CONF_DIR) == []


def test_a_single_runs_directory_taken_by_other_settings_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # outputs/<run name>
    command = ["data=synthetic", "model=vit_tiny"]
    checked = plan_command(command, CONF_DIR)
    assert checked.problems == []
    plans = [checked.plan]
    (run_dir,) = plans[0].run_dirs.values()
    write_record(run_dir, complete_record("0123456789abcdef"), status="complete")
    (problem,) = check_command(command, CONF_DIR)
    assert problem.endswith(f"or add hydra.run.dir={run_dir}-2")  # the advice last: typed as it stands
    assert "(nothing has run)" in problem
