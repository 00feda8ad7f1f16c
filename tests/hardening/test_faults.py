"""Faults met in the middle of a walk, for real: a guided run and a sweep must keep going,
record what happened, and lose nothing.

Everything here is real: OpenSSH test hosts in network namespaces (tests/hosts/), whose sshd
and sessions are SIGKILLed while a probe runs, whose link is brought down while output flows,
a listening socket that never sends a banner, a host name under the reserved `.invalid` TLD
(RFC 6761) resolved by a private `hosts: files` nsswitch so no lookup leaves this machine
(glibc itself would ask the DNS server for it), and commands printing 100 MB or never ending.
The runbook (runbooks/fault-walk.yaml) meets the fault in its middle stage; the stage after it
must still be walked, the run directory stay consistent, and the sweep list every host.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runbook.bundle import TRUNCATED_NOTE
from runbook.transports.base import MAX_CAPTURE_BYTES
from tests.hardening.runs import (
    FAULT_WALK,
    Background,
    Finished,
    check_run_dir,
    one_line_error,
    probe_events,
    run_now,
    stages,
    until,
)
from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.integration.conftest import cli_env
from tests.sweep import fleet

pytestmark = [pytest.mark.ssh, pytest.mark.live]

CONNECT_TIMEOUT = 2
#: the runbook process's peak RSS with a 100 MB and an endless output in flight at once: the
#: capture bound (16 MiB a stream) keeps it near 160 MiB here; holding the 100 MB whole (its
#: chunks, the joined bytes, the text, the bundle's copy) would add 400 MiB, the endless one
#: all it could read before its timeout (300 MB/s here)
RUN_RSS_MIB = 250
#: the sweep's, with the same two outputs and six other hosts (measured: about 165 MiB)
SWEEP_RSS_MIB = 300
UNRESOLVABLE = "gpu-node-07.invalid"

SLEEPER = """#!/bin/sh
# test shim: a probe still running when the fault comes
echo started
: > {marker}
exec sleep 300
"""
STREAM = """#!/bin/sh
# test shim: a long output, flowing when the connection goes
: > {marker}
while :; do echo 'a line of a long output'; sleep 0.005; done
"""
HUNDRED_MB = """#!/bin/sh
# test shim: 100 MB on stdout
head -c 100000000 /dev/zero | tr '\\0' x
"""
FOREVER = """#!/bin/sh
# test shim: output without end
exec yes 'a line that never ends'
"""
#: a TCP port that accepts connections (the kernel completes the handshake into the backlog)
#: and never says anything
SILENT = """import socket, sys, time
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
time.sleep(600)
"""
SILENT_PORT = 2222


# --------------------------------------------------------------------------------------------
# faults


def kill_sshd_and_sessions(host: TestHost) -> None:
    """The host's sshd and every session it serves, SIGKILLed (the probe with them)."""
    host.stop_sshd(kill_sessions=True)


def kill_connections(host: TestHost) -> None:
    """SIGKILL the per-connection sshd processes, not the listener: the TCP connection drops
    in the middle of the stream, as when a session's sshd dies."""
    killed = []
    for pid in host.pids():
        if pid == host.sshd_pid:
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith((b"sshd:", b"sshd-session")):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(pid)
    assert killed, f"no session sshd on {host.name}"


def link_down(host: TestHost) -> None:
    """The host's link goes down: no FIN, no RST, the peer just falls silent."""
    host.exec(["ip", "link", "set", "eth0", "down"], check=True)


def link_up(hosts: Iterable[TestHost]) -> None:
    """Back up before teardown: the dead connection's socket, still retransmitting over a
    downed link, keeps the namespace (and its veth) alive for seconds after it is deleted."""
    for host in hosts:
        host.exec(["ip", "link", "set", "eth0", "up"])


