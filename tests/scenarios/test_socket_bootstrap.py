"""Scenario 4, socket bootstrap failure for real: the ranks are told a port nothing serves.

A 2-rank gloo job whose rank 0 (the TCPStore server) runs on another node; this node runs
rank 1, whose ``MASTER_PORT`` is wrong: its init_method names port 29501 of the node's own
address, where nothing listens, so every connect is refused by the kernel (inside the test
host's own network namespace: no packet leaves it) and c10d retries until the process-group
timeout, then raises ``DistNetworkError: The client socket has timed out ... while trying to
connect to (ADDR, 29501)``. torch 2.13 does not log the ECONNREFUSED itself; the test shows
that a connect to that port is refused.
"""

from __future__ import annotations

import pytest

from tests.scenarios.conftest import Outcome
from tests.scenarios.job import MASTER_PORT, RankSpec

pytestmark = [pytest.mark.live, pytest.mark.ssh]

WRONG_PORT = MASTER_PORT + 1
TIMEOUT_S = 5

SOCKET_CLASS = (
    "needs applog class: c10d's bootstrap connect failures, `[c10d] TCP client failed to "
    "connect/validate to host H:P - retrying` and `DistNetworkError: The client socket has timed "
    "out after Nms while trying to connect to (H, P)`, must classify as `socket` (today the "
    "`TCPStore` / `timed out` words file them as store-timeout), so app-error's "
    "`first_error.category == 'socket'` rule names network-socket"
)


@pytest.fixture(scope="module")
def outcome(job_on_node) -> Outcome:  # type: ignore[no-untyped-def]
    # rank 0 lives on another node; rank 1's init_method has the wrong port
    ranks = [None, RankSpec(init_method="tcp://{address}:" + str(WRONG_PORT))]
    return job_on_node("sock-node", ranks, timeout_s=TIMEOUT_S)  # type: ignore[no-any-return]


def test_nothing_serves_the_wrong_port_so_a_connect_there_is_refused(outcome: Outcome) -> None:
    probe = outcome.node.in_host([
        "python3", "-c",
        "import socket, sys\n"
        "try:\n"
        f"    socket.create_connection(({outcome.host.address!r}, {WRONG_PORT}), timeout=5)\n"
        "except ConnectionRefusedError as e:\n"
        "    print('refused', e.errno)\n",
    ])
    assert probe.stdout.strip() == "refused 111", probe


def test_rank_1_retries_the_refused_rendezvous_until_it_times_out(outcome: Outcome) -> None:
    log = outcome.job.logs[1]
    assert outcome.job.exit_codes == {1: 1}, log[-2000:]
    assert f"TCP client failed to connect/validate to host {outcome.host.address}:{WRONG_PORT}" \
        in log, log[-2000:]
    assert (f"DistNetworkError: The client socket has timed out after {TIMEOUT_S * 1000}ms "
            f"while trying to connect to ({outcome.host.address}, {WRONG_PORT})") in log


def test_the_runbook_names_network_socket(outcome: Outcome) -> None:
    d = outcome.diagnosis
    assert d.verdict["root_cause"] == "network-socket", d.explain()


def test_the_first_anomaly_is_the_failed_connect_in_rank_1s_log(outcome: Outcome) -> None:
    d = outcome.diagnosis
    first = d.verdict["first_anomaly"]
    assert first["source"] == "app/rank-1.log", d.explain()
    assert f"{outcome.host.address}:{WRONG_PORT}" in first["text"] or \
        f"{outcome.host.address}, {WRONG_PORT}" in first["text"], d.explain()


def test_no_memory_or_hardware_cause_is_blamed(outcome: Outcome) -> None:
    d = outcome.diagnosis
    assert not d.causes & {"host-memory-oom", "gpu-hardware", "pcie-error"}, d.explain()
