"""Test tiers, chosen by the fixtures a test uses, and the test order for `make test`.

A test that trains in this process requests `trains` (it returns the in-process runner, tests/helpers.py's
`InProcessTraining`); one that starts a subprocess (train.py, a report, `make`, a child holding a lock) requests
`spawns` (it returns `Spawner`, the subprocess runners); one that runs jobs on the local SLURM cluster requests
`slurm_cluster` (tests/slurm/conftest.py). A fixture that trains or spawns for its tests (a module's shared run)
requests `trains` or `spawns` itself, and its tests inherit the tier: pytest's `item.fixturenames` is the whole
fixture closure. At collection, a test with `trains` or `spawns` in its closure is marked `slow`, one with
`slurm_cluster` `slurm` and `slow`; the rest are the fast tier (`make test-fast`, `-m "not slow"`): no training loop,
no subprocess. No test is marked by hand: `fast_tier_guard` makes `subprocess.Popen` and Lightning's
`Trainer.fit`/`validate`/`test`/`predict` fail a test of the fast tier (its fixtures' setup included), naming the
fixture to request, so a test that trains or spawns cannot hide there. A process the code under test starts counts
too: W&B's service (wandb.init), `git rev-parse` for a record's code version, inductor's C++ compiler.

Order (two pytest-xdist workers under `--dist loadfile`, each file on one worker): the SLURM cluster tests first,
then the other slow tests, then the rest. The cluster tests spend most of their time waiting for jobs, so the other
worker trains alongside them; the long files start early and the many short ones fill in at the end, so both workers
finish at about the same time. Without xdist the order is the same and changes no result."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported where used: a test that needs neither collects even while helpers.py cannot import
    from helpers import InProcessTraining, Spawner

# The fixtures that stand for a heavy resource, and the marks a test that uses one (directly or through another
# fixture) gets. `slurm_cluster` lives in tests/slurm/conftest.py.
TIER_FIXTURES: dict[str, tuple[str, ...]] = {
    "trains": ("slow",),
    "spawns": ("slow",),
    "slurm_cluster": ("slurm", "slow"),
}


@pytest.fixture(scope="session")
def trains() -> InProcessTraining:
    """The test trains in this process (run_cell, Trainer.fit/validate/test, train.py's main): the slow tier. Returns
    the in-process runner; session-scoped so that a module's shared run can request it."""
    from helpers import InProcessTraining

    return InProcessTraining()


@pytest.fixture(scope="session")
def spawns() -> Spawner:
    """The test starts a subprocess (train.py, a report as a user runs it, `make`, any other program): the slow
    tier. Returns the subprocess runners; session-scoped so that a module's shared run can request it."""
    from helpers import Spawner

    return Spawner()


def _rank(item: pytest.Item) -> int:
    """0: runs jobs on the SLURM cluster; 1: slow (trains or spawns); 2: the rest."""
    if item.get_closest_marker("slurm") is not None:
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the marks must be there when it reads them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by the tier fixtures in its fixture closure, then sort by rank, keeping the collected order
    within a rank."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marks in TIER_FIXTURES.items():
            if fixture in names:
                for mark in marks:
                    if item.get_closest_marker(mark) is None:
                        item.add_marker(mark)
    items.sort(key=_rank)


class FastTierError(pytest.fail.Exception):
    """A test of the fast tier trained or started a process. A BaseException (as pytest.fail's), so that the code
    under test's `except Exception` cannot swallow it."""


class _Guard:
    """Which fast-tier test is being set up or run (None between tests and for slow ones), and what it did."""

    item: pytest.Item | None = None
    caught: list[str] = []


def _refuse(what: str, fixture: str) -> None:
    """Raise (and remember) FastTierError when a fast-tier test is being set up or run."""
    item = _Guard.item
    if item is None:
        return
    message = (
        f"{item.nodeid} is in the fast tier but {what}: this test {'trains' if fixture == 'trains' else 'spawns'}: "
        f"request the `{fixture}` fixture (tests/conftest.py), directly or through the fixture that does it"
    )
    _Guard.caught.append(message)
    raise FastTierError(message, pytrace=False)


def _guarded(original: Callable[..., Any], what: str, fixture: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _refuse(what, fixture)
        return original(*args, **kwargs)

    return guarded


@pytest.fixture(scope="session", autouse=True)
def fast_tier_guard() -> Iterator[None]:
    """For the session: starting a subprocess, or a Lightning Trainer's fit/validate/test/predict, raises
    FastTierError while a test not marked slow is set up or run (pytest_runtest_setup/call below say which)."""
    from lightning.pytorch import Trainer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            subprocess.Popen,
            "__init__",
            _guarded(subprocess.Popen.__init__, "starts a subprocess (subprocess.Popen)", "spawns"),
        )
        for method in ("fit", "validate", "test", "predict"):
            patch.setattr(Trainer, method, _guarded(getattr(Trainer, method), f"calls Trainer.{method}", "trains"))
        yield


def _watch(item: pytest.Item) -> None:
    """Guard `item` when it is in the fast tier."""
    _Guard.item = None if item.get_closest_marker("slow") is not None else item
    _Guard.caught = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _watch(item)  # its fixtures' setup included: a module's shared run is made in its first test's setup
    try:
        return (yield)
    finally:
        _Guard.item = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    _Guard.item = None if item.get_closest_marker("slow") is not None else item
    try:
        result = yield
    finally:
        _Guard.item = None
    if _Guard.caught:  # raised, but caught by the code under test: the test still fails
        raise FastTierError(_Guard.caught[0], pytrace=False)
    return result