#: kind -> (fault-probe, fault-probe-2, what the test does once the marker appears)
KINDS: dict[str, tuple[str, str, Callable[[TestHost], None] | None]] = {
    "healthy": ("#!/bin/sh\necho work\n", "#!/bin/sh\necho more\n", None),
    "killed": (SLEEPER, "#!/bin/sh\necho more\n", kill_sshd_and_sessions),
    "reset": (STREAM, "#!/bin/sh\necho more\n", kill_connections),
    "linkdown": (STREAM, "#!/bin/sh\necho more\n", link_down),
    "flood": (HUNDRED_MB, FOREVER, None),
}


def dress(host: TestHost, kind: str, markers: Path) -> Path:
    """Install the kind's probes on `host`; returns the file its probe touches once running."""
    markers.mkdir(parents=True, exist_ok=True)
    marker = markers / host.name
    work, more, _ = KINDS[kind]
    host.write_shim("fault-probe", work.format(marker=marker))
    host.write_shim("fault-probe-2", more.format(marker=marker))
    return marker


def silent_listener(host: TestHost) -> None:
    """A socket on the host's address that accepts TCP and never sends a banner."""
    host.spawn([sys.executable, "-c", SILENT, host.address, str(SILENT_PORT)])

    def listening() -> bool:
        try:
            with socket.create_connection((host.address, SILENT_PORT), timeout=0.5):
                return True
        except OSError:
            return False

    until(listening, 10, "the silent listener")


@pytest.fixture
def private_resolver(tmp_path: Path) -> list[str]:
    """A prefix that runs the CLI in a private mount namespace whose nsswitch.conf says
    `hosts: files`: names resolve from /etc/hosts alone, so looking up a `.invalid` name never
    sends a DNS query off this machine (this machine's glibc asks its DNS server for one)."""
    assert ".invalid" not in Path("/etc/hosts").read_text()
    nsswitch = tmp_path / "nsswitch.conf"
    nsswitch.write_text("hosts: files\n")
    script = 'mount --bind "$0" /etc/nsswitch.conf && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(nsswitch)]


def _ssh_args(host: TestHost, known_hosts: Path, key: Path, port: int | None = None) -> list[str]:
    return [
        "--target", f"ssh://root@{host.address}:{port or host.port}",
        "--known-hosts", str(known_hosts),
        "--identity", str(key),
        "--connect-timeout", str(CONNECT_TIMEOUT),
    ]  # fmt: skip


def _walk_with_fault(
    host: TestHost, kind: str, tmp_path: Path, known_hosts: Path, key: Path
) -> tuple[Finished, Path]:
    """`runbook run fault-walk` over `host` dressed as `kind`; the fault strikes as soon as
    the middle stage's probe is running (output flowing, for a stream)."""
    marker = dress(host, kind, tmp_path / "markers")
    run_dir = tmp_path / "run"
    args = ["run", str(FAULT_WALK), *_ssh_args(host, known_hosts, key)]
    args += ["--no-input", "--format", "json", "--run-dir", str(run_dir)]
    run = Background(args, cli_env(tmp_path), tmp_path / "cli")
    try:
        act = KINDS[kind][2]
        if act is not None:
            run.wait_for(marker)
            time.sleep(0.2)  # the probe is well under way: output flowing, the sibling done
            act(host)
        return run.finish(60), run_dir
    finally:
        run.kill()
        if kind == "linkdown":
            link_up([host])


# --------------------------------------------------------------------------------------------
# a guided run


def test_sshd_killed_in_the_middle_of_a_stage_is_recorded_and_the_walk_goes_on(
    ssh_host: HostFactory, known_hosts: Path, client_key: Any, tmp_path: Path
) -> None:
    host = ssh_host("fault-killed")
    done, run_dir = _walk_with_fault(host, "killed", tmp_path, known_hosts, client_key.private_path)
    assert done.rc == 0, done.stderr
    verdict = check_run_dir(run_dir)
    assert done.json()["stages"] == verdict["stages"]
    by_id = stages(verdict)
    assert by_id["before"]["status"] == "ok"
    # not "exit -1": the command never finished, its connection died under it
    assert by_id["work"]["status"] == "error"
    assert by_id["work"]["not_collected"]["work.txt"] == (
        "connection lost before the command finished"
    )
    assert probe_events(run_dir)["work.txt"]["exited"] is None
    assert by_id["after"]["status"] == "error"
    assert by_id["after"]["not_collected"]["after.txt"].startswith("could not start")
    # what could not be read is not called healthy
    assert verdict["root_cause"] == "inconclusive"
    assert (run_dir / "bundle" / "work.txt").read_text() == "started\n"  # nothing it said lost


