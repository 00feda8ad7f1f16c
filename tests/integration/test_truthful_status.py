"""Status that tells the truth: what could not run is never reported as a result, nor as success.

Real sshd test hosts (tests/hosts) stand in for GPU nodes that lack a tool: the node of these
tests has no ``all_reduce_perf`` (nothing installs one; the shim dir is empty), or has one that
cannot be executed. The proposal is queued through the approval desk as a run would queue it
(the node's name, its target as the run reached it), then the real CLI is driven —
``runbook approvals approve``, ``approvals show``, ``audit show``, ``verify`` — and each answer
is asserted: the state in the store, the exit status, JSON ``ok``, the text, the audit entry,
and that no recovery check is offered for what changed nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.harness import HostNetwork, TestHost
from tests.integration.conftest import cli_env

pytestmark = [pytest.mark.ansible, pytest.mark.ssh]

NODE = "gpu-node-01"


@pytest.fixture
def state_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """This process sees the same store and config as the CLI under test (cli_env)."""
    env = cli_env(tmp_path)
    for name in ("RUNBOOK_STATE_DIR", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(name, env[name])
    yield env


def target_of(network: HostNetwork, host: TestHost) -> Any:
    from runbook.remedies.plans import Target

    return Target(
        url=f"ssh://root@{host.address}:{host.port}",
        identities=(str(network.client_key.private_path),),
        known_hosts=str(network.known_hosts_path),
        connect_timeout=5.0,
    )


def queue_ab(network: HostNetwork, host: TestHost, node: str = NODE) -> str:
    """The NCCL_IB_DISABLE A/B proposal of an rdma-misconfigured verdict, queued for `node`
    reached at `host`, as `runbook run` queues it; its id."""
    from runbook.config import load
    from runbook.remedies.approval import Desk
    from runbook.verdict import Proposal, Verdict

    ab = Proposal(
        "ab-1",
        "nccl-ib-disable-ab",
        True,
        "A/B all_reduce_perf with NCCL_IB_DISABLE unset and =1",
        {"gpus": 2},
    )
    verdict = Verdict(node, "rdma-misconfigured", "medium", proposals=(ab,))
    with Desk(load(None)) as desk:
        (queued,) = desk.queue_verdict(
            verdict,
            node=node,
            target=target_of(network, host),
            runbook_id="nccl-init-failure",
            variables={},
            run_dir=None,
        )
    assert queued.plan is not None, queued.plan_error
    return queued.proposal.id


def audit_entries(cli, pid: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    shown = cli("audit", "show", "--proposal", pid, "--format", "json")
    assert shown.rc == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


def stored(cli, pid: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    shown = cli("approvals", "show", pid, "--format", "json")
    assert shown.rc == 0, shown.stderr
    return json.loads(shown.stdout)  # type: ignore[no-any-return]


def test_an_ab_on_a_node_without_all_reduce_perf_could_not_measure_and_fails(
    cli, ssh_host, host_network: HostNetwork, state_env: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("bare")
    pid = queue_ab(host_network, host)
    approved = cli("approvals", "approve", pid, "--no-recheck", timeout=240)
    out = approved.stdout + approved.stderr
    assert approved.rc == 1, out
    assert f"could not measure: all_reduce_perf not found on {NODE}" in out, out
    assert "both fail" not in out and "not IB-specific" not in out, out
    # no recovery check is offered: nothing was changed, and nothing was measured
    assert "verify" not in out and "fix held" not in out, out
    p = stored(cli, pid)
    assert p["state"] == "failed", p
    assert p["result"]["reason"] == f"could not measure: all_reduce_perf not found on {NODE}"
    last = audit_entries(cli, pid)[-1]
    assert last["event"] == "failed", last
    assert last["data"]["reason"] == p["result"]["reason"], last
    shown = cli("approvals", "show", pid)
    assert "could not measure: all_reduce_perf not found" in shown.stdout, shown.stdout


def test_the_json_answer_of_an_ab_that_could_not_measure_is_not_ok(
    cli, ssh_host, host_network: HostNetwork, state_env: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("bare")
    pid = queue_ab(host_network, host)
    approved = cli("approvals", "approve", pid, "--no-recheck", "--format", "json", timeout=240)
    assert approved.rc == 1, approved.stdout + approved.stderr
    answer = json.loads(approved.stdout)
    assert answer["ok"] is False, answer
    assert answer["reason"] == f"could not measure: all_reduce_perf not found on {NODE}"
    assert answer["proposal"]["state"] == "failed"
    assert "verify" not in approved.stderr, approved.stderr


def test_an_ab_whose_all_reduce_perf_cannot_be_executed_says_so_and_fails(
    cli, ssh_host, host_network: HostNetwork, state_env: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("noexec")
    host.write_shim("all_reduce_perf", "#!/bin/sh\necho never\n").chmod(0o644)
    pid = queue_ab(host_network, host)
    approved = cli("approvals", "approve", pid, "--no-recheck", "--format", "json", timeout=240)
    assert approved.rc == 1, approved.stdout + approved.stderr
    answer = json.loads(approved.stdout)
    reason = f"could not measure: all_reduce_perf cannot be executed on {NODE} (exit 126)"
    assert answer["ok"] is False and answer["reason"] == reason, answer
    assert stored(cli, pid)["state"] == "failed"
    assert audit_entries(cli, pid)[-1]["data"]["reason"] == reason


def test_an_ab_that_measured_succeeds_but_is_never_followed_by_a_recovery_check(
    cli, ssh_host, host_network: HostNetwork, state_env: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    from tests.tools.collective import install_ab_all_reduce_perf

    host = ssh_host("ab-node")
    install_ab_all_reduce_perf(host)
    pid = queue_ab(host_network, host)
    approved = cli("approvals", "approve", pid, "--no-recheck", timeout=240)
    out = approved.stdout + approved.stderr
    assert approved.rc == 0, out
    assert "=> IB init/transport fails and Socket succeeds" in out, out
    # an experiment changes nothing: there is no fix to check
    assert "runbook verify" not in out and "fix held" not in out, out
    assert "a diagnostic: nothing was changed on the node" in out, out
    assert stored(cli, pid)["state"] == "succeeded"
    refused = cli("verify", pid, timeout=60)
    assert refused.rc == 1, refused.stdout + refused.stderr
    assert "a diagnostic that changes nothing on the node: there is no fix to verify" in (
        refused.stderr
    ), refused.stderr
    assert [e["event"] for e in audit_entries(cli, pid)][-1] == "executed"


def test_the_recovery_check_is_not_offered_for_a_failed_run_nor_a_diagnostic(
    state_env: dict[str, str],
) -> None:
    """offer_verification itself, as the guided prompt and `approve` call it."""
    import io

    from rich.console import Console

    from runbook.cli.verify_offer import offer_verification
    from runbook.config import load
    from runbook.remedies.approval import Desk
    from runbook.remedies.plans import Target

    out = io.StringIO()
    console = Console(file=out, width=300)
    target = Target("ssh://root@gpu-node-01:2222").as_dict()
    with Desk(load(None)) as desk:
        shown = []
        for kind, ok in (("shm-size-limit", False), ("nccl-ib-disable-ab", True),
                         ("shm-size-limit", True)):  # fmt: skip
            p, _ = desk.store.enqueue(
                key=f"{NODE}:{kind}-{ok}", kind=kind, remedy=kind, summary=kind, params={},
                evidence={}, source="run", ttl=3600, node=NODE, target=target,
            )  # fmt: skip
            desk.store.claim(p.id, actor="t")
            done = desk.store.finish(p.id, ok=ok, result={"reason": "x"} if not ok else {})
            offer_verification(console, desk, done, interactive=False)
            shown.append(out.getvalue())
    assert shown[0] == "" and shown[1] == "", shown
    assert "check that the fix held: runbook verify" in shown[2], shown


def succeeded_fix(network: HostNetwork, host: TestHost) -> str:
    """A shm-size-limit fix recorded as succeeded on `host` (through the store: what is under
    test is the check that follows a fix, not the fix's playbook)."""
    from runbook.config import load
    from runbook.remedies.approval import Desk

    with Desk(load(None)) as desk:
        p, _ = desk.store.enqueue(
            key=f"{NODE}:shm-1", kind="shm-size-limit", remedy="shm-size-limit",
            summary="raise /dev/shm", params={}, evidence={"root_cause": "shm-exhausted"},
            source="run", ttl=3600, node=NODE, target=target_of(network, host).as_dict(),
            runbook="nccl-init-failure", variables={"repeats": 1},
        )  # fmt: skip
        desk.store.claim(p.id, actor="alice")
        desk.store.finish(p.id, ok=True, result={"status": "successful", "rc": 0})
    return p.id


def test_verify_on_a_node_without_all_reduce_perf_is_not_run_never_verified(
    cli, ssh_host, host_network: HostNetwork, state_env: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    from tests.scenarios import shims

    host = ssh_host("no-nccl-tests")
    profile = shims.load_profile("healthy-8gpu")
    shims.install(host, {k: v for k, v in profile.items() if k != "all_reduce_perf"})
    pid = succeeded_fix(host_network, host)
    checked = cli("verify", pid, "--format", "json", timeout=200)
    assert checked.rc == 1, checked.stdout + checked.stderr
    v = json.loads(checked.stdout)
    assert v["verified"] is False and v["status"] == "not-run", v
    assert v["reason"] == "the collective test could not run: all_reduce_perf not found on " + (
        NODE
    ), v["reason"]
    last = audit_entries(cli, pid)[-1]
    assert last["event"] == "verification-not-run" and last["data"]["reason"] == v["reason"]
    shown = cli("approvals", "show", pid)
    assert f"verification: not-run — {v['reason']}" in shown.stdout, shown.stdout


def test_verify_on_a_node_without_nvidia_smi_is_not_run_and_says_why(
    cli, ssh_host, host_network: HostNetwork, state_env: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("bare-verify")
    pid = succeeded_fix(host_network, host)
    checked = cli("verify", pid, timeout=200)
    assert checked.rc == 1, checked.stdout + checked.stderr
    assert (
        f"verification: not-run — the collective test did not run on {NODE}: no all_reduce_perf "
        "run came back: no GPU listed by nvidia-smi -L (give --var gpus=N) "
        "(nvidia-smi-L: command not found)"
    ) in " ".join(checked.stdout.split()), checked.stdout
    assert stored(cli, pid)["verification"]["status"] == "not-run"


def test_a_playbook_that_ran_on_no_host_is_not_a_success(
    ssh_host,
    host_network: HostNetwork,
    state_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # type: ignore[no-untyped-def]
    """ansible-playbook exits 0 when the play's host pattern matches no host ("skipping: no
    hosts matched"): nothing ran."""
    from runbook.remedies.plans import node_inventory
    from runbook.remedies.playbook import run_playbook

    for name in ("ANSIBLE_HOME", "ANSIBLE_LOCAL_TEMP", "ANSIBLE_REMOTE_TEMP"):
        monkeypatch.setenv(name, state_env[name])
    host = ssh_host("unmatched")
    result = run_playbook(
        "nccl-ib-disable-ab.yml",
        inventory=node_inventory(NODE, target_of(host_network, host)),
        extravars={
            "nccl_ab_test_output_dir": str(tmp_path / "ab"),
            "nccl_ab_test_gpus": 2,
            "runbook_hosts": "another-node",
        },
        private_dir=tmp_path / "run",
        check=False,
    )
    assert result.status == "successful" and result.rc == 0  # what Ansible says
    assert result.ok is False
    assert result.reason == "the playbook ran on no host (its inventory or limit matched none)"
    assert not (tmp_path / "ab").exists()


def _recorded_as(bundle: Path, result: Any) -> None:
    """`result` written into the bundle as a collection writes it (runbook collect, a run's
    bundle, and the Ansible collection module write the same .rc and .err)."""
    from runbook.bundle import write_result

    for side in (".rc", ".err"):
        bundle.joinpath(result.name + side).unlink(missing_ok=True)
    write_result(bundle, result)


def test_a_bundle_whose_nvidia_smi_and_kernel_log_timed_out_clears_nothing(
    cli, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A hung nvidia-smi (a GPU off the bus hangs it) and a kernel log read cut off by its
    time limit, replayed from the bundle: neither is evidence that the GPU is fine."""
    from runbook.transports.base import CommandResult
    from tests.tools import bundles

    bundle = bundles.materialize("healthy", tmp_path / "bundle")
    first = "".join((bundle / "dmesg.txt").read_text().splitlines(keepends=True)[:3])
    _recorded_as(bundle, CommandResult("dmesg.txt", "dmesg -T", stdout=first, timed_out=True,
                                       duration=30.0))  # fmt: skip
    for name in ("nvidia-smi-L.txt", "nvidia-smi-q.txt", "nvidia-smi-query.csv"):
        _recorded_as(bundle, CommandResult(name, "nvidia-smi", timed_out=True, duration=30.0))
    analyzed = cli("analyze", str(bundle), "--format", "json", timeout=120)
    assert analyzed.rc == 0, analyzed.stderr
    verdict = analyzed.json()
    assert verdict["root_cause"] != "healthy", verdict["ruled_out"]
    assert "gpu-hardware" not in {r["cause"] for r in verdict["ruled_out"]}, verdict["ruled_out"]
    stages = {s["id"]: s for s in verdict["stages"]}
    assert stages["kernel-logs"]["not_collected"] == {"dmesg.txt": "timed out after 30.0s"}
    assert stages["gpu-pcie"]["not_collected"]["nvidia-smi-q.txt"] == "timed out after 30.0s"


def test_a_bundle_file_records_how_its_command_ended_and_is_read_back_so(tmp_path: Path) -> None:
    from runbook.bundle import Bundle, BundleMeta, write_bundle
    from runbook.transports.base import CommandResult

    results = [
        CommandResult("hung.txt", "nvidia-smi -q", stdout="partial\n", timed_out=True,
                      duration=12.5),
        CommandResult("dropped.txt", "dmesg -T", stdout="x" * 10, truncated=True,
                      error="channel closed before the exit status"),
        CommandResult("absent.txt", "dcgmi health -c", stderr="sh: 1: dcgmi: not found\n",
                      exited=127),
        CommandResult("fine.txt", "cat /proc/meminfo", stdout="MemTotal: 1 kB\n", exited=0),
    ]  # fmt: skip
    root = write_bundle(
        tmp_path / "b", BundleMeta(node=NODE, collected_at="2026-12-05T10:00:00Z"), results
    )
    (root / "given.txt").write_text("a file given as it is, with no .rc\n")
    bundle = Bundle.open(root)
    hung, dropped, absent, fine, given = (
        bundle.read(n) for n in ("hung.txt", "dropped.txt", "absent.txt", "fine.txt", "given.txt")
    )
    assert hung.timed_out and hung.exited is None and hung.failure == "timed out after 12.5s"
    assert dropped.exited is None and dropped.failure == "channel closed before the exit status"
    assert absent.exited == 127 and absent.failure == "command not found"
    assert fine.ok and given.ok
