"""Shared setup for the Ansible tests: the background runs of ansible-lint and molecule
(background.py), started when the first test of this directory sets up.

The Ansible environment itself (state under the test's tmp_path, SSH control sockets in a short
/tmp dir, inventories for the SSH test hosts, one way to run a playbook through ansible-runner,
the ``ansible_env`` fixture) is tests/tools/ansible_env.py, shared with the other directories.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ansible.background import ToolRuns, tool_run_of


@pytest.fixture(scope="session")
def tool_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ToolRuns]:
    """The background runs (tests/ansible/background.py) that the selected tests wait for,
    all started when the first test of this directory sets up."""
    runs = ToolRuns(tmp_path_factory.mktemp("tool-runs"), request.getfixturevalue)
    try:
        runs.start(sorted({n for item in request.session.items if (n := tool_run_of(item))}))
        yield runs
    finally:
        runs.close()


@pytest.fixture(autouse=True)
def _background_tool_runs(tool_runs: ToolRuns) -> None:
    """Every test here sets the background runs going, so they overlap with the first test."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Within this directory, tests that wait for a background run go last (stable order
    otherwise), so the runs overlap with the other tests instead of with each other only."""
    here = Path(__file__).parent
    positions = [i for i, item in enumerate(items) if item.path.is_relative_to(here)]
    ordered = sorted((items[i] for i in positions), key=lambda it: tool_run_of(it) is not None)
    for i, item in zip(positions, ordered, strict=True):
        items[i] = item
