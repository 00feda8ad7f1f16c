"""The recovery check's collective test, through the real CLI over SSH: ``runbook run
nccl-recovery-check --target ssh://…`` against test hosts whose ``nvidia-smi`` replays a node
profile and whose ``all_reduce_perf`` / ``mpirun`` are the env-aware shim of
tests/recovery/shims (no GPU here: the shim prints nccl-tests' and NCCL's real formats and
logs how it was called). SSH, the shell, ``timeout`` and the exit statuses are real.

A healthy node passes; ``#wrong`` > 0, a bandwidth under the threshold, an unfinished run, a
hang and unstable repeats each fail and the verdict names the criterion that failed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.recovery import shims
from tests.scenarios import shims as scenario_shims

pytestmark = [pytest.mark.live, pytest.mark.ssh]

H100 = {"model": "NVIDIA H100 80GB HBM3", "transport": "P2P/CUMEM/read"}


@pytest.fixture(scope="module")
def h100(recovery_hosts: HostFactory) -> TestHost:
    host = recovery_hosts("rc-h100")
    shims.install(host, "h100-nvlink", {**H100, "peak_busbw": 480.0})
    return host


def check(rbk: Any, host: TestHost, *variables: str) -> dict[str, Any]:
    argv = ["run", "nccl-recovery-check", "--no-input", "--format", "json"]
    for item in variables:
        argv += ["--var", item]
    result = rbk(*argv, host=host)
    assert result.rc == 0, result.stderr[-2000:]
    verdict: dict[str, Any] = result.json()
    return verdict


def walk(network: HostNetwork, host: TestHost, **variables: Any) -> dict[str, Any]:
    """The same walk in this process (the library, not the CLI: no interpreter start per
    case), over a real SSH connection to the host."""
    from runbook.executor import execute
    from runbook.spec import load_file, resolve
    from runbook.targets import TargetOptions, open_target

    transport = open_target(f"ssh://root@{host.address}:{host.port}", TargetOptions(
        identities=(network.client_key.private_path,), known_hosts=network.known_hosts_path,
        connect_timeout=5.0))
    try:
        return execute(load_file(resolve("nccl-recovery-check")), transport,
                       variables=variables).verdict.to_json()
    finally:
        transport.close()


def facts(verdict: dict[str, Any]) -> dict[str, Any]:
    stage = next(s for s in verdict["stages"] if s["id"] == "collective-test")
    out: dict[str, Any] = stage["facts"]["nccl_recovery"]
    return out


def findings(verdict: dict[str, Any]) -> str:
    return " | ".join(c["finding"] for c in verdict["chain"])


def test_a_healthy_nvlink_node_passes_every_criterion(rbk: Any, h100: TestHost) -> None:
    # the shim's curve puts `# Avg bus bandwidth` at ~76 % of the plateau: 470, 467, 474 GB/s
    shims.configure(h100, {**H100, "peak_busbw": [620.0, 615.0, 625.0]})
    verdict = check(rbk, h100)
    f = facts(verdict)
    assert verdict["root_cause"] == "healthy", findings(verdict)
    assert verdict["node"] == f"{h100.address}:{h100.port}"  # as the target was typed
    assert f["failed"] == [] and all(c["passed"] for c in f["criteria"].values()), f["criteria"]
    assert f["gpu"] == {"names": ["NVIDIA H100 80GB HBM3"] * 8, "model": "NVIDIA H100 80GB HBM3",
                        "mixed": False, "count": 8, "topology": "nvlink"}
    assert f["threshold"]["busbw_gbps"] == 460 and "aznhc" in f["threshold"]["source"]
    # the transport NCCL chose, named from its INFO lines; the spread of the repeats reported
    assert f["transport"]["kinds"] == ["P2P"]
    assert 0 < f["bandwidth"]["spread_pct"] < 2, f["bandwidth"]
    # judged on nccl-tests' own average line, the lowest of the runs; the peaks reported
    assert f["bandwidth"]["lowest_avg"] == min(f["bandwidth"]["avg"]) > 460
    assert [round(a) for a in f["bandwidth"]["avg"]] == [470, 467, 474]
    assert f["bandwidth"]["lowest_peak"] == min(f["bandwidth"]["peaks"]) > 600
    assert "lowest average busbw 466.6 GB/s ≥ 460 GB/s" in f["criteria"]["bandwidth"]["detail"]
    ruled = {r["cause"]: r["because"] for r in verdict["ruled_out"]}
    assert "P2P" in ruled["p2p-unavailable"]
    assert "single-node success" in ruled["p2p-unavailable"] or "cross-node" in \
        ruled["p2p-unavailable"]
    # what the node ran: the write-up's minimal test, NCCL_DEBUG=INFO, three times
    ran = shims.calls(h100)
    assert len(ran) == 3
    assert all(c["argv"] == ["-b", "8M", "-e", "1G", "-f", "2", "-g", "8"] for c in ran), ran
    assert all(c["env"].get("NCCL_DEBUG") == "INFO" for c in ran)


@pytest.mark.parametrize(
    ("behaviour", "failed", "cause", "says"),
    [
        ({"mode": "wrong"}, "correct", "gpu-hardware", "#wrong 3, out of bounds values 3 FAILED"),
        ({"peak_busbw": 300.0}, "bandwidth", "inconclusive", "< 460 GB/s"),
        # the plateau (560) clears the threshold, the run's average (425) does not
        ({"peak_busbw": 560.0}, "bandwidth", "inconclusive",
         "lowest average busbw 424.8 GB/s < 460 GB/s"),
        ({"peak_busbw": 300.0, "transport": "SHM/direct/direct"}, "bandwidth",
         "p2p-unavailable", "< 460 GB/s"),
        ({"mode": "unfinished"}, "completed", "inconclusive", "Test NCCL failure"),
        ({"peak_busbw": [700.0, 620.0, 700.0]}, "stable", "inconclusive", "spread 11.9 %"),
    ],
    ids=["wrong-values", "low-bandwidth", "peak-above-average-below", "shm-on-nvlink",
         "unfinished", "unstable"],
)
def test_a_failing_criterion_fails_the_check_and_is_named(
    host_network: HostNetwork, h100: TestHost, behaviour: dict[str, Any], failed: str,
    cause: str, says: str,
) -> None:
    shims.configure(h100, {**H100, "peak_busbw": 480.0, **behaviour})
    verdict = walk(host_network, h100)
    f = facts(verdict)
    assert verdict["root_cause"] == cause, findings(verdict)
    assert f["failed"][0] == failed, f["failed"]
    assert f["criteria"][failed]["passed"] is False
    assert f"({failed}" in verdict["chain"][0]["finding"], verdict["chain"]
    assert says in verdict["chain"][0]["finding"], verdict["chain"][0]["finding"]
    assert verdict["stages"][0]["status"] == "anomaly"


def test_a_hung_run_is_killed_by_the_run_timeout_and_fails_completed(
    host_network: HostNetwork, h100: TestHost
) -> None:
    shims.configure(h100, {**H100, "mode": "hang"})
    verdict = walk(host_network, h100, repeats=2, run_timeout=1)
    f = facts(verdict)
    assert verdict["root_cause"] == "inconclusive"
    assert f["failed"] == ["completed"], f["criteria"]
    assert [r["exit_status"] for r in f["runs"]] == [124, 124]
    assert "killed by the run timeout (a hang)" in f["criteria"]["completed"]["detail"]
    # a partial table is not judged for bandwidth
    assert f["criteria"]["bandwidth"]["passed"] is None


def test_a_pcie_only_node_is_judged_by_its_own_threshold(
    host_network: HostNetwork, recovery_hosts: HostFactory
) -> None:
    """The incident's node: 8 Blackwell GPUs without NVLink (topo -m: NODE/SYS): the PCIe
    figure applies, SHM is what NCCL chose, and the same bandwidth on an NVLink node would
    fail."""
    host = recovery_hosts("rc-pcie")
    shims.install(host, "healthy-8gpu", {"model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                          "transport": "SHM/direct/direct", "peak_busbw": 50.0})
    verdict = walk(host_network, host)
    f = facts(verdict)
    assert verdict["root_cause"] == "healthy", findings(verdict)
    assert f["gpu"]["topology"] == "pcie" and f["threshold"]["busbw_gbps"] == 35
    assert round(f["bandwidth"]["lowest_avg"], 1) == 37.9
    assert f["transport"]["kinds"] == ["SHM"]
    assert any(r["cause"] == "shm-exhausted" for r in verdict["ruled_out"])


def test_a_capture_without_nccl_info_lines_cannot_name_the_transport(
    host_network: HostNetwork, recovery_hosts: HostFactory
) -> None:
    """The scenarios' stored healthy capture (printed without NCCL_DEBUG=INFO): the table is
    fine, but which transport NCCL chose is unknown, and the check says so."""
    host = recovery_hosts("rc-noinfo")
    scenario_shims.install(host, scenario_shims.load_profile("healthy-8gpu"))
    verdict = walk(host_network, host, repeats=1)
    f = facts(verdict)
    assert f["failed"] == ["transport"], f["criteria"]
    assert "NCCL_DEBUG=INFO" in f["criteria"]["transport"]["detail"]
    assert f["criteria"]["stable"]["passed"] is None  # one run: not judged
    assert verdict["root_cause"] == "inconclusive"


def test_gpus_and_the_threshold_can_be_given(host_network: HostNetwork, h100: TestHost) -> None:
    shims.configure(h100, {**H100, "peak_busbw": 480.0})  # average 364 GB/s
    unknown = facts(walk(host_network, h100, gpus=4, repeats=1))
    assert shims.calls(h100)[0]["argv"][-2:] == ["-g", "4"]
    assert unknown["failed"] == ["bandwidth"]
    assert "no threshold" in unknown["criteria"]["bandwidth"]["detail"]
    assert "--var min_busbw" in unknown["criteria"]["bandwidth"]["detail"]
    given = walk(host_network, h100, gpus=4, repeats=1, min_busbw=350)
    assert given["root_cause"] == "healthy", findings(given)
    assert facts(given)["threshold"]["source"] == "given (--var min_busbw)"


def test_a_multi_node_check_fixes_the_set_and_single_node_success_does_not_count(
    rbk: Any, host_network: HostNetwork, h100: TestHost
) -> None:
    fixed = ["nodes=2", "hosts=rc-h100,gpu-node-08", "nics=mlx5_0,mlx5_1",
             "nccl_version=2.21.5+cuda12.4", "min_busbw=350", "repeats=1"]
    shims.configure(h100, {**H100, "peak_busbw": 480.0})  # average 364 ≥ 350 GB/s
    verdict = check(rbk, h100, *fixed)
    f = facts(verdict)
    assert verdict["root_cause"] == "healthy", findings(verdict)
    (call,) = shims.calls(h100)
    assert call["prog"] == "mpirun" and call["argv"][-2:] == ["-g", "1"]
    assert call["env"]["NCCL_DEBUG"] == "INFO" and call["env"]["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert f["fixed_set"]["hosts"] == ["gpu-node-08", "rc-h100"]
    assert f["fixed_set"]["nics"] == ["mlx5_0", "mlx5_1"]
    assert f["fixed_set"]["nccl_versions"] == ["2.21.5+cuda12.4"]
    assert "NET/IB" in f["transport"]["kinds"] and "P2P" in f["transport"]["kinds"]
    assert any(r["cause"] == "rdma-misconfigured" and "cross-node" in r["because"]
               for r in verdict["ruled_out"])
    # the ranks all landing on one node is a single-node success: it proves nothing cross-node
    shims.configure(h100, {**H100, "peak_busbw": 480.0, "local_only": True})
    from runbook.cli.options import parse_vars

    local = facts(walk(host_network, h100, **parse_vars(fixed)))
    assert local["failed"] == ["fixed-set"], local["criteria"]
    assert "single-node success does not prove cross-node health" in \
        local["criteria"]["fixed-set"]["detail"]


def test_the_run_directory_keeps_every_run_as_evidence(rbk: Any, h100: TestHost) -> None:
    shims.configure(h100, {**H100, "peak_busbw": 620.0})
    result = rbk("run", "nccl-recovery-check", "--no-input", "--var", "repeats=2", host=h100)
    assert result.rc == 0, result.stderr
    run_dir = result.stdout.strip().rsplit("run directory: ", 1)[1]
    bundle = Path(run_dir) / "bundle"
    runs = sorted(p.name for p in (bundle / "nccl-tests").glob("recovery-*.txt"))
    assert runs == ["recovery-1.txt", "recovery-2.txt"]
    assert (bundle / "nccl-tests" / "recovery-1.txt").read_text().rstrip().endswith(
        "# runbook: exit status 0")
    replayed = rbk("analyze", str(bundle), "--runbook", "nccl-recovery-check", "--format",
                   "json")
    assert replayed.rc == 0, replayed.stderr
    assert json.loads(replayed.stdout)["root_cause"] == "healthy"
