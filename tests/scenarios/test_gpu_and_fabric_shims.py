"""Scenario 5, GPU and fabric faults: real-format tool output from shims, one host per fault.

There is no GPU, PCIe fabric or InfiniBand here, so each host's ``nvidia-smi``, ``lspci``,
``rdma``, ``ibdev2netdev``, ``all_reduce_perf`` and ``dmesg`` are shims replaying what a node
with that fault prints (see :mod:`tests.scenarios.shims`); SSH, the shell and exit statuses are
real. Each node starts from the healthy 8-GPU profile of the incident (Blackwell, no NVLink, P2P
OK) and changes only what its fault changes. The kernel log is a shim too (a quiet boot log plus
the fault's lines, stamped minutes ago), so the machine's own kernel log cannot leak in. The
training ranks' logs are written as the job would have left them: ``ncclCommInitRank failed:
unhandled cuda error`` a minute after the fault, so the fault is the earlier anomaly.

Each fault must reach its root cause, and only the hardware ones (gpu-hardware, pcie-error) may
propose draining the node.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runbook.verdict import Verdict
from tests.hosts.harness import TestHost
from tests.scenarios import shims
from tests.scenarios.conftest import Diagnosis
from tests.scenarios.shims import Output

pytestmark = [pytest.mark.live, pytest.mark.ssh]

HEALTHY = "healthy-8gpu"
NOW = dt.datetime.now()  # the hosts share this machine's clock (UTC here)
FAULT_AT = NOW - dt.timedelta(minutes=10)
APP_ERROR_AT = FAULT_AT + dt.timedelta(minutes=1)


def _kt(at: dt.datetime) -> str:
    """A `dmesg -T` stamp: `[Wed Dec  2 11:33:35 2026]`."""
    return at.strftime("[%a %b ") + f"{at.day:2d}" + at.strftime(" %H:%M:%S %Y]")


def _dmesg(*fault_lines: str) -> Output:
    boot = NOW - dt.timedelta(hours=3)
    quiet = [
        f"{_kt(boot)} Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)",
        f"{_kt(boot)} nvidia: loading out-of-tree module taints kernel.",
        f"{_kt(boot)} NVRM: loading NVIDIA UNIX x86_64 Kernel Module  575.57.08",
    ]
    return Output("\n".join(quiet + [f"{_kt(FAULT_AT)} {line}" for line in fault_lines]) + "\n")


def _rank_log(rank: int, *, failed: bool = True) -> str:
    t = APP_ERROR_AT.strftime("%Y-%m-%dT%H:%M:%S")
    if not failed:
        return (f"{t}.100Z [rank{rank}] INFO init_process_group(nccl)\n"
                f"{t}.700Z [rank{rank}] INFO process group up\n"
                f"{t}.950Z [rank{rank}] INFO step 100 loss 2.3125\n")
    return (
        f"{t}.100Z [rank{rank}] INFO init_process_group(nccl)\n"
        f"{t}.900Z [rank{rank}] ERROR UnknownError: ncclCommInitRank failed: unhandled cuda "
        "error (run with NCCL_DEBUG=INFO for details)\n"
    )


def _nccl_log(name: str) -> str:
    """An NCCL_DEBUG=INFO log template under node-data/nccl-logs/ ({host}, {address})."""
    return (shims.DATA / "nccl-logs" / name).read_text()


def _q_with(gpu_index: int, edits: dict[str, str]) -> Callable[[str], str]:
    """Edit `nvidia-smi -q` text inside the block of one GPU (`field : old` -> new value)."""

    def apply(text: str) -> str:
        blocks = re.split(r"(?m)^(?=GPU [0-9A-F]{8}:)", text)
        block = blocks[gpu_index + 1]
        for pattern, value in edits.items():
            block, n = re.subn(pattern, value, block, count=1)
            assert n == 1, pattern
        blocks[gpu_index + 1] = block
        return "".join(blocks)

    return apply


@dataclass
class Fault:
    name: str
    root_cause: str
    drains: bool
    #: changes to the healthy profile
    changes: dict[str, Output | None]
    extra_shims: dict[str, str] | None = None
    nccl_log: str | None = None
    #: first_anomaly must come from this source
    first_source: str | None = None
    run_nccl_tests: bool = False
    #: the job's ranks logged an error (the healthy node's ran)
    job_failed: bool = True


def _faults() -> list[Fault]:
    healthy = shims.load_profile(HEALTHY)
    q = healthy["nvidia-smi-q"].stdout
    ecc = _q_with(3, {
        r"(Volatile\n(?:.*\n){4}\s+DRAM Uncorrectable\s+: )0": r"\g<1>2",
        r"(Remapped Rows\n\s+Correctable Error\s+: 0\n\s+Uncorrectable Error\s+: )0": r"\g<1>1",
        r"(Remapped Rows\n(?:.*\n){2}\s+Pending\s+: )No": r"\g<1>Yes",
    })(q)
    p2p_r = healthy["nvidia-smi-topo-p2p-r"].stdout
    rows = p2p_r.splitlines()
    # GPU0 <-> GPU1 not supported (row GPU0 col GPU1 and row GPU1 col GPU0)
    rows[1] = re.sub(r"^( GPU0\tX\t)OK", r"\1NS", rows[1])
    rows[2] = re.sub(r"^( GPU1\t)OK", r"\1NS", rows[2])
    p2p_ns = "\n".join(rows) + "\n"
    return [
        Fault(
            "xid79", "gpu-hardware", True,
            {
                "dmesg": _dmesg(
                    "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has "
                    "fallen off the bus.",
                    "NVRM: GPU 0000:3a:00.0: GPU has fallen off the bus.",
                ),
                "nvidia-smi": Output("", "Unable to determine the device handle for GPU "
                                     "0000:3A:00.0: Unknown Error\n", 15),
                "nvidia-smi-L": Output("", "Unable to determine the device handle for GPU "
                                       "0000:3A:00.0: Unknown Error\n", 15),
                "nvidia-smi-query": Output("", "Unable to determine the device handle for GPU "
                                           "0000:3A:00.0: Unknown Error\n", 15),
                "nvidia-smi-q": Output("", "Unable to determine the device handle for GPU "
                                       "0000:3A:00.0: Unknown Error\n", 15),
            },
            first_source="dmesg.txt",
        ),
        Fault(
            "ecc-remap", "gpu-hardware", True,
            {"dmesg": _dmesg(
                "NVRM: Xid (PCI:0000:5d:00): 48, pid=40112, name=python3, An uncorrectable "
                "double bit error (DBE) has been detected on GPU in the framebuffer at "
                "partition 6, subpartition 0.",
                "NVRM: Xid (PCI:0000:5d:00): 63, pid=40112, name=python3, Row Remapper: New row "
                "(0x0000000000ab1234) marked for remapping, reset gpu to activate.",
            ), "nvidia-smi-q": Output(ecc)},
        ),
        Fault(
            "aer", "pcie-error", True,
            {"dmesg": _dmesg(
                "pcieport 0000:15:01.0: AER: Uncorrected (Fatal) error received: 0000:15:01.0",
                "pcieport 0000:15:01.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
                "type=Transaction Layer, (Receiver ID)",
                "pcieport 0000:15:01.0:   device [8086:352a] error status/mask=00000020/00000000",
                "pcieport 0000:15:01.0:    [ 5] SDES                   (First)",
            )},
            first_source="dmesg.txt",
        ),
        Fault(
            "p2p-ns", "p2p-unavailable", False,
            {"dmesg": _dmesg(), "nvidia-smi-topo-p2p-r": Output(p2p_ns),
             "nvidia-smi-topo-p2p-w": Output(p2p_ns)},
            nccl_log=_nccl_log("p2p-peer-access.log"),
        ),
        Fault(
            "rdma-label", "rdma-misconfigured", False,
            {"dmesg": _dmesg(), "rdma-link": Output(""),
             "ibdev2netdev": None},
            extra_shims={"kubectl": _KUBECTL_NODE.format(
                node_json=shlex.quote(str(shims.DATA / "rdma-label-node.json")))},
            nccl_log=_nccl_log("ib-no-device.log"),
        ),
        Fault("healthy", "healthy", False, {"dmesg": _dmesg()}, run_nccl_tests=True,
              job_failed=False),
    ]




_KUBECTL_NODE = """#!/bin/sh
# test shim: a recorded `kubectl get node NAME -o json` (no API server can run here)
case "$*" in
  "get node "*" -o json") cat {node_json}
  ;;
  *) echo "error: the server doesn't have a resource type for: $*" >&2; exit 1 ;;
