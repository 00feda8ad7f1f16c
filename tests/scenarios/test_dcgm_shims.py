"""DCGM on the node, over SSH: a guided run (`runbook run nccl-init-failure --target ssh://…`)
on test hosts whose ``dcgmi`` reports a health failure, only a warning, or is not installed.

There is no GPU and no DCGM host engine here: ``dcgmi`` is a shim (a double, as ``nvidia-smi``
is) that prints real-format output — the samples under tests/unit/parsers/samples/dcgm/, whose
README names their sources — and the rest of the node is the healthy 8-GPU profile of
tests.scenarios.shims with a quiet kernel log. SSH, the shell, exit statuses and the missing
command are real.
"""

from __future__ import annotations

import datetime as dt
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hosts.harness import TestHost
from tests.scenarios import shims
from tests.scenarios.conftest import Diagnosis
from tests.scenarios.shims import Output

pytestmark = [pytest.mark.live, pytest.mark.ssh]

SAMPLES = Path(__file__).resolve().parents[1] / "unit" / "parsers" / "samples" / "dcgm"
NOW = dt.datetime.now()


def _quiet_dmesg() -> Output:
    boot = NOW - dt.timedelta(hours=3)
    stamp = boot.strftime("[%a %b ") + f"{boot.day:2d}" + boot.strftime(" %H:%M:%S %Y]")
    return Output(
        f"{stamp} Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)\n"
        f"{stamp} NVRM: loading NVIDIA UNIX x86_64 Kernel Module  575.57.08\n"
    )


def _rank_log(rank: int, failed: bool) -> str:
    t = (NOW - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    if not failed:
        return f"{t}.100Z [rank{rank}] INFO process group up\n{t}.950Z [rank{rank}] INFO step 100\n"
    return (f"{t}.100Z [rank{rank}] INFO init_process_group(nccl)\n"
            f"{t}.900Z [rank{rank}] ERROR UnknownError: ncclCommInitRank failed: unhandled cuda "
            "error (run with NCCL_DEBUG=INFO for details)\n")  # fmt: skip


def install_dcgmi(host: TestHost, health_sample: str) -> None:
    """A `dcgmi` on the host's PATH answering `discovery -l` and `health -c` with samples."""
    q = shlex.quote
    script = "\n".join([
        "#!/bin/sh",
        "# test shim: replays real-format dcgmi output (no GPU or DCGM host engine here)",
        'case "$*" in',
        f"  'discovery -l') cat {q(str(SAMPLES / 'discovery-a100-8gpu-3x.txt'))} ;;",
        f"  'health -c') cat {q(str(SAMPLES / health_sample))} ;;",
        '  *) echo "dcgmi: shim has no output for: $*" >&2; exit 2 ;;',
        "esac",
        "",
    ])  # fmt: skip
    host.write_shim("dcgmi", script)


@dataclass(frozen=True)
class Case:
    name: str
    #: the `dcgmi health -c` sample, or None: no dcgmi on the node at all
    health: str | None
    job_failed: bool


CASES = [
    Case("dcgm-failure", "health-tree-failure.txt", job_failed=True),
    Case("dcgm-warning", "health-legacy-warning.txt", job_failed=False),
    Case("no-dcgmi", None, job_failed=False),
]


@pytest.fixture(scope="module")
def dcgm_nodes(scenario_hosts, diagnose, tmp_path_factory) -> dict[str, Diagnosis]:  # type: ignore[no-untyped-def]
    hosts = scenario_hosts.many([c.name for c in CASES])
    out: dict[str, Diagnosis] = {}
    for case, host in zip(CASES, hosts, strict=True):
        shims.install(host, shims.profile("healthy-8gpu", dmesg=_quiet_dmesg()))
        if case.health:
            install_dcgmi(host, case.health)
        logs = tmp_path_factory.mktemp(f"{case.name}-logs")
        for rank in range(2):
            (logs / f"rank-{rank}.log").write_text(_rank_log(rank, case.job_failed))
        empty = tmp_path_factory.mktemp(f"{case.name}-empty")
        out[case.name] = diagnose(host, {"app_log_dir": str(logs), "nccl_log_dir": str(empty),
                                         "nccl_tests_dir": str(empty)})  # fmt: skip
    return out


def test_a_dcgm_health_failure_gives_the_hardware_verdict_citing_dcgm(
    dcgm_nodes: dict[str, Diagnosis],
) -> None:
    d = dcgm_nodes["dcgm-failure"]
    assert d.verdict["root_cause"] == "gpu-hardware", d.explain()
    first = d.verdict["first_anomaly"]
    assert (first["source"], first["line"]) == ("dcgmi-health.txt", 8), d.explain()
    (link,) = [c for c in d.verdict["chain"] if c.get("cause") == "gpu-hardware"]
    assert "DCGM health check" in link["finding"] and "GPU 3 Memory system" in link["finding"]
    assert "node-drain" in d.proposal_kinds, d.explain()
    dcgm = d.facts("gpu-pcie", "dcgm")
    assert dcgm["available"] is True and dcgm["discovery"]["gpu_count"] == 2


def test_a_dcgm_warning_only_host_gets_no_drain_proposal(
    dcgm_nodes: dict[str, Diagnosis],
) -> None:
    d = dcgm_nodes["dcgm-warning"]
    assert "node-drain" not in d.proposal_kinds, d.explain()
    assert d.verdict["root_cause"] == "healthy", d.explain()
    assert any("DCGM health warning" in f["finding"] for f in d.verdict["also_seen"])


def test_a_host_without_dcgmi_runs_fine_and_says_dcgm_is_not_available(
    dcgm_nodes: dict[str, Diagnosis],
) -> None:
    d = dcgm_nodes["no-dcgmi"]
    assert d.verdict["root_cause"] == "healthy", d.explain()
    assert d.statuses["gpu-pcie"] == "ok" and d.statuses["dcgm-diag"] == "skipped"
    dcgm = d.facts("gpu-pcie", "dcgm")
    assert dcgm["available"] is False and dcgm["unavailable_reason"] == "dcgmi is not installed"
    assert not any("DCGM" in f["finding"] for f in d.verdict["chain"] + d.verdict["also_seen"])
