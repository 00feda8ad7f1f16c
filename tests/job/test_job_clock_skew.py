"""A job across 4 SSH test hosts whose clocks disagree: each host's `date` is a shim that adds
its own skew (sshd, the shell, the channel round trips are real), and each host's evidence —
the rank logs and a `dmesg -T` shim — is written in that host's skewed local time.

The job's first anomaly is an OOM kill on jk-node-3, whose clock runs 240 s fast: by raw
timestamps it is the *latest* anomaly of the job, and jk-node-2 (30 s slow) shows a socket error
that reads earliest. Only the measured offsets put the OOM first. A second layout makes every
host fail on a socket at one true instant (different raw times on every clock): one shared
cause, not four node faults. No GPU here: nvidia-smi and friends are the scenario shims."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.integration.conftest import cli_env
from tests.scenarios import shims
from tests.sweep.helpers import runbook

pytestmark = [pytest.mark.live, pytest.mark.ssh]

#: each host's clock minus the true time (seconds)
SKEWS = {"jk-node-1": 0.0, "jk-node-2": -30.0, "jk-node-3": 240.0, "jk-node-4": 5.0}
RANKS = {"jk-node-1": (0, 1), "jk-node-2": (2, 3), "jk-node-3": (4, 5), "jk-node-4": (6, 7)}
MEMCG = "/kubepods/burstable/pod5c1e9a2b-77f0-4d1e-9c3a-2b8f0e6d4a11"
KILLED_PID = 48817

DATE_SHIM = """#!/bin/sh
# this host's clock runs {skew} s off: every `date` (the runbook's clock probes included) reads it
now=$(/usr/bin/date +%s.%N)
skewed=$(awk -v n="$now" -v s="{skew}" 'BEGIN {{ printf "%.9f", n + s }}')
exec /usr/bin/date -d "@$skewed" "$@"
"""


def app_time(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{moment.microsecond // 1000:03d}"


def dmesg_time(moment: dt.datetime) -> str:
    return (
        moment.strftime("[%a %b %d %H:%M:%S %Y]").replace(" 0", "  ", 1)
        if moment.day < 10
        else moment.strftime("[%a %b %d %H:%M:%S %Y]")
    )


def oom_record(at: dt.datetime) -> list[str]:
    t = dmesg_time(at)
    return [
        f"{t} python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        f"{t} CPU: 1 PID: {KILLED_PID} Comm: python3 Not tainted 6.1.0-27-amd64 #1 Debian",
        f"{t} memory: usage 1228800kB, limit 1228800kB, failcnt 342",
        f"{t} memory+swap: usage 1228800kB, limit 9007199254740988kB, failcnt 0",
        f"{t} kmem: usage 20480kB, limit 9007199254740988kB, failcnt 0",
        f"{t} Memory cgroup stats for {MEMCG}:",
        f"{t} anon 1207959552",
        f"{t} oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        f"oom_memcg={MEMCG},task_memcg={MEMCG},task=python3,pid={KILLED_PID},uid=0",
        f"{t} Memory cgroup out of memory: Killed process {KILLED_PID} (python3) "
        "total-vm:2345678kB, anon-rss:1000000kB, file-rss:1000kB, shmem-rss:0kB, UID:0 "
        "pgtables:2400kB oom_score_adj:0",
    ]


@dataclass
class Layout:
    """What each host's evidence says, in true (collector) seconds after `base`."""

    errors: dict[int, tuple[float, str]]
    oom_at: dict[str, float]


def write_evidence(host: TestHost, logs: Path, layout: Layout, base: dt.datetime) -> None:
    skew = dt.timedelta(seconds=SKEWS[host.name])
    for path in logs.glob("*.log"):
        path.unlink()
    for rank in RANKS[host.name]:
        start = base - dt.timedelta(seconds=30) + skew
        lines = [
            f"{app_time(start)} INFO rank {rank} of 8 starting (pid "
            f"{KILLED_PID if (host.name, rank) == ('jk-node-3', 5) else 40000 + rank})"
        ]
        if rank in layout.errors:
            after, text = layout.errors[rank]
            lines.append(f"{app_time(base + dt.timedelta(seconds=after) + skew)} ERROR {text}")
        (logs / f"rank-{rank}.log").write_text("\n".join(lines) + "\n")
    kernel = [f"{dmesg_time(base - dt.timedelta(hours=1) + skew)} eth0: link up"]
    if host.name in layout.oom_at:
        kernel += oom_record(base + dt.timedelta(seconds=layout.oom_at[host.name]) + skew)
    profile = shims.profile("healthy-8gpu", dmesg=shims.Output("\n".join(kernel) + "\n"))
    shims.install(host, profile)