@pytest.mark.parametrize("kind", ["reset", "linkdown"])
def test_a_connection_dropped_during_a_long_output_keeps_what_came_and_the_walk_goes_on(
    ssh_host: HostFactory, known_hosts: Path, client_key: Any, tmp_path: Path, kind: str
) -> None:
    host = ssh_host(f"fault-{kind}")
    done, run_dir = _walk_with_fault(host, kind, tmp_path, known_hosts, client_key.private_path)
    assert done.rc == 0, done.stderr
    verdict = check_run_dir(run_dir)
    by_id = stages(verdict)
    failure = by_id["work"]["not_collected"]["work.txt"]
    if kind == "reset":
        assert failure == "connection lost before the command finished"
    else:  # a silent peer: the probe's own timeout ends the wait
        assert failure.startswith("timed out after"), failure
    assert by_id["work"]["status"] == "error"
    assert by_id["after"]["status"] == "error"
    assert by_id["after"]["not_collected"]["after.txt"].startswith("could not start")
    kept = (run_dir / "bundle" / "work.txt").read_text()
    assert kept.count("a line of a long output\n") >= 5, kept[:200]
    assert verdict["root_cause"] == "inconclusive"
    assert done.wall_s < 30


def test_a_host_that_accepts_tcp_and_never_speaks_is_a_one_line_error(
    ssh_host: HostFactory, known_hosts: Path, client_key: Any, tmp_path: Path
) -> None:
    host = ssh_host("fault-silent")
    silent_listener(host)
    run_dir = tmp_path / "run"
    args = ["run", str(FAULT_WALK), "--run-dir", str(run_dir)]
    args += _ssh_args(host, known_hosts, client_key.private_path, SILENT_PORT)
    done = run_now(args, cli_env(tmp_path), tmp_path / "cli")
    assert done.rc == 3
    line = one_line_error(done)
    assert f"{host.address}:{SILENT_PORT}" in line
    assert f"timed out after {CONNECT_TIMEOUT}s waiting for an SSH banner" in line
    assert done.wall_s < CONNECT_TIMEOUT + 8
    assert not run_dir.exists()  # nothing half-made


def test_an_unresolvable_host_name_is_a_one_line_error_and_no_lookup_leaves_the_machine(
    known_hosts: Path, client_key: Any, tmp_path: Path, private_resolver: list[str]
) -> None:
    run_dir = tmp_path / "run"
    args = ["run", str(FAULT_WALK), "--target", f"ssh://root@{UNRESOLVABLE}"]
    args += ["--known-hosts", str(known_hosts), "--identity", str(client_key.private_path)]
    args += ["--connect-timeout", str(CONNECT_TIMEOUT), "--run-dir", str(run_dir)]
    done = run_now(args, cli_env(tmp_path), tmp_path / "cli", prefix=private_resolver)
    assert done.rc == 3
    line = one_line_error(done)
    assert f"cannot resolve {UNRESOLVABLE}" in line, line
    assert not run_dir.exists()