esac
"""


@dataclass
class ShimNode:
    fault: Fault
    host: TestHost
    diagnosis: Diagnosis


@pytest.fixture(scope="module")
def shim_nodes(scenario_hosts, host_network, diagnose, tmp_path_factory) -> dict[str, ShimNode]:  # type: ignore[no-untyped-def]
    faults = _faults()
    hosts = scenario_hosts.many([f.name for f in faults])
    out: dict[str, ShimNode] = {}
    for fault, host in zip(faults, hosts, strict=True):
        shims.install(host, shims.profile(HEALTHY, **fault.changes))  # type: ignore[arg-type]
        for name, script in (fault.extra_shims or {}).items():
            host.write_shim(name, script)
        logs: Path = tmp_path_factory.mktemp(f"{fault.name}-logs")
        for rank in range(2):
            (logs / f"rank-{rank}.log").write_text(_rank_log(rank, failed=fault.job_failed))
        nccl_dir = tmp_path_factory.mktemp(f"{fault.name}-nccl")
        if fault.nccl_log:
            (nccl_dir / f"nccl.{fault.name}.4242.log").write_text(
                fault.nccl_log.format(host=fault.name, address=host.address))
        tests_dir = tmp_path_factory.mktemp(f"{fault.name}-nccl-tests")
        if fault.run_nccl_tests:
            # the A/B baseline, run on the node over SSH as an operator would
            target = shlex.quote(str(tests_dir / "baseline.txt"))
            cmd = f"all_reduce_perf -b 8M -e 1G -f 2 -g 8 > {target}"
            subprocess.run(host_network.ssh_argv(host, cmd), check=True, timeout=30,
                           capture_output=True)
        variables = {"app_log_dir": str(logs), "nccl_log_dir": str(nccl_dir),
                     "nccl_tests_dir": str(tests_dir)}
        out[fault.name] = ShimNode(fault, host, diagnose(host, variables))
    return out


FAULTS = [f.name for f in _faults()]


def _maybe_xfail(name: str) -> Any:
    reason = XFAIL_ROOT_CAUSE.get(name)
    return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=reason)) if reason \
        else name


#: faults whose root cause the shipped runbook does not reach yet, and the change each needs
XFAIL_ROOT_CAUSE: dict[str, str] = {}


@pytest.mark.parametrize("name", [_maybe_xfail(n) for n in FAULTS])
def test_each_fault_reaches_its_root_cause(shim_nodes: dict[str, ShimNode], name: str) -> None:
    node = shim_nodes[name]
    d = node.diagnosis
    assert d.verdict["root_cause"] == node.fault.root_cause, d.explain()
    if node.fault.first_source:
        assert d.verdict["first_anomaly"]["source"] == node.fault.first_source, d.explain()


@pytest.mark.parametrize("name", FAULTS)
def test_only_hardware_faults_propose_draining_the_node(
    shim_nodes: dict[str, ShimNode], name: str
) -> None:
    node = shim_nodes[name]
    drains = "node-drain" in node.diagnosis.proposal_kinds
    assert drains == node.fault.drains, node.diagnosis.explain()


def test_the_healthy_nodes_nccl_tests_baseline_passes_and_every_stage_is_clean(
    shim_nodes: dict[str, ShimNode],
) -> None:
    d = shim_nodes["healthy"].diagnosis
    tests = d.facts("nccl-tests", "nccl_tests")
    assert tests["collected"] and tests["all_passed"], tests
    assert d.verdict["chain"] == [], d.explain()
    ruled = {r["cause"] for r in d.verdict["ruled_out"]}
    assert {"gpu-hardware", "pcie-error", "p2p-unavailable"} <= ruled, ruled


def test_an_rdma_label_without_a_device_proposes_the_nccl_ib_disable_ab_test(
    shim_nodes: dict[str, ShimNode],
) -> None:
    d = shim_nodes["rdma-label"].diagnosis
    assert "nccl-ib-disable-ab" in d.proposal_kinds, d.explain()
    assert d.facts("rdma-socket", "rdma")["usable"] is False


@pytest.mark.ansible
def test_the_approved_ab_remedy_on_the_rdma_node_reports_ib_failing_and_socket_passing(
    shim_nodes: dict[str, ShimNode], host_network: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The queued nccl-ib-disable-ab proposal, approved: the node is re-checked over SSH (the
    evidence still holds), then the real playbook runs all_reduce_perf twice on it through
    Ansible over SSH; this node's all_reduce_perf is an A/B shim whose IB path fails at init."""
    from runbook.config import load
    from runbook.remedies.approval import Desk
    from runbook.remedies.live import recheck
    from runbook.remedies.plans import Target
    from tests.tools.ansible_env import ansible_dirs
    from tests.tools.collective import install_ab_all_reduce_perf

    node = shim_nodes["rdma-label"]
    calls = install_ab_all_reduce_perf(node.host)
    argv = node.diagnosis.argv
    variables = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--var")
    for name, value in ansible_dirs(tmp_path / "ansible").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    target = Target(
        url=f"ssh://root@{node.host.address}:{node.host.port}",
        identities=(str(host_network.client_key.private_path),),
        known_hosts=str(host_network.known_hosts_path),
        connect_timeout=5.0,
    )
    with Desk(load(None)) as desk:
        queued = desk.queue_verdict(
            Verdict.from_json(node.diagnosis.verdict), node=node.host.name, target=target,
            runbook_id="nccl-init-failure", variables=variables, run_dir=None,
        )
        (ab,) = [q for q in queued if q.proposal.kind == "nccl-ib-disable-ab"]
        assert ab.plan is not None, ab.plan_error
        execution = desk.approve(ab.proposal.id, recheck=True, recheck_fn=recheck)
        assert execution.ok, execution.result
        events = [e["event"] for e in desk.audit.entries() if e["proposal"] == ab.proposal.id]
    assert events == ["proposed", "rechecked", "approved", "check", "executed"], events
    comparison = execution.result["comparison"][node.host.name]
    cases = comparison["cases"]
    assert not cases["ib-enabled"]["completed"] and cases["ib-enabled"]["network"] == "IB"
    assert cases["ib-disabled"]["passed"] and cases["ib-disabled"]["wrong"] == 0
    assert cases["ib-disabled"]["network"] == "Socket"
    assert cases["ib-disabled"]["avg_busbw"] and cases["ib-disabled"]["avg_busbw"] > 0
    assert comparison["conclusion"].startswith("IB init/transport fails and Socket succeeds")
    # run twice on the node (check mode ran nothing), the second time with NCCL_IB_DISABLE=1
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(ran) == 2, ran
    assert [r.get("env", {}).get("NCCL_IB_DISABLE") for r in ran] == [None, "1"], ran
