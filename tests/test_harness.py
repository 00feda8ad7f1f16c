"""The SSH test-host harness itself: every other SSH test trusts what is checked here.

Real sshd, real OpenSSH client and paramiko, real namespaces; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import paramiko
import pytest

from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import (
    LOCK_DIR,
    ClientKey,
    HarnessError,
    HostNetwork,
    TestHost,
    cleanup_stale,
    missing_prerequisites,
)

pytestmark = pytest.mark.ssh

REPO = Path(__file__).resolve().parent.parent


#: OpenSSH 9.x's default key exchange (sntrup761x25519) costs ~130 ms of CPU per login on a
#: slow 2-core machine; what these tests check does not depend on it
FAST_KEX = ("-o", "KexAlgorithms=curve25519-sha256")


def _ssh(
    net: HostNetwork, host: TestHost, command: str, *options: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        net.ssh_argv(host, command, options=(*options, *FAST_KEX)),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait a moment for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _netns_names() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def _link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def test_this_machine_has_what_the_hosts_need() -> None:
    assert missing_prerequisites() == []


def test_a_missing_sshd_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="no OpenSSH server at /nonexistent/sshd"):
        HostNetwork(tmp_path, sshd="/nonexistent/sshd")


def test_two_hosts_have_their_own_address_and_hostname(
    host_network: HostNetwork, ssh_host: HostFactory
) -> None:
    h1, h2 = ssh_host("h1"), ssh_host("h2")
    assert h1.address != h2.address and h1.netns != h2.netns
    for host in (h1, h2):
        result = _ssh(host_network, host, "hostname")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == host.name
        inside = host.exec(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], check=True)
        assert f" {host.address}/" in inside.stdout


def test_a_shim_is_first_on_path_of_its_own_host_only(
    host_network: HostNetwork, ssh_host: HostFactory
) -> None:
    h1, h2 = ssh_host("h1"), ssh_host("h2")
    shim = h1.write_shim("nvidia-smi", "#!/bin/sh\necho 'shim of h1'\n")
    result = _ssh(host_network, h1, 'echo "$PATH"; command -v nvidia-smi; nvidia-smi')
    assert result.returncode == 0, result.stderr
    path, found, output = result.stdout.splitlines()
    assert path.split(":")[0] == str(h1.shim_dir)
    assert (found, output) == (str(shim), "shim of h1")
    # a login shell runs /etc/profile, which resets PATH: the host's profile puts the shim back
    login = _ssh(host_network, h1, "bash -lc 'echo \"$PATH\"'")
    assert login.stdout.split(":")[0] == str(h1.shim_dir), login.stdout + login.stderr

    other = _ssh(host_network, h2, 'echo "$PATH"; command -v nvidia-smi || echo none')
    assert other.stdout.split(":")[0] == str(h2.shim_dir)
    assert str(h1.shim_dir) not in other.stdout


def test_paramiko_logs_in_with_the_client_key_trusting_only_known_hosts(
    ssh_host: HostFactory, known_hosts: Path, client_key: ClientKey
) -> None:
    host = ssh_host("h1")
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        host.address,
        port=host.port,
        username="root",
        key_filename=str(client_key.private_path),
        allow_agent=False,
        look_for_keys=False,
        timeout=10,
    )
    try:
        _, stdout, _ = client.exec_command("hostname; id -u")
        assert stdout.read().decode().split() == ["h1", "0"]
        assert stdout.channel.recv_exit_status() == 0
    finally:
        client.close()


def test_reject_policy_refuses_a_host_missing_from_known_hosts(
    host_network: HostNetwork, ssh_host: HostFactory, tmp_path: Path
) -> None:
    host = ssh_host("h1")
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        host_network.paramiko_client(host, known_hosts=empty)


def test_host_key_line_and_fingerprint_are_what_openssh_says(
    ssh_host: HostFactory, known_hosts: Path
) -> None:
    host = ssh_host("h1")
    line = host.host_key_line()
    assert line.startswith(f"{host.address} ssh-ed25519 AAAA")
    assert line + "\n" in known_hosts.read_text()
    printed = subprocess.run(
        ["ssh-keygen", "-lf", str(host.host_key_pub_path)], capture_output=True, text=True
    )
    assert printed.stdout.split()[1] == host.host_key_fingerprint()
    assert host.host_key_fingerprint().startswith("SHA256:")


def test_a_host_on_another_port_is_listed_as_addr_port(
    host_network: HostNetwork, ssh_host: HostFactory
) -> None:
    host = ssh_host("p2222", port=2222)
    assert host.host_key_line().startswith(f"[{host.address}]:2222 ssh-ed25519 ")
    result = _ssh(host_network, host, "hostname")
    assert result.stdout.strip() == "p2222", result.stderr
    with host_network.paramiko_client(host) as client:
        _, stdout, _ = client.exec_command("hostname")
        assert stdout.read() == b"p2222\n"


def test_regenerated_host_key_mismatches_the_old_known_hosts(
    host_network: HostNetwork, ssh_host: HostFactory, known_hosts: Path, tmp_path: Path
) -> None:
    host = ssh_host("h1")
    old = tmp_path / "old_known_hosts"
    old.write_text(known_hosts.read_text())
    old_line, old_fp = host.host_key_line(), host.host_key_fingerprint()
    host_network.paramiko_client(host, known_hosts=old).close()

    host.regenerate_host_key()

    assert host.host_key_fingerprint() != old_fp
    assert host.host_key_line() in known_hosts.read_text()
    assert old_line not in known_hosts.read_text()
    with pytest.raises(paramiko.BadHostKeyException):
        host_network.paramiko_client(host, known_hosts=old)
    host_network.paramiko_client(host).close()
    openssh = _ssh(host_network, host, "true", "-o", f"UserKnownHostsFile={old}")
    assert openssh.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in openssh.stderr


def test_stop_sshd_refuses_new_logins_and_keeps_sessions_unless_told(
    host_network: HostNetwork, ssh_host: HostFactory
) -> None:
    host = ssh_host("h1")
    client = host_network.paramiko_client(host)
    try:
        host.stop_sshd()
        assert host.sshd_pid is None
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host.address, host.port), timeout=5).close()
        _, stdout, _ = client.exec_command("echo still here")
        assert stdout.read() == b"still here\n"

        host.start_sshd()
        assert _ssh(host_network, host, "hostname").stdout.strip() == "h1"

        host.stop_sshd(kill_sessions=True)
        assert host.pids() == []
        transport = client.get_transport()
        deadline = time.monotonic() + 5
        while transport is not None and transport.is_active() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert transport is None or not transport.is_active()
    finally:
        client.close()
    host.start_sshd()
    assert _ssh(host_network, host, "hostname").stdout.strip() == "h1"


def test_remove_host_kills_its_processes_and_deletes_its_namespace(
    host_network: HostNetwork, ssh_host: HostFactory, known_hosts: Path
) -> None:
    host = ssh_host("gone")
    started = _ssh(host_network, host, "nohup sleep 347 >/dev/null 2>&1 & echo $!")
    sleeper = int(started.stdout)
    session = host_network.paramiko_client(host)  # an open session pins a netns if left alive
    try:
        found = host.exec(["pgrep", "-f", "sleep 347"])
        assert str(sleeper) in found.stdout.split()
        assert sleeper in host.pids()
        sshd = host.sshd_pid
        assert sshd is not None

        host_network.remove_host(host)

        assert host.netns not in _netns_names()
        assert not _link_exists(host.veth)
        deadline = time.monotonic() + 5
        while (_running(sleeper) or _running(sshd)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _running(sleeper) and not _running(sshd)
        left = subprocess.run(["pgrep", "-f", str(host.config_path)], capture_output=True)
        assert left.stdout == b"", "an sshd of the removed host is still running"
        assert not host.dir.exists()
        assert host.address not in known_hosts.read_text()
        assert "gone" not in host_network.hosts
    finally:
        session.close()
    host_network.remove_host(host)  # again (the fixture will too): nothing happens


def test_unused_address_is_on_the_bridge_and_nobody_answers(host_network: HostNetwork) -> None:
    address = host_network.unused_address()
    route = subprocess.run(["ip", "route", "get", address], capture_output=True, text=True)
    assert f"dev {host_network.bridge} " in route.stdout
    with pytest.raises(OSError):
        socket.create_connection((address, 22), timeout=0.2).close()


def test_many_hosts_come_up_together(host_network: HostNetwork, ssh_host: HostFactory) -> None:
    started = time.monotonic()
    hosts = ssh_host.many([f"m{i}" for i in range(8)])
    elapsed = time.monotonic() - started
    assert len({h.address for h in hosts}) == 8
    for host in hosts[:: len(hosts) - 1]:
        assert _ssh(host_network, host, "hostname").stdout.strip() == host.name
    assert elapsed < 5, f"8 hosts took {elapsed:.1f} s"


def test_close_removes_hosts_bridge_files_and_lock(tmp_path: Path) -> None:
    # a second network in this process: its own token letter, bridge and subnet
    net = HostNetwork(tmp_path)
    host = net.add_host("solo")
    sleeper = host.spawn(["sleep", "348"])
    bridge, netns, own_dir, lock = net.bridge, host.netns, net.dir, LOCK_DIR / f"{net.token}.lock"
    assert lock.exists() and own_dir.is_dir() and _link_exists(bridge)

    net.close()

    assert sleeper.returncode is not None  # killed and reaped
    assert netns not in _netns_names()
    assert not _link_exists(bridge) and not _link_exists(host.veth)
    assert not own_dir.exists() and list(tmp_path.iterdir()) == []
    assert not lock.exists()
    net.close()  # idempotent
    with pytest.raises(HarnessError, match="closed"):
        net.add_host("again")


def test_a_host_address_that_routes_elsewhere_is_refused(tmp_path: Path) -> None:
    with HostNetwork(tmp_path) as net:
        first = str(net.subnet.network_address + 2)  # where the next add_host would go
        route = ["ip", "route", "add", f"{first}/32", "dev", "lo"]
        subprocess.run(route, check=True)
        try:
            with pytest.raises(HarnessError, match="goes via 'lo'"):
                net.add_host("elsewhere")
        finally:
            subprocess.run(["ip", "route", "del", f"{first}/32", "dev", "lo"], check=True)
        assert not any(name.endswith("-elsewhere") for name in _netns_names())
        assert net.hosts == {}
        assert net.add_host("here").address == first  # the slot was given back


def test_leftovers_of_a_dead_run_are_swept_and_live_ones_kept(
    host_network: HostNetwork, tmp_path: Path
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    token = f"{gone.pid}z"
    netns, veth, bridge = f"rbk-{token}-x", f"rbv{token}2", f"rbkbr{token}"
    workdir = tmp_path / f"rbk-{token}"
    workdir.mkdir()
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    lock = LOCK_DIR / f"{token}.lock"
    lock.write_text(json.dumps({"pid": gone.pid, "dir": str(workdir)}))
    commands = f"netns add {netns}\nlink add {veth} type veth peer name eth0 netns {netns}\n"
    commands += f"link add {bridge} type bridge\n"
    subprocess.run(["ip", "-b", "-"], input=commands, text=True, check=True)
    orphan = subprocess.Popen(["ip", "netns", "exec", netns, "sleep", "349"])
    deadline = time.monotonic() + 5
    while (
        str(orphan.pid)
        not in subprocess.run(
            ["ip", "netns", "pids", netns], capture_output=True, text=True
        ).stdout.split()
    ):
        assert time.monotonic() < deadline, "the orphan never entered its namespace"
        time.sleep(0.01)
    try:
        removed = cleanup_stale()
    finally:
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
    assert orphan.wait(timeout=5) == -signal.SIGKILL
    assert {netns, bridge} <= set(removed)
    assert netns not in _netns_names()
    assert not _link_exists(veth) and not _link_exists(bridge)
    assert not workdir.exists() and not lock.exists()
    # the live session network is untouched
    assert _link_exists(host_network.bridge) and not host_network.closed


def test_sigterm_tears_down_a_script_network(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from tests.hosts.harness import HostNetwork
        net = HostNetwork(Path({str(tmp_path)!r}))
        host = net.add_host("sig")
        print(net.bridge, host.netns, host.sshd_pid, flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        bridge, netns, sshd = line.split()
        assert _link_exists(bridge) and netns in _netns_names() and _running(int(sshd))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == -signal.SIGTERM  # cleanup first, then the signal kills
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert not _link_exists(bridge)
    assert netns not in _netns_names()
    assert not _running(int(sshd))
    assert list(tmp_path.iterdir()) == []


def test_the_harness_runs_without_pytest_as_a_context_manager(tmp_path: Path) -> None:
    with HostNetwork(tmp_path) as net:
        host = net.add_host("script")
        result = _ssh(net, host, "hostname")
        assert result.stdout.strip() == "script", result.stderr
        assert os.path.exists(net.ssh_config_path)
        aliased = subprocess.run(
            ["ssh", "-F", str(net.ssh_config_path), *FAST_KEX, "script", "hostname"],
            capture_output=True,
            text=True,
        )
        assert aliased.stdout.strip() == "script", aliased.stderr
    assert net.closed and list(tmp_path.iterdir()) == []


def test_a_removed_hosts_address_is_not_handed_out_at_once_and_its_arp_entry_goes(
    host_network: HostNetwork,
) -> None:
    """A new host on a just-freed address would be unreachable until the bridge's neighbour
    entry for the old veth's MAC went stale (~30 s): addresses go round the range, and the
    entry is flushed when a host is removed."""
    old = host_network.add_host("arp-old")
    probe = subprocess.run(host_network.ssh_argv(old, "true"), capture_output=True, timeout=30)
    assert probe.returncode == 0
    neigh = ["ip", "neigh", "show", "to", old.address, "dev", host_network.bridge]
    assert subprocess.run(neigh, capture_output=True, text=True).stdout.strip()
    host_network.remove_host(old)
    assert subprocess.run(neigh, capture_output=True, text=True).stdout.strip() == ""
    new = host_network.add_host("arp-new")
    try:
        assert new.address != old.address
        done = subprocess.run(host_network.ssh_argv(new, "hostname"), capture_output=True,
                              text=True, timeout=30)
        assert done.stdout.strip() == "arp-new"
    finally:
        host_network.remove_host(new)