def test_output_of_100_mb_and_output_without_end_are_bounded_and_the_walk_goes_on(
    ssh_host: HostFactory, known_hosts: Path, client_key: Any, tmp_path: Path
) -> None:
    host = ssh_host("fault-flood")
    done, run_dir = _walk_with_fault(host, "flood", tmp_path, known_hosts, client_key.private_path)
    assert done.rc == 0, done.stderr
    assert done.max_rss_mib < RUN_RSS_MIB, f"peak RSS {done.max_rss_mib:.0f} MiB"
    verdict = check_run_dir(run_dir)
    by_id = stages(verdict)
    # the 100 MB command finished: cut at the bound, exit 0, not a failure
    assert "work.txt" not in by_id["work"]["not_collected"]
    assert by_id["work"]["not_collected"]["more.txt"].startswith("timed out after")
    assert by_id["after"]["status"] == "ok"
    events = probe_events(run_dir)
    assert events["work.txt"]["exited"] == 0 and events["work.txt"]["truncated"]
    assert events["more.txt"]["exited"] is None and events["more.txt"]["truncated"]
    state = json.loads((run_dir / "state.json").read_text())
    assert all(p["truncated"] for p in state["records"]["work"]["probes"])
    bundle = run_dir / "bundle"
    for name in ("work.txt", "more.txt"):
        assert (bundle / name).stat().st_size == MAX_CAPTURE_BYTES
        assert TRUNCATED_NOTE in (bundle / f"{name}.err").read_text()  # a replay knows
    assert (bundle / "work.txt").read_bytes()[:8] == b"xxxxxxxx"
    # the endless command was stopped on the host, not left printing to nobody
    until(lambda: "yes" not in _commands(host), 5, "the endless `yes` stopping")
    assert done.wall_s < 30


def _commands(host: TestHost) -> list[str]:
    names = []
    for pid in host.pids():
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return names


# --------------------------------------------------------------------------------------------
# a sweep through all of them at once

SWEPT_KINDS = {
    "fault-ok": "healthy",
    "fault-killed": "killed",
    "fault-reset": "reset",
    "fault-linkdown": "linkdown",
    "fault-flood": "flood",
}
SILENT_ENTRY = "fault-silent"
DEADLINE = 30


@dataclass
class Swept:
    done: Finished
    data: dict[str, Any]
    report: Path
    hosts: dict[str, tuple[TestHost, str]]

    def host(self, name: str) -> dict[str, Any]:
        return next(h for h in self.data["hosts"] if h["host"] == name)


@pytest.fixture(scope="module")
def swept(
    host_network: HostNetwork, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Swept]:
    work = tmp_path_factory.mktemp("faulty-fleet")
    factory = HostFactory(host_network)
    try:
        made = factory.many(list(SWEPT_KINDS))
        hosts = {h.name: (h, SWEPT_KINDS[h.name]) for h in made}
        markers = {name: dress(h, kind, work / "markers") for name, (h, kind) in hosts.items()}
        ok = hosts["fault-ok"][0]
        silent_listener(ok)
        extra = {
            SILENT_ENTRY: {"ansible_host": ok.address, "ansible_port": SILENT_PORT},
            UNRESOLVABLE: {},
        }
        data = fleet.inventory(host_network, hosts, host_network.known_hosts_path, extra=extra)
        common = data["all"]["vars"]["ansible_ssh_common_args"]
        data["all"]["vars"]["ansible_ssh_common_args"] = common.replace(
            "ConnectTimeout=10", f"ConnectTimeout={CONNECT_TIMEOUT}"
        )
        inventory = fleet.write_inventory(work / "inventory.yml", data)
        nsswitch = work / "nsswitch.conf"
        nsswitch.write_text("hosts: files\n")
        prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                  'mount --bind "$0" /etc/nsswitch.conf && exec "$@"', str(nsswitch)]  # fmt: skip
        report = work / "report"
        args = ["sweep", str(FAULT_WALK), "-i", str(inventory), "--forks", "8"]
        args += ["--timeout-per-host", str(DEADLINE), "--report", str(report)]
        args += ["--format", "json", "--keep-bundles"]
        sweep = Background(args, cli_env(work), work / "cli", prefix=prefix)
        try:
            pending = {
                name: (markers[name], KINDS[kind][2])
                for name, (_, kind) in hosts.items()
                if KINDS[kind][2] is not None
            }
            deadline = time.monotonic() + 60
            while pending and sweep.running() and time.monotonic() < deadline:
                for name, (marker, act) in list(pending.items()):
                    if marker.exists():
                        time.sleep(0.2)
                        assert act is not None
                        act(hosts[name][0])
                        del pending[name]
                time.sleep(0.01)
            done = sweep.finish(90)
        finally:
            sweep.kill()
            link_up(h for h, kind in hosts.values() if kind == "linkdown")
        assert not pending, f"faults never struck: {sorted(pending)}; {done.stderr[-2000:]}"
        assert done.rc in (0, 1, 3), done.stderr[-3000:]
        yield Swept(done, done.json(), report, hosts)
    finally:
        factory.remove_all()


