"""A sweep of 30 real SSH test hosts (and two addresses nobody answers on) with the shipped
runbook, as the nightly job would run it: healthy nodes, memcg OOMs of the job each node's
inventory entry names, nodes running no job whose kernel log holds another cgroup's OOM kill
(a real one), Xid 79s, a node whose kernel-log read never returns, one whose sshd accepts TCP
and never speaks (SIGSTOP), one whose host key changed, an address with no host and a port
nobody listens on.

It must give every host its verdict or its error, write all four reports, queue the findings'
proposals, and cut the hung hosts off at their deadline without holding up the others: the
inventory's own ConnectTimeout (30 s) and the stage's probe timeout (30 s) are both longer than
the 10 s deadline, so only the deadline can end those hosts in time."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runbook.render.sweep_summary import summary_lines
from runbook.sweep.results import SweepResult
from tests.hosts.harness import HostNetwork, TestHost
from tests.integration.conftest import cli_env
from tests.sweep import fleet
from tests.sweep.helpers import Run, parse_prom, queued, runbook

pytestmark = [pytest.mark.ssh, pytest.mark.live]

DEADLINE = 10.0
FORKS = 16
#: the hung kinds first, so their deadlines run alongside the others' work
KINDS = [
    "hang", "stopped", "rekeyed", *["oom"] * 3, *["xid"] * 3, *["neighbour-oom"] * 3,
    *["healthy"] * 18,
]  # fmt: skip


@dataclass
class Swept:
    run: Run
    hosts: dict[str, tuple[TestHost, str]]
    report: Path
    env: dict[str, str]
    data: dict[str, Any]
    known_hosts: Path

    def host(self, name: str) -> dict[str, Any]:
        return next(h for h in self.data["hosts"] if h["host"] == name)

    def of_kind(self, kind: str) -> list[str]:
        return [name for name, (_, k) in self.hosts.items() if k == kind]


@pytest.fixture(scope="module")
def swept(
    module_hosts: Any, host_network: HostNetwork, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    work = tmp_path_factory.mktemp("fleet")
    hosts, known = fleet.build(module_hosts, host_network, KINDS, work)
    try:
        first = next(iter(hosts.values()))[0]
        extra = {
            "gone": {"ansible_host": host_network.unused_address()},
            "closed": {"ansible_host": first.address, "ansible_port": 1},
        }
        data = fleet.inventory(host_network, hosts, known, extra=extra)
        data["all"]["vars"]["ansible_ssh_common_args"] = data["all"]["vars"][
            "ansible_ssh_common_args"
        ].replace("ConnectTimeout=10", "ConnectTimeout=30")
        assert "ConnectTimeout=30" in data["all"]["vars"]["ansible_ssh_common_args"]
        inventory = fleet.write_inventory(work / "inventory.yml", data)
        env = cli_env(work)
        report = work / "report"
        run = runbook(
            [
                "sweep",
                "nccl-init-failure",
                "-i",
                str(inventory),
                "--forks",
                str(FORKS),
                "--timeout-per-host",
                str(DEADLINE),
                "--report",
                str(report),
                "--format",
                "json",
            ],
            env,
            timeout=120,
        )
        assert run.rc in (0, 1, 3), run.stderr[-3000:]
        yield Swept(run, hosts, report, env, run.json(), known)
    finally:
        fleet.resume(hosts.values())


def test_every_host_gets_the_verdict_or_the_error_its_state_calls_for(swept: Swept) -> None:
    assert len(swept.data["hosts"]) == len(KINDS) + 2
    for name, (_, kind) in swept.hosts.items():
        host = swept.host(name)
        # on a mismatch, what each stage did (a probe cut short shows as its stage's error)
        stages = [(s["id"], s["status"]) for s in (host.get("verdict") or {}).get("stages", [])]
        assert host["status"] == fleet.EXPECTED_STATUS[kind], (name, host.get("error"), stages)
        if kind in fleet.EXPECTED:
            verdict = host["verdict"]
            assert verdict["root_cause"] == fleet.EXPECTED[kind], (name, verdict["chain"])
            assert verdict["node"] == name  # the node's own hostname, read over SSH
        else:
            assert "verdict" not in host and host["error"]
    assert swept.host("gone")["status"] == "unreachable"
    assert swept.host("closed")["status"] == "unreachable"
    assert "Connection refused" in swept.host("closed")["error"]
    rekeyed = swept.host(swept.of_kind("rekeyed")[0])
    assert "host key CHANGED" in rekeyed["error"]
    assert f"remove its line from {swept.known_hosts})" in rekeyed["error"]  # the user's file


def test_findings_name_the_first_anomaly_in_the_kernel_log(swept: Swept) -> None:
    for name in swept.of_kind("oom"):
        first = swept.host(name)["verdict"]["first_anomaly"]
        assert first["source"] == "dmesg.txt" and "invoked oom-killer" in first["text"]
    for name in swept.of_kind("xid"):
        first = swept.host(name)["verdict"]["first_anomaly"]
        assert first["source"] == "dmesg.txt" and "Xid" in first["text"]


def test_hung_hosts_are_cut_off_at_their_deadline_without_delaying_the_sweep(
    swept: Swept,
) -> None:
    for kind in ("hang", "stopped"):
        host = swept.host(swept.of_kind(kind)[0])
        assert DEADLINE - 0.5 <= host["duration_s"] <= DEADLINE + 1.5, host
        assert f"{DEADLINE:g}s deadline" in host["error"]
    assert (
        "stage kernel-logs: dmesg.txt stopped at the deadline"
        in swept.host(swept.of_kind("hang")[0])["error"]
    )
    assert "(connecting)" in swept.host(swept.of_kind("stopped")[0])["error"]
    # refusals and closed ports cost next to nothing
    assert swept.host(swept.of_kind("rekeyed")[0])["duration_s"] < 5
    assert swept.host("closed")["duration_s"] < 5
    # without the deadline the stopped host alone would take its 30 s ConnectTimeout
    assert swept.data["duration_s"] < 2 * DEADLINE, swept.data["duration_s"]


def test_the_hung_command_was_stopped_on_the_host(swept: Swept) -> None:
    host, _ = swept.hosts[swept.of_kind("hang")[0]]
    deadline = time.monotonic() + 5
    while True:
        comms = []
        for pid in host.pids():
            try:
                comms.append(Path(f"/proc/{pid}/comm").read_text().strip())
            except OSError:
                continue
        if "sleep" not in comms or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "sleep" not in comms, comms


def test_each_swept_host_was_reached_over_one_ssh_connection(swept: Swept) -> None:
    time.sleep(0.2)  # sshd writes its log line as it accepts
    for name in swept.of_kind("healthy") + swept.of_kind("oom"):
        host, _ = swept.hosts[name]
        accepted = host.sshd_log_tail(10000).count("Accepted publickey for root")
        assert accepted == 1, (name, accepted)


def test_sweep_json_holds_each_verdict_object_of_the_contract(swept: Swept) -> None:
    on_disk = json.loads((swept.report / "sweep.json").read_text())
    assert on_disk == swept.data
    assert on_disk["kind"] == "runbook-sweep" and on_disk["exit_code"] == 1
    counts = on_disk["counts"]
    assert counts["healthy"] == 21 and counts["finding"] == 6
    assert counts["timeout"] == 2 and counts["refused"] == 1 and counts["unreachable"] == 2
    keys = {
        "format",
        "node",
        "root_cause",
        "confidence",
        "first_anomaly",
        "chain",
        "ruled_out",
        "stages",
        "proposals",
    }
    for host in on_disk["hosts"]:
        if "verdict" in host:
            assert keys <= set(host["verdict"]), host["host"]
            assert host["verdict"]["format"] == 1
    assert swept.run.rc == 1  # findings


def test_sweep_md_tables_root_causes_then_findings_worst_first(swept: Swept) -> None:
    text = (swept.report / "sweep.md").read_text()
    table = text.split("## By root cause", 1)[1].split("## Findings", 1)[0]
    assert "| gpu-hardware | 3 |" in table and "| host-memory-oom | 3 |" in table
    assert "| healthy | 21 |" in table and "| timeout | 2 |" in table
    findings = text.split("## Findings, worst first", 1)[1].split("## Not swept", 1)[0]
    headings = [line for line in findings.splitlines() if line.startswith("### ")]
    assert len(headings) == 6
    # a GPU off the bus takes the node out before a job's memory limit does
    assert all("gpu-hardware" in h for h in headings[:3]), headings
    assert all("host-memory-oom" in h for h in headings[3:]), headings
    assert "- first anomaly: `dmesg.txt:" in findings
    not_swept = text.split("## Not swept", 1)[1]
    for name in ("gone", "closed", *swept.of_kind("hang"), *swept.of_kind("rekeyed")):
        assert f"| {name} |" in not_swept


def test_junit_has_a_case_per_host_failures_for_findings_errors_for_the_unreachable(
    swept: Swept,
) -> None:
    root = ET.parse(swept.report / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert len(cases) == len(KINDS) + 2
    assert suite.get("tests") == str(len(KINDS) + 2)
    assert suite.get("failures") == "6" and suite.get("errors") == "5"
    for name, (_, kind) in swept.hosts.items():
        case = cases[name]
        if kind in ("oom", "xid"):
            failure = case.find("failure")
            assert failure is not None and failure.get("type") == fleet.EXPECTED[kind]
        elif kind in ("healthy", "neighbour-oom"):
            assert case.find("failure") is None and case.find("error") is None
        else:
            error = case.find("error")
            assert error is not None and error.get("type") == fleet.EXPECTED_STATUS[kind]
    assert cases["gone"].find("error") is not None


def test_runbook_prom_is_a_valid_textfile_with_the_named_metrics(swept: Swept) -> None:
    samples = parse_prom((swept.report / "runbook.prom").read_text())
    hosts = {labels["status"]: value for labels, value in samples["runbook_sweep_hosts"]}
    assert hosts == {k: float(v) for k, v in swept.data["counts"].items()}
    causes = {labels["node"]: labels["cause"] for labels, _ in samples["runbook_root_cause"]}
    for name, (_, kind) in swept.hosts.items():
        assert causes.get(name) == fleet.EXPECTED.get(kind), name
    assert all(value == 1 for _, value in samples["runbook_root_cause"])
    ((_, duration),) = samples["runbook_sweep_duration_seconds"]
    assert duration == pytest.approx(swept.data["duration_s"], abs=0.01)
    ((_, finished),) = samples["runbook_sweep_last_success_timestamp_seconds"]
    assert time.time() - 300 < finished <= time.time()


def test_findings_are_queued_for_approval_and_nothing_else_is(swept: Swept) -> None:
    proposals = queued(swept.env)
    assert {p.source for p in proposals} == {"sweep"}
    assert {p.state for p in proposals} == {"pending"}
    by_node: dict[str, set[str]] = {}
    for p in proposals:
        by_node.setdefault(str(p.node), set()).add(p.kind)
    for name in swept.of_kind("xid"):
        assert "node-drain" in by_node[name], by_node
        # sweep.json names the queued proposals of each host
        assert set(swept.host(name)["queued"]) == {p.id for p in proposals if p.node == name}
    for name in swept.of_kind("oom"):
        # the job's cgroup is known but its peak was not measured (the cgroup's files are not
        # on the node any more): a memory-limit would be advice with its inputs missing,
        # never queued; never a drain
        assert "memory-limit" not in by_node.get(name, set())
        assert "node-drain" not in by_node.get(name, set())  # never a drain on a memory verdict
    assert not set(by_node) & set(swept.of_kind("healthy") + swept.of_kind("neighbour-oom"))


def test_a_neighbours_oom_on_a_node_running_no_job_is_context_not_a_finding(
    swept: Swept,
) -> None:
    """Every node where some pod once hit its own limit must not be a finding: the sweep would
    flag half a fleet and be ignored. The OOM stays in the verdict, under also_seen."""
    for name in swept.of_kind("neighbour-oom"):
        host = swept.host(name)
        verdict = host["verdict"]
        assert (host["status"], verdict["root_cause"]) == ("healthy", "healthy"), verdict["chain"]
        assert verdict["chain"] == [] and verdict["first_anomaly"] is None
        (seen,) = [a for a in verdict["also_seen"] if "memcg OOM killed" in a["finding"]]
        assert seen["finding"].startswith("memcg OOM killed python3 in /rbk-scn-"), seen
        assert "no job is under diagnosis" in seen["finding"] and seen.get("cause") is None
        assert seen["evidence"][0]["source"] == "dmesg.txt"


def test_the_sweep_summary_does_not_count_a_neighbours_oom_as_a_finding(swept: Swept) -> None:
    """The lines `runbook sweep` prints, sweep.md and runbook.prom, for the same sweep."""
    neighbours = swept.of_kind("neighbour-oom")
    lines = summary_lines(SweepResult.from_dict(swept.data), [])
    assert ": 21 healthy, 6 findings, " in lines[0], lines[0]
    findings = lines[lines.index("findings, worst first:") + 1 :]
    listed = {line.split()[0] for line in findings if line.startswith("  ")}
    assert listed >= set(swept.of_kind("oom") + swept.of_kind("xid"))
    assert not listed & set(neighbours), lines
    text = (swept.report / "sweep.md").read_text()
    found = text.split("## Findings, worst first", 1)[1].split("## Not swept", 1)[0]
    assert not [n for n in neighbours if n in found], found
    healthy_line = next(line for line in text.splitlines() if line.startswith("Healthy: "))
    assert all(n in healthy_line for n in neighbours), healthy_line
    samples = parse_prom((swept.report / "runbook.prom").read_text())
    causes = {labels["node"]: labels["cause"] for labels, _ in samples["runbook_root_cause"]}
    assert {causes[n] for n in neighbours} == {"healthy"}
