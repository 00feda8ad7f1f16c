"""Scenario 3, a peer rank that died of its own bug: rank 1 raises ``ValueError`` before init.

Two gloo ranks; rank 1's dataset shard spec is invalid and it exits with a plain Python
exception before it joins the process group. Rank 0, the TCPStore server, then times out at
init (``DistStoreError: ... waiting for clients. 1/2 clients joined``): the error surfaces at
communicator init, the cause is the other rank's own exception. Memory is plentiful and a
neighbour's OOM sits in the kernel log; neither may be blamed.
"""

from __future__ import annotations

import pytest

from tests.scenarios.conftest import Outcome
from tests.scenarios.job import RankSpec

pytestmark = [pytest.mark.live, pytest.mark.ssh]


@pytest.fixture(scope="module")
def outcome(job_on_node) -> Outcome:  # type: ignore[no-untyped-def]
    ranks = [RankSpec(cache_mib=32), RankSpec(cache_mib=32, fail="value-error")]
    return job_on_node("bug-node", ranks)  # type: ignore[no-any-return]


def test_rank_1_raises_its_own_exception_and_rank_0_times_out_at_init(outcome: Outcome) -> None:
    logs = outcome.job.logs
    assert outcome.job.exit_codes == {0: 1, 1: 1}, logs
    assert "ValueError: invalid shard spec" in logs[1]
    assert "waiting for clients. 1/2 clients joined" in logs[0]
    assert outcome.cgroup.oom_kills() == 0


def test_the_runbook_names_peer_rank_exited(outcome: Outcome) -> None:
    d = outcome.diagnosis
    assert d.verdict["root_cause"] == "peer-rank-exited", d.explain()


def test_the_first_anomaly_is_the_exception_in_rank_1s_log(outcome: Outcome) -> None:
    d = outcome.diagnosis
    first = d.verdict["first_anomaly"]
    assert first["source"] == "app/rank-1.log", d.explain()
    assert "ValueError: invalid shard spec" in first["text"], d.explain()


def test_no_memory_or_hardware_cause_is_blamed_and_nothing_is_drained(outcome: Outcome) -> None:
    d = outcome.diagnosis
    assert not d.causes & {"host-memory-oom", "gpu-hardware", "pcie-error"}, d.explain()
    assert not set(d.proposal_kinds) & {"node-drain", "memory-limit"}, d.proposal_kinds
    assert d.statuses["cgroup-memory"] == "ok", d.explain()
