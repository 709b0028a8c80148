"""Test order for `make test` (two pytest-xdist workers under `--dist loadfile`, each file on one worker): the SLURM
cluster tests first, then the other slow tests, then the rest. The cluster tests spend most of their time waiting for
jobs, so the other worker trains alongside them; the long files start early and the many short ones fill in at the
end, so both workers finish at about the same time. Without xdist the order is the same and changes no result."""

from __future__ import annotations

import pytest


def _rank(item: pytest.Item) -> int:
    """0: runs jobs on the SLURM cluster; 1: marked slow; 2: the rest."""
    if item.get_closest_marker("slurm") is not None:
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Sort by rank, keeping the collected order within a rank."""
    items.sort(key=_rank)