@dataclass
class Job:
    hosts: dict[str, TestHost]
    logs: dict[str, Path]
    hosts_file: Path
    env: dict[str, str]
    argv: list[str]
    work: Path

    def diagnose(self, layout: Layout, base: dt.datetime) -> tuple[Path, dict[str, Any]]:
        for name, host in self.hosts.items():
            write_evidence(host, self.logs[name], layout, base)
        run_dir = self.work / f"run-{time.monotonic_ns()}"
        run = runbook([*self.argv, "--run-dir", str(run_dir)], self.env, timeout=120)
        assert run.rc == 0, run.stderr[-3000:]
        verdict: dict[str, Any] = run.json()
        return run_dir, verdict


@pytest.fixture(scope="module")
def job(host_network: HostNetwork, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    factory = HostFactory(host_network)
    work = tmp_path_factory.mktemp("job-skew")
    try:
        hosts = {name: factory(name) for name in SKEWS}
        logs = {}
        lines = []
        for name, host in hosts.items():
            host.write_shim("date", DATE_SHIM.format(skew=SKEWS[name]))
            logs[name] = work / name / "app"
            logs[name].mkdir(parents=True)
            ranks = ",".join(str(r) for r in RANKS[name])
            extra = f" cgroup_dir=/sys/fs/cgroup/memory{MEMCG}" if name == "jk-node-3" else ""
            lines.append(
                f"ssh://root@{host.address}:{host.port} ranks={ranks} "
                f"app_log_dir={logs[name]} since=-1h{extra}"
            )
        hosts_file = work / "hosts.txt"
        hosts_file.write_text("# the job's nodes\n" + "\n".join(lines) + "\n")
        argv = [
            "run",
            "nccl-init-failure",
            "--hosts-from-file",
            str(hosts_file),
            "--identity",
            str(host_network.client_key.private_path),
            "--known-hosts",
            str(host_network.known_hosts_path),
            "--no-input",
            "--format",
            "json",
            "--timeout-per-host",
            "60",
        ]
        yield Job(hosts, logs, hosts_file, cli_env(work), argv, work)
    finally:
        factory.remove_all()


def by_node(verdict: dict[str, Any], address: str) -> dict[str, Any]:
    return next(n for n in verdict["nodes"] if address in n["target"])


def test_the_first_anomaly_is_found_on_the_host_whose_raw_clock_reads_latest(job: Job) -> None:
    base = dt.datetime.now().replace(microsecond=0) - dt.timedelta(minutes=15)
    layout = Layout(
        errors={
            0: (
                41.0,
                "tensorflow.python.framework.errors_impl.UnknownError: "
                "ncclCommInitRank failed: unhandled cuda error",
            ),
            1: (40.0, "RuntimeError: ncclCommInitRank failed: unhandled cuda error"),
            2: (
                35.0,
                "RuntimeError: [c10d] connect() to 10.0.0.5:29500 failed: Connection refused",
            ),
            4: (38.0, "RuntimeError: ncclCommInitRank failed: unhandled cuda error"),
            6: (39.0, "RuntimeError: ncclCommInitRank failed: unhandled cuda error"),
        },
        oom_at={"jk-node-3": 0.0},
    )
    run_dir, verdict = job.diagnose(layout, base)

    node3 = job.hosts["jk-node-3"].address
    # every host's offset measured, within a few ms of the skew its date shim adds
    for name, host in job.hosts.items():
        clock = by_node(verdict, host.address)["clock"]
        assert clock is not None, verdict["nodes"]
        assert abs(clock["offset_s"] - SKEWS[name]) < 0.5, (name, clock)
        assert 0 < clock["uncertainty_s"] < 0.5, (name, clock)
    # by raw timestamps the OOM on jk-node-3 is the latest anomaly of the job, and the
    # socket error on jk-node-2 the earliest
    raw = {n["target"]: n for n in verdict["nodes"]}
    firsts = {t: n["first_anomaly"] for t, n in raw.items() if n["first_anomaly"]}
    node_times = {}
    for t, anomaly in firsts.items():
        offset = raw[t]["clock"]["offset_s"]
        moment = dt.datetime.fromisoformat(anomaly["time"]) + dt.timedelta(seconds=offset)
        node_times[t] = moment
    latest_raw = max(node_times, key=lambda t: node_times[t])
    assert node3 in latest_raw, node_times
    assert raw[latest_raw]["root_cause"] == "host-memory-oom"
    # corrected, it comes first: the job's verdict blames jk-node-3's cgroup
    assert verdict["root_cause"] == "host-memory-oom", verdict["statement"]
    assert verdict["scope"] == "node"
    first = verdict["first_anomaly"]
    assert first["node"] == by_node(verdict, node3)["node"], first
    assert first["source"] == "dmesg.txt" and "oom" in first["text"].lower()
    assert abs(first["offset_s"] - 240.0) < 0.5
    true_first = dt.datetime.fromisoformat(first["time"])
    expected = base.astimezone(dt.timezone.utc)  # naive: the hosts' local time, as logged
    assert abs((true_first - expected).total_seconds()) < 1.0, (first, expected)
    # the statement names the killed rank (its log gave the pid dmesg names) and the gap to
    # the rank that reported the surfaced error
    # nodes listed by address are named by the address listed (as the user typed them: two
    # entries are never one name), not by the hostname they report
    node1 = job.hosts["jk-node-1"].address
    assert verdict["statement"].startswith(f"rank 5 on {node3} was OOM-killed at "), verdict[
        "statement"
    ]
    assert (
        f"41 s before rank 0 on {node1} reported tensorflow.python.framework.errors_impl"
        ".UnknownError: ncclCommInitRank failed" in verdict["statement"]
    ), verdict["statement"]
    ranks = {r["rank"]: r for r in verdict["ranks"]}
    assert sorted(ranks) == list(range(8))
    assert ranks[5]["exit"]["oom_killed"] and not ranks[5]["exit"]["inferred"]
    assert ranks[2]["first_error"]["text"].endswith("Connection refused")
    # the cross-node timeline is ordered on the corrected axis
    anomalies = [e for e in verdict["timeline"] if e.get("anomaly")]
    assert anomalies[0]["node"] == first["node"]
    times = [e["time"] for e in verdict["timeline"]]
    assert times == sorted(times)
    # the run directory: the job verdict and its report, every node's own run kept
    assert json.loads((run_dir / "job.json").read_text())["root_cause"] == "host-memory-oom"
    report = (run_dir / "job.md").read_text()
    assert "## Ranks" in report and "## Cross-node timeline" in report
    # the measured offset of the skewed node, as the report prints it (+240.012 s ± …): a
    # measurement, held to the same half second as the verdict's, never to its digits
    shown = [float(m) for m in re.findall(r"([+-]\d+\.\d{3}) s ±", report)]
    assert any(abs(value - 240.0) < 0.5 for value in shown), shown
    assert len(list((run_dir / "nodes").glob("*/verdict.json"))) == 4
    # `runbook report` takes the job's run directory: the job report, and sanitized, no node
    # name of the job left in it
    again = runbook(["report", str(run_dir)], job.env)
    assert again.rc == 0, again.stderr
    assert again.stdout == report
    names = [n["node"] for n in verdict["nodes"]]
    sanitized = runbook(["report", str(run_dir), "--sanitize"], job.env)
    assert sanitized.rc == 0, sanitized.stderr
    # placeholders escaped as Markdown text, as all evidence is outside code
    assert "## Ranks" in sanitized.stdout and "&lt;NODE_1&gt;" in sanitized.stdout
    assert not [name for name in names if name in sanitized.stdout], names
    as_json = runbook(["report", str(run_dir), "--format", "json"], job.env)
    assert as_json.rc == 0 and as_json.json()["root_cause"] == "host-memory-oom"


def test_every_host_failing_at_one_true_instant_is_one_shared_cause(job: Job) -> None:
    base = dt.datetime.now().replace(microsecond=0) - dt.timedelta(minutes=10)
    text = "RuntimeError: [c10d] connect() to 10.0.0.9:29500 failed: Connection refused"
    layout = Layout(errors={r: (20.0 + 0.1 * r, text) for r in range(8)}, oom_at={})
    _, verdict = job.diagnose(layout, base)
    assert verdict["root_cause"] == "network-socket"
    assert verdict["scope"] == "shared", verdict["statement"]
    assert len(verdict["shared_cause"]["nodes"]) == 4
    assert verdict["shared_cause"]["span_s"] < 2.0
    assert "rather than a fault on each node" in verdict["statement"]
    assert not [p for p in verdict["proposals"] if p["kind"] == "node-drain"]


SCONTROL = """#!/bin/sh
# a Slurm controller's answers (this job only), in scontrol's own format
case "$*" in
  "-d show job 4242") cat <<'JOB'
JobId=4242 JobName=llm-pretrain
   UserId=alice(1001) GroupId=ml(1001) MCS_label=N/A
   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=1:0
   RunTime=00:01:12 TimeLimit=04:00:00 TimeMin=N/A
   StartTime={start} EndTime={end} Deadline=N/A
   Partition=h100 AllocNode:Sid=login-1:2201
   NodeList=jk-node-[1-4]
   BatchHost=jk-node-1
   NumNodes=4 NumCPUs=64 NumTasks=8 CPUs/Task=8 ReqB:S:C:T=0:0:*:*
   JOB_GRES=gpu:h100:8
     Nodes=jk-node-[1-4] CPU_IDs=0-15 Mem=65536 GRES=gpu:h100:2(IDX:0-1)
   Command=/home/alice/run.sh
JOB
  ;;
  "show hostnames jk-node-[1-4]") printf 'jk-node-1\\njk-node-2\\njk-node-3\\njk-node-4\\n' ;;
  *) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
esac
"""


def test_a_slurm_job_is_resolved_on_its_login_node_and_reached_through_the_inventory(
    job: Job,
) -> None:
    """`--job slurm:4242 --slurm-via ssh://<jk-node-1>`: scontrol (a shim printing Slurm's
    format) runs over SSH on the login node; the host names it gives are reached through an
    Ansible inventory naming their addresses and runbook variables; same skewed clocks, same
    verdict as the hosts file."""
    base = dt.datetime.now().replace(microsecond=0) - dt.timedelta(minutes=20)
    login = job.hosts["jk-node-1"]
    login.write_shim(
        "scontrol",
        SCONTROL.format(start=base.isoformat(), end=(base + dt.timedelta(minutes=1)).isoformat()),
    )
    lines = ["all:", "  hosts:"]
    for name, host in job.hosts.items():
        lines += [
            f"    {name}:",
            f"      ansible_host: {host.address}",
            f"      ansible_port: {host.port}",
            "      ansible_user: root",
            "      runbook_vars:",
            f"        app_log_dir: {job.logs[name]}",
            "        since: -1h",
        ]
        if name == "jk-node-3":
            lines.append(f"        cgroup_dir: /sys/fs/cgroup/memory{MEMCG}")
    inventory = job.work / "slurm-inventory.yml"
    inventory.write_text("\n".join(lines) + "\n")
    layout = Layout(
        errors={
            0: (41.0, "RuntimeError: ncclCommInitRank failed: unhandled cuda error"),
            2: (
                35.0,
                "RuntimeError: [c10d] connect() to 10.0.0.5:29500 failed: Connection refused",
            ),
        },
        oom_at={"jk-node-3": 0.0},
    )
    argv = [a for a in job.argv]
    at = argv.index("--hosts-from-file")
    argv[at : at + 2] = [
        "--job",
        "slurm:4242",
        "--slurm-via",
        f"ssh://root@{login.address}:{login.port}",
        "--inventory",
        str(inventory),
    ]
    for name, host in job.hosts.items():
        write_evidence(host, job.logs[name], layout, base)
    run = runbook(argv, job.env, timeout=120)
    assert run.rc == 0, run.stderr[-3000:]
    verdict = run.json()
    assert verdict["job"]["ref"] == "slurm:4242"
    assert verdict["job"]["details"]["state"] in ("FAILED", "JobState=FAILED") or (
        "FAILED" in str(verdict["job"]["details"])
    )
    assert sorted(n["node"] for n in verdict["nodes"]) == sorted(SKEWS)
    assert verdict["root_cause"] == "host-memory-oom"
    assert verdict["first_anomaly"]["node"] == "jk-node-3"
    assert verdict["statement"].startswith("rank 5 on jk-node-3 was OOM-killed")
    # Slurm knows each node's GPUs (scontrol -d: GRES=gpu:h100:2(IDX:0-1)), not each rank's
    assert all(n["gpus"] == ["0", "1"] for n in verdict["nodes"]), verdict["nodes"]
    # Slurm names nodes, not ranks: the ranks come from each node's own logs
    assert sorted(r["rank"] for r in verdict["ranks"]) == list(range(8))