def test_a_sweep_through_every_fault_records_each_host_and_finishes_in_time(
    swept: Swept,
) -> None:
    names = [h["host"] for h in swept.data["hosts"]]
    assert sorted(names) == sorted([*SWEPT_KINDS, SILENT_ENTRY, UNRESOLVABLE])
    assert swept.host("fault-ok")["status"] == "healthy"
    for name in ("fault-killed", "fault-reset", "fault-linkdown", "fault-flood"):
        host = swept.host(name)
        assert host["status"] == "inconclusive", host.get("error")
        assert host["verdict"]["node"] == name
        by_id = stages(host["verdict"])
        assert by_id["before"]["status"] == "ok" and by_id["work"]["status"] == "error", name
    reasons = {
        name: stages(swept.host(name)["verdict"])["work"]["not_collected"]
        for name in ("fault-killed", "fault-reset", "fault-linkdown", "fault-flood")
    }
    lost = "connection lost before the command finished"
    assert reasons["fault-killed"]["work.txt"] == lost
    assert reasons["fault-reset"]["work.txt"] == lost
    assert reasons["fault-linkdown"]["work.txt"].startswith("timed out after")
    assert set(reasons["fault-flood"]) == {"more.txt"}
    assert stages(swept.host("fault-flood")["verdict"])["after"]["status"] == "ok"
    silent = swept.host(SILENT_ENTRY)
    assert silent["status"] == "unreachable"
    assert "waiting for an SSH banner" in silent["error"]
    assert silent["duration_s"] < CONNECT_TIMEOUT + 3
    unresolved = swept.host(UNRESOLVABLE)
    assert unresolved["status"] == "unreachable"
    assert f"cannot resolve {UNRESOLVABLE}" in unresolved["error"]
    # inconclusive verdicts are findings: the nodes could not be cleared
    assert swept.done.rc == 1 and swept.data["exit_code"] == 1
    # each fault cost its own timeouts, in parallel, never a whole deadline
    assert swept.data["duration_s"] < DEADLINE - 5, swept.data["duration_s"]


def test_each_host_of_the_faulty_sweep_leaves_a_consistent_run_directory(swept: Swept) -> None:
    for name in SWEPT_KINDS:
        host = swept.host(name)
        run_dir = Path(host["run_dir"])
        assert run_dir.parent == swept.report / "hosts"
        verdict = check_run_dir(run_dir)
        assert verdict["stages"] == host["verdict"]["stages"], name
    flood = probe_events(swept.report / "hosts" / "fault-flood")
    assert flood["work.txt"]["truncated"] and flood["more.txt"]["truncated"]


def test_the_faulty_sweep_stays_within_bounded_memory(swept: Swept) -> None:
    assert swept.done.max_rss_mib < SWEEP_RSS_MIB, f"peak RSS {swept.done.max_rss_mib:.0f} MiB"


def test_every_report_of_the_faulty_sweep_lists_every_host(swept: Swept) -> None:
    names = [*SWEPT_KINDS, SILENT_ENTRY, UNRESOLVABLE]
    assert json.loads((swept.report / "sweep.json").read_text()) == swept.data
    markdown = (swept.report / "sweep.md").read_text()
    for name in names:
        assert name in markdown, name
    suite = ET.parse(swept.report / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert sorted(c.get("name") or "" for c in suite.findall("testcase")) == sorted(names)
    prom = (swept.report / "runbook.prom").read_text()
    assert 'runbook_sweep_hosts{status="unreachable"} 2' in prom
    assert 'runbook_sweep_hosts{status="inconclusive"} 4' in prom
