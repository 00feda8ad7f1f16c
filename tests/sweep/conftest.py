"""Fixtures of the sweep tests: the CLI's environment, test hosts that live for a module, and
the Kubernetes API double (no API server can run here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork
from tests.integration.conftest import cli_env
from tests.k8s.fixtures import k8s_api  # noqa: F401


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: state, config and Ansible's dirs under tmp_path."""
    return cli_env(tmp_path)


@pytest.fixture(scope="module")
def module_hosts(host_network: HostNetwork) -> Iterator[HostFactory]:
    """Test hosts that live for a whole module (one fleet, several tests reading it)."""
    factory = HostFactory(host_network)
    yield factory
    factory.remove_all()
