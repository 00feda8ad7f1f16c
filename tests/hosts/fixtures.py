"""pytest plugin: real SSH test hosts as fixtures (loaded by tests/conftest.py).

* ``host_network`` (session): one bridge shared by the whole run, since a network costs a few
  process starts and hosts are cheap to add and remove on it;
* ``ssh_host`` (function): a factory, ``ssh_host("h1") -> TestHost``; every host it made is
  removed after the test, pass or fail, so no test sees another's processes or files;
* ``known_hosts`` / ``client_key``: what a client needs to trust and log in to those hosts.

Missing root or tools make these fixtures *fail*, not skip: a skipped SSH test would read as a
pass in CI while proving nothing. Tests that use the fixtures get the ``ssh`` marker
automatically (so ``-m "not ssh"`` deselects them); when such a test fails, the tail of each of
its hosts' sshd logs is added to the report.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.harness import (
    ClientKey,
    HarnessError,
    HostNetwork,
    TestHost,
    missing_prerequisites,
)

_HOSTS_KEY = pytest.StashKey[list[TestHost]]()
_HOST_FIXTURES = frozenset({"host_network", "ssh_host", "known_hosts", "client_key"})


class HostFactory:
    """What the ``ssh_host`` fixture yields: call it for one host, ``.many()`` for several."""

    def __init__(self, network: HostNetwork) -> None:
        self.network = network
        #: hosts made for this test, in order (read by the report hook for sshd logs)
        self.created: list[TestHost] = []

    def __call__(self, name: str, **kwargs: Any) -> TestHost:
        """A fresh host named ``name`` (see :meth:`HostNetwork.add_host` for ``kwargs``)."""
        host = self.network.add_host(name, **kwargs)
        self.created.append(host)
        return host

    def many(self, names: Sequence[str], **kwargs: Any) -> list[TestHost]:
        """Several hosts brought up together (faster than one call each)."""
        hosts = self.network.add_hosts(names, **kwargs)
        self.created.extend(hosts)
        return hosts

    def remove_all(self) -> None:
        """Remove every host made here, newest first; report all failures, not the first."""
        errors = []
        for host in reversed(self.created):
            try:
                self.network.remove_host(host)
            except HarnessError as exc:
                errors.append(str(exc))
        if errors:
            raise HarnessError("; ".join(errors))


@pytest.fixture(scope="session")
def host_network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNetwork]:
    """The session's bridge for test hosts; torn down (hosts, bridge, files) at the end."""
    problems = missing_prerequisites()
    if problems:
        pytest.fail("SSH test hosts cannot run here: " + "; ".join(problems), pytrace=False)
    try:
        network = HostNetwork(tmp_path_factory.mktemp("hostnet"))
    except HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    with network:
        yield network


@pytest.fixture
def ssh_host(host_network: HostNetwork, request: pytest.FixtureRequest) -> Iterator[HostFactory]:
    """``ssh_host("h1")`` adds a host for this test only; it is removed afterwards even if
    the test fails."""
    factory = HostFactory(host_network)
    request.node.stash[_HOSTS_KEY] = factory.created
    yield factory
    factory.remove_all()


@pytest.fixture(scope="session")
def known_hosts(host_network: HostNetwork) -> Path:
    """known_hosts listing every live host (the file is rewritten as hosts come and go)."""
    return host_network.known_hosts_path


@pytest.fixture(scope="session")
def client_key(host_network: HostNetwork) -> ClientKey:
    """The key every test host accepts for root."""
    return host_network.client_key


def pytest_configure(config: pytest.Config) -> None:
    """Register ``ssh`` here too, so the plugin works under ``--strict-markers`` outside this
    project's pytest config (a benchmark or molecule suite loading it with ``-p``)."""
    config.addinivalue_line(
        "markers", "ssh: talks to real OpenSSH test hosts in network namespaces (needs root)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a host fixture ``ssh``, so marker selection can't miss one."""
    for item in items:
        if _HOST_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.ssh)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, show the end of each of the test's hosts' sshd logs (why a login failed,
    what sshd saw) while the files still exist."""
    report = yield
    if report.failed:
        for host in item.stash.get(_HOSTS_KEY, []):
            tail = host.sshd_log_tail()
            if tail:
                report.sections.append((f"sshd log of {host.name} ({host.address})", tail))
    return report
