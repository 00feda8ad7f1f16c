"""Scenario 2, /dev/shm exhausted for real: a 4 MiB tmpfs is the node's /dev/shm.

Two gloo ranks rendezvous, then take turns creating the shared-memory segment NCCL's SHM
transport would (a file in /dev/shm extended with ``posix_fallocate``), 3 MiB each. Rank 0's
fits; rank 1's gets the kernel's real ENOSPC, logs it in NCCL's words (``Call to posix_fallocate
failed : No space left on device``) and exits; rank 0 then fails in its collective because its
peer is gone. The tmpfs is mounted at /dev/shm in the test host's private mount namespace only,
so the runbook's ``df -B1 /dev/shm`` over SSH sees it (the machine's /dev/shm is untouched).
"""

from __future__ import annotations

import pytest

from tests.scenarios.cgroups import MIB
from tests.scenarios.conftest import Outcome
from tests.scenarios.job import RankSpec

pytestmark = [pytest.mark.live, pytest.mark.ssh]

SHM_SIZE = 4 * MIB
SEGMENT_MIB = 3

SHM_EVIDENCE = (
    "needs runbook rule: shm-p2p's shm-exhausted rule takes its evidence from NCCL's shm WARNs "
    "or else df (`{'source': 'df-shm.txt', 'text': 'Use% 75'}`); the rank's own timed error "
    "(facts.applog.first_error when its category is 'shm', here `Call to posix_fallocate failed "
    ": No space left on device` in app/rank-1.log) must be in that evidence (before the df "
    "fallback) so the verdict's first_anomaly is the failed allocation, not the df reading"
)


@pytest.fixture(scope="module")
def outcome(job_on_node) -> Outcome:  # type: ignore[no-untyped-def]
    ranks = [RankSpec(fail="shm-segment", shm_segment_mib=SEGMENT_MIB) for _ in range(2)]
    return job_on_node("shm-node", ranks, shm_bytes=SHM_SIZE)  # type: ignore[no-any-return]


def test_the_second_segment_gets_a_real_enospc_and_its_peer_fails_after_it(
    outcome: Outcome,
) -> None:
    assert outcome.job.exit_codes == {0: 1, 1: 1}, outcome.job.logs
    assert "Call to posix_fallocate failed : No space left on device" in outcome.job.logs[1]
    assert "OSError: [Errno 28] No space left on device" in outcome.job.logs[1]
    assert "posix_fallocate" not in outcome.job.logs[0]
    df = outcome.node.in_host(["df", "-B1", "/dev/shm"]).stdout.split()
    assert df[-5] == str(SHM_SIZE), df  # the size column: the job's tmpfs, as SSH sees it


def test_the_runbook_names_shm_exhausted_and_proposes_a_shm_size_limit(outcome: Outcome) -> None:
    d = outcome.diagnosis
    assert d.verdict["root_cause"] == "shm-exhausted", d.explain()
    assert "shm-size-limit" in d.proposal_kinds
    assert "node-drain" not in d.proposal_kinds
    shm = d.facts("shm-p2p", "host")["shm"]
    stage = next(s for s in d.verdict["stages"] if s["id"] == "shm-p2p")
    assert shm["size_bytes"] == SHM_SIZE, (shm, stage.get("not_collected"), d.explain())
    assert shm["used_bytes"] >= SEGMENT_MIB * MIB, shm


def test_the_first_anomaly_is_the_failed_posix_fallocate_in_rank_1s_log(outcome: Outcome) -> None:
    d = outcome.diagnosis
    first = d.verdict["first_anomaly"]
    assert first["source"] == "app/rank-1.log", d.explain()
    assert "posix_fallocate failed : No space left on device" in first["text"], d.explain()


def test_neither_host_memory_nor_hardware_is_blamed_for_a_full_dev_shm(outcome: Outcome) -> None:
    d = outcome.diagnosis
    assert not d.causes & {"host-memory-oom", "gpu-hardware", "pcie-error"}, d.explain()
