"""Scenario 1, the incident for real: a 4-rank gloo job whose memory cgroup hits its limit.

Four ranks on one test host build a data cache, a prefetch queue, locked buffers and files in
the job's tmpfs /dev/shm, all in one real memory cgroup. Rank 2's cache is the large one; the
kernel OOM-kills it, and the survivors fail at init (``DistStoreError``) about the process-group
timeout later: the error surfaces at communicator init, the cause is in the kernel log. Before
the job, a neighbour's cgroup on the same node is OOM-killed too (a decoy), so the kernel log
holds two OOMs and only one is the job's. Then the runbook is run over SSH, as on-call would.

The same job under a limit that fits runs to completion, and the runbook then finds nothing
wrong with memory. The nvidia-smi on the node is a shim replaying a healthy 8-GPU node (there
is no GPU here), so "GPU hardware" is ruled out by evidence, not by absence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from tests.hosts.harness import TestHost
from tests.scenarios import shims
from tests.scenarios.cgroups import MIB, foreign_oom
from tests.scenarios.conftest import Diagnosis, Outcome
from tests.scenarios.job import Container, Node, RankSpec, TrainingJob

pytestmark = [pytest.mark.live, pytest.mark.ssh]

#: four ranks of ~300 MiB (torch) each, plus caches: rank 2's 900 MiB cache does not fit
OOM_LIMIT = 1200 * MIB
#: the same job fits with room to spare
FIT_LIMIT = 3072 * MIB
OOM_RANK = 2
SHM_SIZE = 256 * MIB


INFO_LINE_IS_NOT_AN_ERROR = (
    "needs parser fix: runbook/parsers/applog.py classify() files any line matching a class "
    "pattern as an error, so the healthy rank's `INFO writing 8 MiB to the shm dir: "
    "/dev/shm/...` becomes an `shm` error and shm-p2p's `facts.applog.errors_by_category.shm` "
    "rule calls a job that ran to completion shm-exhausted; only lines at error level (or "
    "without a level) should be classified"
)


def _ranks() -> list[RankSpec]:
    return [
        RankSpec(cache_mib=900 if rank == OOM_RANK else 100, prefetch_mib=16, locked_mib=8,
                 shm_mib=8)
        for rank in range(4)
    ]


@dataclass
class Incident(Outcome):
    #: the cgroup's own files, read after the job (what the kernel recorded)
    oom_kills: int
    peak_bytes: int
    failcnt: int

    def variables(self, **extra: str) -> dict[str, str]:
        return {"app_log_dir": str(self.log_dir), "cgroup_dir": str(self.cgroup.path),
                "nccl_log_dir": str(self.log_dir), **extra}


def _node(scenario_hosts: Any, nodes: Any, name: str) -> tuple[TestHost, Node]:
    host = scenario_hosts(name)
    shims.install(host, shims.load_profile("healthy-8gpu"))
    return host, nodes(host, shm_bytes=SHM_SIZE)


@pytest.fixture(scope="module")
def incident(scenario_hosts, nodes, memory_cgroups, diagnose, tmp_path_factory) -> Incident:  # type: ignore[no-untyped-def]
    host, node = _node(scenario_hosts, nodes, "oom-node")
    _, decoy = foreign_oom()
    cgroup = memory_cgroups("job-oom", OOM_LIMIT)
    log_dir = tmp_path_factory.mktemp("oom-job-logs")
    job = TrainingJob(node, cgroup, _ranks(), log_dir=log_dir, timeout_s=10).run()
    variables = {"app_log_dir": str(log_dir), "cgroup_dir": str(cgroup.path),
                 "nccl_log_dir": str(log_dir)}
    diagnosis = diagnose(host, variables)
    return Incident(host, node, cgroup, decoy, job, log_dir, diagnosis,
                    cgroup.oom_kills(), cgroup.peak_bytes(), cgroup.failcnt())


@pytest.fixture(scope="module")
def fitting_job(scenario_hosts, nodes, memory_cgroups, diagnose, tmp_path_factory):  # type: ignore[no-untyped-def]
    host, node = _node(scenario_hosts, nodes, "fit-node")
    foreign_oom()
    cgroup = memory_cgroups("job-fits", FIT_LIMIT)
    log_dir = tmp_path_factory.mktemp("fit-job-logs")
    job = TrainingJob(node, cgroup, _ranks(), log_dir=log_dir, timeout_s=20).run()
    diagnosis = diagnose(host, {"app_log_dir": str(log_dir), "cgroup_dir": str(cgroup.path),
                                "nccl_log_dir": str(log_dir)})
    return job, cgroup, diagnosis


# ---- the failure is real


def test_the_kernel_oom_kills_the_big_rank_and_the_survivors_fail_at_init(
    incident: Incident,
) -> None:
    codes = incident.job.exit_codes
    assert codes[OOM_RANK] == 137, codes  # SIGKILL: the OOM killer
    assert all(codes[r] == 1 for r in codes if r != OOM_RANK), codes
    assert incident.oom_kills == 1 and incident.failcnt > 0
    assert incident.peak_bytes >= OOM_LIMIT - MIB
    killed_log = incident.job.logs[OOM_RANK]
    assert "building data cache: 900 MiB" in killed_log and "ERROR" not in killed_log
    survivors = "".join(incident.job.logs[r] for r in codes if r != OOM_RANK)
    assert re.search(r"DistStoreError: Timed out after \d+ seconds waiting for clients\. 3/4",
                     survivors), survivors[-2000:]


def test_the_runbook_names_host_memory_oom_as_the_root_cause_over_ssh(
    incident: Incident,
) -> None:
    d = incident.diagnosis
    assert d.verdict["root_cause"] == "host-memory-oom", d.explain()
    # named as the target was typed (ssh://root@ADDR:PORT)
    assert d.verdict["node"] == f"{incident.host.address}:{incident.host.port}"
    assert d.statuses["cgroup-memory"] == "anomaly" and d.statuses["kernel-logs"] == "anomaly"
    kinds = d.proposal_kinds
    assert "memory-limit" in kinds and "reduce-loader-memory" in kinds
    assert "node-drain" not in kinds


def test_the_cgroup_stage_reads_usage_equal_to_limit_from_the_real_cgroup_files(
    incident: Incident,
) -> None:
    facts = incident.diagnosis.facts("cgroup-memory", "cgroup")
    assert facts["version"] == incident.cgroup.version
    assert facts["limit_bytes"] == OOM_LIMIT
    assert facts["peak_bytes"] == incident.peak_bytes
    assert facts["usage_at_limit"] is True
    assert facts["oom_kills"] == 1 and facts["failcnt"] == incident.failcnt


def test_the_kernel_log_holds_the_jobs_oom_with_usage_equal_to_limit(incident: Incident) -> None:
    ooms = incident.diagnosis.facts("kernel-logs", "dmesg")["memcg_ooms"]
    mine = [o for o in ooms if o["memcg"] == incident.cgroup.kernel_path]
    assert len(mine) == 1, [o["memcg"] for o in ooms]
    assert mine[0]["usage_bytes"] == mine[0]["limit_bytes"] == OOM_LIMIT
    assert mine[0]["killed_comm"] == "python"
    assert any(o["memcg"] == incident.decoy_memcg for o in ooms), "the decoy is in dmesg too"


def test_the_first_anomaly_is_the_jobs_kernel_oom_not_the_neighbours(incident: Incident) -> None:
    d = incident.diagnosis
    first = d.verdict["first_anomaly"]
    assert first["source"] == "dmesg.txt", d.explain()
    assert incident.cgroup.kernel_path in _event_text(d, first["line"]), d.explain()
    assert incident.decoy_memcg not in _event_text(d, first["line"])
    oom_finding = next(c for c in d.verdict["chain"] if c["stage"] == "kernel-logs")
    assert incident.cgroup.name in oom_finding["finding"], oom_finding


def test_the_kernel_oom_comes_before_every_survivors_error(incident: Incident) -> None:
    d = incident.diagnosis
    ooms = d.facts("kernel-logs", "dmesg")["memcg_ooms"]
    oom_time = next(o["time"] for o in ooms if o["memcg"] == incident.cgroup.kernel_path)
    app = d.facts("app-error", "applog")
    # the errors the survivors died of (their last: DistStoreError / DistNetworkError at init)
    survivor_errors = [r["last_error"]["time"] for r in app["ranks"] if r["last_error"]]
    assert len(survivor_errors) == 3 and app["silent_ranks"] == [OOM_RANK]
    assert all(oom_time[:19] <= t[:19] for t in survivor_errors), (oom_time, survivor_errors)


def test_gpu_hardware_is_ruled_out_by_healthy_nvidia_smi_and_a_clean_kernel_log(
    incident: Incident,
) -> None:
    d = incident.diagnosis
    ruled = {r["cause"]: r["because"] for r in d.verdict["ruled_out"]}
    assert "gpu-hardware" in ruled and "pcie-error" in ruled, ruled
    assert d.statuses["gpu-pcie"] == "ok"
    assert d.facts("gpu-pcie", "nvidia_smi")["gpu_count"] == 8


def test_the_diagnosis_over_ssh_is_quick(incident: Incident) -> None:
    assert incident.diagnosis.wall_s < 30, incident.diagnosis.wall_s


def test_nsenter_into_the_jobs_container_sees_its_logs_at_the_default_path(
    incident: Incident, diagnose
) -> None:  # type: ignore[no-untyped-def]
    container = Container(incident.node, incident.log_dir)
    try:
        # app_log_dir left at its default, /var/log/training: only the container has it
        variables = {"cgroup_dir": str(incident.cgroup.path), "nccl_log_dir": "/nonexistent"}
        inside = diagnose(incident.host, variables, nsenter=container.pid)
        outside = diagnose(incident.host, variables)
    finally:
        container.close()
    assert inside.verdict["root_cause"] == "host-memory-oom", inside.explain()
    app_inside = inside.facts("app-error", "applog")
    assert app_inside["collected"] and app_inside["silent_ranks"] == [OOM_RANK]
    assert outside.facts("app-error", "applog").get("ranks", []) == [], outside.explain()
    assert inside.facts("cgroup-memory", "cgroup")["limit_bytes"] == OOM_LIMIT


# ---- the same job, with a limit that fits


def test_with_a_limit_that_fits_every_rank_completes_its_all_reduce(fitting_job) -> None:  # type: ignore[no-untyped-def]
    job, cgroup, _ = fitting_job
    assert job.exit_codes == {0: 0, 1: 0, 2: 0, 3: 0}, {r: job.logs[r][-500:] for r in job.logs}
    assert all("all_reduce ok: 4.0" in job.logs[r] for r in job.logs)
    assert cgroup.oom_kills() == 0 and cgroup.peak_bytes() < FIT_LIMIT


def test_with_a_limit_that_fits_the_cgroup_stage_is_ok_and_rules_host_memory_out(
    fitting_job,
) -> None:  # type: ignore[no-untyped-def]
    _, _, d = fitting_job
    assert d.statuses["cgroup-memory"] == "ok", d.explain()
    assert d.facts("cgroup-memory", "cgroup")["oom_kills"] == 0
    assert "host-memory-oom" not in d.causes, d.explain()
    assert d.verdict["root_cause"] != "host-memory-oom", d.explain()
    assert "host-memory-oom" in {r["cause"] for r in d.verdict["ruled_out"]}, d.explain()


def test_with_a_limit_that_fits_the_neighbours_oom_is_reported_but_not_blamed(
    fitting_job,
) -> None:  # type: ignore[no-untyped-def]
    _, _, d = fitting_job
    # listed apart ("also seen"), never a link of the causal chain
    assert not [c for c in d.verdict["chain"] if c["stage"] == "kernel-logs"], d.explain()
    kernel = [c for c in d.verdict["also_seen"] if c["stage"] == "kernel-logs"]
    assert kernel and all("cause" not in c for c in kernel), d.explain()
    assert all("other cgroups" in c["finding"] for c in kernel), d.explain()


def test_with_a_limit_that_fits_an_info_line_naming_dev_shm_is_not_an_shm_error(
    fitting_job,
) -> None:  # type: ignore[no-untyped-def]
    _, _, d = fitting_job
    assert d.statuses["app-error"] == "ok", d.explain()
    assert d.verdict["root_cause"] != "shm-exhausted", d.explain()


def _event_text(d: Diagnosis, line: int) -> str:
    """The whole OOM event around a dmesg line (its anchor through its `Killed process`)."""
    for o in d.facts("kernel-logs", "dmesg")["memcg_ooms"]:
        if o["line"] <= line <= o["end_line"]:
            return f"{o['memcg']} {o['task_memcg']} {o['kill_text']}"
    return ""
