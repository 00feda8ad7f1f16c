"""A recovery check recorded against its proposal: the store (real SQLite) and the hash-chained
audit trail get `verified` or `failed-verification` with the reason, `approvals show` displays
it, and only a remedy that ran and succeeded can be verified.

The proposals here are queued and moved to `succeeded` through the store itself (claim, then
finish: the transitions an approval makes), because what is under test is the check that
follows a remedy, not the remedy's playbook (tests/recovery/test_staged_replay_live.py approves
one for real). `runbook verify` runs through the real CLI over SSH against a shim host.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from runbook import config as config_mod
from runbook.remedies.approval import Desk, Refused
from runbook.remedies.audit import verify as verify_chain
from runbook.remedies.plans import Target
from runbook.verify import record as verification
from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.recovery import shims
from tests.recovery.conftest import Cli

# a plateau of 620 GB/s puts the shim's `# Avg bus bandwidth` at 470, over the 460 threshold
H100 = {"model": "NVIDIA H100 80GB HBM3", "transport": "P2P/CUMEM/read", "peak_busbw": 620.0}


def desk_for(db: Path) -> Desk:
    return Desk(config_mod.load(None, db=str(db)))


def proposal(desk: Desk, *, kind: str = "shm-size-limit", target: Target | None = None,
             variables: dict[str, Any] | None = None, succeeded: bool = True) -> str:
    stored, _ = desk.store.enqueue(
        key=f"node:{kind}-{len(desk.store.list())}", kind=kind, remedy=kind,
        summary=f"a {kind} fix", params={"measured_bytes": "1024"},
        evidence={"root_cause": "shm-exhausted"}, source="run", ttl=3600, node="rc-verify",
        target=target.as_dict() if target else None, runbook="nccl-init-failure",
        variables={"repeats": 1, **(variables or {})},
    )
    if succeeded:
        desk.store.claim(stored.id, actor="alice")
        desk.store.finish(stored.id, ok=True, result={"status": "successful", "rc": 0})
    return stored.id


def test_a_verdict_is_recorded_on_the_proposal_and_in_the_audit_trail(tmp_path: Path) -> None:
    with desk_for(tmp_path / "approvals.db") as desk:
        pid = proposal(desk)
        verification.record(desk, pid, verified=False, reason="collective test: correct failed",
                            details={"target": "ssh://n", "layers": {}}, actor="bob")
        done = verification.record(desk, pid, verified=True, reason="collective test healthy",
                                   details={"target": "ssh://n", "layers": {}}, actor="bob")
        assert done.verification is not None
        assert done.verification["status"] == "verified" and done.verification["by"] == "bob"
        assert done.verification["previous"][0]["status"] == "failed-verification"
        events = [(e["event"], e["data"].get("reason")) for e in desk.audit.entries()]
        assert events == [("failed-verification", "collective test: correct failed"),
                          ("verified", "collective test healthy")]
        assert verify_chain(desk.config.audit_log, anchor=desk.store.audit_head()).ok
        waiting = proposal(desk, succeeded=False)
        with pytest.raises(Refused, match="is pending: only a remedy that ran and succeeded"):
            verification.record(desk, waiting, verified=True, reason="-", details={})


def test_without_a_terminal_the_approval_prints_the_exact_verify_command(tmp_path: Path) -> None:
    from runbook.cli.verify_offer import offer_verification

    out = io.StringIO()
    console = Console(file=out, width=300)
    with desk_for(tmp_path / "other.db") as desk:
        live = desk.store.get(proposal(desk, target=Target("ssh://root@gpu-node-07:2222")))
        offer_verification(console, desk, live, interactive=False)
        replayed = desk.store.get(proposal(desk, target=Target("replay:///srv/bundle")))
        offer_verification(console, desk, replayed, interactive=True)
    lines = out.getvalue().splitlines()
    assert lines[0].strip() == (f"check that the fix held: runbook verify {live.id} --db "
                                f"{tmp_path / 'other.db'} --target ssh://root@gpu-node-07:2222")
    # a bundle is not a node: no prompt, the command for the live node instead
    assert f"NODE is yours to name): runbook verify {replayed.id}" in lines[1]
    # never a host made up from the bundle's node name (the demo's gpu-node-07 is nowhere)
    assert lines[1].endswith("--target ssh://NODE") and "rc-verify" not in lines[1]


@pytest.fixture(scope="module")
def node(recovery_hosts: HostFactory) -> TestHost:
    host = recovery_hosts("rc-verify")
    shims.install(host, "h100-nvlink", H100)
    return host


def stored_target(network: HostNetwork, host: TestHost) -> Target:
    return Target(url=f"ssh://root@{host.address}:{host.port}",
                  identities=(str(network.client_key.private_path),),
                  known_hosts=str(network.known_hosts_path), connect_timeout=5.0)


def test_verify_records_verified_then_a_failed_check_with_its_criterion(
    rbk: Cli, host_network: HostNetwork, node: TestHost
) -> None:
    with desk_for(rbk.db) as desk:
        pid = proposal(desk, target=stored_target(host_network, node))
    shims.configure(node, H100)
    ok = rbk("verify", pid, "--format", "json")  # the proposal's own target
    assert ok.rc == 0, ok.stderr[-2000:]
    v = json.loads(ok.stdout)
    assert v["status"] == "verified" and v["verified"] is True
    assert v["reason"].startswith("collective test healthy; no staged replay")
    assert v["layers"]["collective"]["criteria"]["bandwidth"]["passed"] is True
    assert v["node"] == "rc-verify"

    shims.configure(node, {**H100, "mode": "wrong"})
    bad = rbk("verify", pid)
    assert bad.rc == 1, bad.stderr[-2000:]
    assert "verification: failed-verification — collective test: gpu-hardware" in bad.stdout
    shown = rbk("approvals", "show", pid)
    assert "verification: failed-verification" in shown.stdout
    assert "FAIL  correct: nccl-tests/recovery-1.txt: #wrong 3" in shown.stdout
    assert "earlier: verified" in shown.stdout
    trail = rbk("audit", "show", "--proposal", pid, "--format", "json")
    events = [json.loads(line)["event"] for line in trail.stdout.splitlines()]
    assert events[-2:] == ["verified", "failed-verification"]
    assert rbk("audit", "verify").rc == 0


def test_a_memory_fix_is_not_verified_without_its_staged_replay(
    rbk: Cli, host_network: HostNetwork, node: TestHost
) -> None:
    shims.configure(node, H100)
    with desk_for(rbk.db) as desk:
        pid = proposal(desk, kind="memory-limit", target=stored_target(host_network, node))
        pending = proposal(desk, target=stored_target(host_network, node), succeeded=False)
    no_job = rbk("verify", pid, "--format", "json")
    assert no_job.rc == 1
    assert json.loads(no_job.stdout)["reason"] == (
        "staged replay not run: no job command (--command CMD, or --var job_command=CMD on "
        "the run)")
    skipped = rbk("verify", pid, "--no-replay", "--format", "json")
    assert skipped.rc == 0, skipped.stderr[-2000:]
    assert json.loads(skipped.stdout)["reason"] == (
        "collective test healthy; staged replay skipped (--no-replay)")
    refused = rbk("verify", pending)
    assert refused.rc == 1 and "only a remedy that ran and succeeded" in refused.stderr
