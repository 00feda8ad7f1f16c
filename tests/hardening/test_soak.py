"""Soak: 200 SSH test hosts swept five times in a row in one process leak nothing and answer
the same every time.

`runbook.sweep.run.run_sweep` runs in this process (as `runbook sweep` does, without the CLI
around it) over 200 real sshd test hosts (network namespaces, tests/hosts/) with a three-probe
runbook (runbooks/soak.yaml: three commands plus the three of the preamble per host, one SSH
connection per host); hosts whose name ends in an odd digit get a finding, the others are
healthy. After each round: open file descriptors (/proc/self/fd), threads
(`threading.active_count()` and /proc/self/task) and RSS (/proc/self/status). From the first
round on (its connections, thread pools and caches are the baseline) nothing may grow past a
generous bound — 20 descriptors, 5 threads, 30 MiB — and every host's status, root cause and
stage statuses are the same in every round. The figures are printed at the end.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runbook.spec import load_file
from runbook.sweep.host import HostOptions
from runbook.sweep.inventory import HostEntry
from runbook.sweep.run import run_sweep
from tests.hosts.harness import HostNetwork, missing_prerequisites

pytestmark = [pytest.mark.ssh, pytest.mark.live]

HOSTS = 200
ROUNDS = 5
FORKS = 32
RUNBOOK = Path(__file__).parent / "runbooks" / "soak.yaml"
#: growth allowed after the first round
MORE_FDS, MORE_THREADS, MORE_RSS_MIB = 20, 5, 30


@dataclass
class Sample:
    round: int
    seconds: float
    fds: int
    threads: int
    tasks: int
    rss_mib: float

    def line(self) -> str:
        return (
            f"round {self.round}: {self.seconds:5.1f}s  fds {self.fds:4d}  threads "
            f"{self.threads:3d} (tasks {self.tasks:3d})  RSS {self.rss_mib:6.1f} MiB"
        )


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def _sample(number: int, seconds: float, settle_threads: int | None) -> Sample:
    """Once the round's threads have ended (paramiko's transport threads end a moment after
    their connection closes), up to 10 s."""
    gc.collect()
    deadline = time.monotonic() + 10
    # the kernel's count too: a thread that has returned is gone from /proc/self/task only
    # once the OS thread has exited, a moment later
    while settle_threads is not None and (
        threading.active_count() > settle_threads
        or len(os.listdir("/proc/self/task")) > settle_threads
    ):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return Sample(
        number,
        seconds,
        len(os.listdir("/proc/self/fd")),
        threading.active_count(),
        len(os.listdir("/proc/self/task")),
        _rss_mib(),
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[HostEntry]]:
    """200 hosts on a bridge of their own: closing it tears them all down in one batch (the
    session network removes hosts one at a time, 0.3 s each)."""
    problems = missing_prerequisites()
    if problems:
        pytest.fail("SSH test hosts cannot run here: " + "; ".join(problems), pytrace=False)
    with HostNetwork(tmp_path_factory.mktemp("soaknet")) as network:
        hosts = network.add_hosts([f"soak{i:03d}" for i in range(HOSTS)])
        key = str(network.client_key.private_path)
        known = str(network.known_hosts_path)
        yield [
            HostEntry(
                h.name, f"ssh://root@{h.address}:{h.port}", identities=(key,), known_hosts=known
            )
            for h in hosts
        ]


def _outcome(result: Any) -> tuple[Any, ...]:
    stages = tuple((s.id, s.status) for s in (result.verdict.stages if result.verdict else ()))
    return (result.status.value, result.root_cause, stages, result.error)


def test_five_sweeps_of_200_hosts_leak_nothing_and_agree(
    fleet: list[HostEntry], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    options = HostOptions(runbook=load_file(RUNBOOK), timeout_per_host=90, connect_timeout=20)
    samples: list[Sample] = []
    outcomes: list[dict[str, tuple[Any, ...]]] = []
    for number in range(1, ROUNDS + 1):
        started = time.monotonic()
        sweep = run_sweep(fleet, options, forks=FORKS, runbook_ref="soak", source="soak")
        took = time.monotonic() - started
        outcomes.append({h.host: _outcome(h) for h in sweep.hosts})
        settle = samples[0].threads if samples else None  # wait for the first round's count
        samples.append(_sample(number, took, settle))

    _report(request, samples)
    first = outcomes[0]
    assert len(first) == HOSTS
    odd = {name for name in first if int(name[-1]) % 2}
    for name, (status, cause, stages, error) in first.items():
        want = ("finding", "host-memory-oom") if name in odd else ("healthy", "healthy")
        assert (status, cause) == want, (name, status, cause, error)
        assert stages == (("probe", "anomaly" if name in odd else "ok"),), (name, stages)
    for number, later in enumerate(outcomes[1:], start=2):
        changed = {n: (first[n], later[n]) for n in first if later.get(n) != first[n]}
        assert not changed, f"round {number} differs on {len(changed)} hosts: {changed}"

    base = samples[0]
    for sample in samples[1:]:
        assert sample.fds <= base.fds + MORE_FDS, [s.line() for s in samples]
        assert sample.threads <= base.threads + MORE_THREADS, [s.line() for s in samples]
        assert sample.tasks <= base.tasks + MORE_THREADS, [s.line() for s in samples]
        assert sample.rss_mib <= base.rss_mib + MORE_RSS_MIB, [s.line() for s in samples]


def _report(request: pytest.FixtureRequest, samples: list[Sample]) -> None:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line(f"soak: {HOSTS} hosts x {ROUNDS} sweeps, --forks {FORKS}")
        for sample in samples:
            reporter.write_line("  " + sample.line())
