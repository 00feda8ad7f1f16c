"""The engine end to end over real OpenSSH test hosts (network namespaces, real sshd).

GPU tools on the hosts are scenario shims that print real-format output (this machine has no
GPU); everything else — SSH, the shell, the processes and their timeouts — is real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.conftest import RUNBOOKS

pytestmark = pytest.mark.ssh

HEALTHY_L = """#!/bin/sh
[ "$1" = "-L" ] || exit 2
echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c1e3b2a-9d8f-4e7a-b6c5-d4e3f2a1b0c9)"
echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d)"
"""
FALLEN_L = """#!/bin/sh
echo "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error" >&2
exit 15
"""
FALLEN_DMESG = """#!/bin/sh
echo "[Wed Mar  4 10:11:58 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, \
GPU has fallen off the bus."
echo "[Wed Mar  4 10:11:58 2026] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
"""
LSPCI = """#!/bin/sh
echo "3b:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)"
"""
QUIET_DMESG = """#!/bin/sh
echo "[Wed Mar  4 06:00:05 2026] Linux version 6.1.0-18-amd64"
"""


def _ssh_args(host, known_hosts: Path, key) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        "--target", f"ssh://root@{host.address}:{host.port}",
        "--known-hosts", str(known_hosts),
        "--identity", str(key.private_path),
        "--connect-timeout", "5",
    ]  # fmt: skip


def _accepted_logins(host) -> int:  # type: ignore[no-untyped-def]
    log = Path(host.dir) / "sshd.log"
    return log.read_text(errors="replace").count("Accepted publickey") if log.exists() else 0


@pytest.fixture
def gpu_hosts(ssh_host):  # type: ignore[no-untyped-def]
    healthy = ssh_host("healthy")
    healthy.write_shim("nvidia-smi", HEALTHY_L)
    healthy.write_shim("dmesg", QUIET_DMESG)
    broken = ssh_host("broken")
    broken.write_shim("nvidia-smi", FALLEN_L)
    broken.write_shim("dmesg", FALLEN_DMESG)
    broken.write_shim("lspci", LSPCI)
    return healthy, broken


def test_a_guided_run_branches_differently_on_two_hosts(
    gpu_hosts, known_hosts, client_key, cli
) -> None:  # type: ignore[no-untyped-def]
    healthy, broken = gpu_hosts
    runbook = str(RUNBOOKS / "gpu-check.yaml")

    ok = cli("run", runbook, *_ssh_args(healthy, known_hosts, client_key), "--no-input")
    assert ok.rc == 0, ok.stderr
    assert "GPU identity" in ok.stdout and "nvidia-smi -L" in ok.stdout
    # the node is named as the target was typed (two targets never share a name)
    named = f"{healthy.address}:{healthy.port}"
    assert "→ memory" in ok.stdout and f"Verdict for {named}: healthy" in ok.stdout
    assert "PCIe devices" not in ok.stdout  # the hardware stage is off this branch

    bad = cli("run", runbook, *_ssh_args(broken, known_hosts, client_key), "--format", "json")
    assert bad.rc == 0, bad.stderr
    verdict = bad.json()
    assert verdict["node"] == f"{broken.address}:{broken.port}"
    assert verdict["root_cause"] == "gpu-hardware"
    statuses = {s["id"]: s["status"] for s in verdict["stages"]}
    assert statuses == {"gpu": "anomaly", "hardware": "ok", "memory": "skipped"}
    assert [p["kind"] for p in verdict["proposals"]] == ["node-drain"]
    # the guided walk went to stderr in json mode and says why it branched
    assert "rule 1" in bad.stderr and "routes to hardware" in bad.stderr


def test_one_connection_serves_every_command_of_a_run(
    ssh_host, known_hosts, client_key, cli
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("reuse")
    before = _accepted_logins(host)
    result = cli(
        "run",
        str(RUNBOOKS / "ten-commands.yaml"),
        *_ssh_args(host, known_hosts, client_key),
        "--format",
        "json",
    )
    assert result.rc == 0, result.stderr
    verdict = result.json()
    assert all(s["status"] == "ok" for s in verdict["stages"])
    time.sleep(0.2)  # sshd writes its log line asynchronously
    assert _accepted_logins(host) - before == 1


def test_a_bundle_collected_over_ssh_replays_to_the_same_verdict(
    gpu_hosts, known_hosts, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    _, broken = gpu_hosts
    runbook = str(RUNBOOKS / "gpu-check.yaml")
    out = tmp_path / "bundle"
    collected = cli(
        "collect",
        "--runbook",
        runbook,
        "--output",
        str(out),
        *_ssh_args(broken, known_hosts, client_key),
    )
    assert collected.rc == 0, collected.stderr
    assert (out / "bundle.yaml").is_file() and (
        out / "nvidia-smi-L.txt.rc"
    ).read_text().strip() == "15"
    assert "fallen off the bus" in (out / "dmesg.txt").read_text()

    live = cli(
        "run", runbook, *_ssh_args(broken, known_hosts, client_key), "--format", "json"
    ).json()
    replayed = cli("run", runbook, "--target", f"replay://{out}", "--format", "json").json()
    for key in ("node", "root_cause", "confidence", "chain", "ruled_out", "proposals"):
        assert replayed[key] == live[key], key
    assert [(s["id"], s["status"]) for s in replayed["stages"]] == [
        (s["id"], s["status"]) for s in live["stages"]
    ]
    analyzed = cli("analyze", str(out), "--runbook", runbook, "--format", "json").json()
    assert analyzed["root_cause"] == live["root_cause"]


def test_a_hostile_variable_reaches_the_remote_shell_as_one_inert_word(
    ssh_host, known_hosts, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("inject")
    marker = tmp_path / "pwned"
    value = f"$(touch {marker}); rm -rf {tmp_path}/victim; `touch {marker}`"
    victim = tmp_path / "victim"
    victim.mkdir()
    result = cli(
        "run",
        str(RUNBOOKS / "echo-var.yaml"),
        *_ssh_args(host, known_hosts, client_key),
        "--var",
        f"value={value}",
        "--format",
        "json",
    )
    assert result.rc == 0, result.stderr
    facts = {s["id"]: s["facts"] for s in result.json()["stages"]}
    assert facts["echo"]["text"]["echo.txt"]["stdout"] == value
    assert not marker.exists() and victim.is_dir()


def test_a_command_past_its_timeout_is_killed_on_the_host_and_the_walk_goes_on(
    ssh_host, known_hosts, client_key, cli
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("hang")
    started = time.monotonic()
    result = cli(
        "run",
        str(RUNBOOKS / "echo-var.yaml"),
        *_ssh_args(host, known_hosts, client_key),
        "--var",
        "value=x",
        "--var",
        "sleep_s=3173",
        "--format",
        "json",
    )
    assert result.rc == 0, result.stderr
    assert time.monotonic() - started < 20
    stages = {s["id"]: s for s in result.json()["stages"]}
    assert stages["hang"]["status"] == "error"
    assert "timed out" in stages["hang"]["not_collected"]["hang.txt"]
    assert stages["after"]["status"] == "ok"
    leftover = subprocess.run(["pgrep", "-f", "sleep 3173"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", f"remote command survived: {leftover.stdout}"


def test_nsenter_reads_a_process_namespaced_view_over_ssh(
    ssh_host, known_hosts, client_key, cli, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    host = ssh_host("nsview")
    fake = tmp_path / "hostname"
    fake.write_text("namespaced-view\n")
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount --bind {fake} /etc/hostname && echo ready && exec sleep 300"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        runbook = str(RUNBOOKS / "hostname.yaml")
        args = _ssh_args(host, known_hosts, client_key)
        inside = cli("run", runbook, *args, f"--nsenter={holder.pid}", "--format", "json")
        outside = cli("run", runbook, *args, "--format", "json")
        assert inside.rc == 0 and outside.rc == 0, inside.stderr + outside.stderr
        read = lambda r: r.json()["stages"][0]["facts"]["text"]["hostname-file.txt"]["stdout"]  # noqa: E731
        assert read(inside) == "namespaced-view\n"
        assert read(outside) != "namespaced-view\n"
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_jump_host_carries_the_connection_to_the_target(
    ssh_host, known_hosts, client_key, cli
) -> None:  # type: ignore[no-untyped-def]
    bastion, inner = ssh_host("bastion"), ssh_host("inner")
    args = _ssh_args(inner, known_hosts, client_key)
    jump = f"root@{bastion.address}:{bastion.port}"
    result = cli(
        "run", str(RUNBOOKS / "ten-commands.yaml"), *args, "--jump", jump, "--format", "json"
    )
    assert result.rc == 0, result.stderr
    assert result.json()["node"] == f"{inner.address}:{inner.port}"
    time.sleep(0.2)
    log = (Path(inner.dir) / "sshd.log").read_text()
    assert f"Accepted publickey for root from {bastion.address} port" in log


def test_output_sent_after_the_exit_status_is_not_lost(ssh_host, known_hosts, client_key) -> None:  # type: ignore[no-untyped-def]
    # sshd reports exit-status when it reaps the command; output still in flight (here from a
    # background child that writes after its parent exited) arrives after it, before EOF
    from runbook.transports.address import SSHAddress
    from runbook.transports.base import Probe
    from runbook.transports.ssh import SSHOptions, SSHTransport

    host = ssh_host("late")
    transport = SSHTransport(
        SSHAddress(host.address, host.port),
        SSHOptions(known_hosts=known_hosts, identities=(client_key.private_path,)),
    )
    try:
        result = transport.run(Probe("late.txt", "(sleep 0.3; echo late) & echo early", 10))
    finally:
        transport.close()
    assert result.exited == 0 and result.stdout == "early\nlate\n", result


def test_a_probe_timed_out_before_its_process_group_line_never_runs_on(
    ssh_host, known_hosts, client_key, cli
) -> None:  # type: ignore[no-untyped-def]
    """A slow login (here a ForceCommand wrapper that sleeps before running the command, as
    site login wrappers and slow PAM stacks do) holds the probe back past its 1 s timeout,
    before it could say its process group. The wrapper ignores SIGPIPE (as a Python wrapper
    does, and its children inherit), so the command still starts after the channel closed:
    it is cancelled by its token — kept from starting, or killed by the RBK_PROBE in its
    environment — instead of running on for good."""
    host = ssh_host(
        "slowlogin",
        extra_sshd_config=(
            "ForceCommand trap '' PIPE; sleep 2; exec /bin/sh -c \"$SSH_ORIGINAL_COMMAND\""
        ),
    )
    result = cli(
        "run", str(RUNBOOKS / "echo-var.yaml"), *_ssh_args(host, known_hosts, client_key),
        "--var", "value=x", "--var", "sleep_s=3187", "--format", "json", timeout=120,
    )  # fmt: skip
    assert result.rc == 0, result.stderr
    stages = {s["id"]: s for s in result.json()["stages"]}
    assert "timed out" in stages["hang"]["not_collected"]["hang.txt"]
    assert stages["after"]["status"] == "ok"
    deadline = time.monotonic() + 10  # the held-back command would have started by now
    while time.monotonic() < deadline:
        time.sleep(0.5)
        leftover = subprocess.run(["pgrep", "-f", "sleep 3187"], capture_output=True, text=True)
        assert leftover.stdout.strip() == "", f"remote command survived: {leftover.stdout}"


def test_every_connection_sends_its_packets_without_waiting_on_nagle(
    ssh_host, known_hosts, client_key
) -> None:  # type: ignore[no-untyped-def]
    """TCP_NODELAY on the target's connection and on a jump host's: without it each channel a
    probe opens waits on a delayed acknowledgement (about 40 ms; docs/performance.md)."""
    import socket

    from runbook.transports.address import SSHAddress
    from runbook.transports.base import Probe
    from runbook.transports.ssh import SSHOptions, SSHTransport

    bastion, inner = ssh_host("bastion"), ssh_host("inner")
    options = SSHOptions(known_hosts=known_hosts, identities=(client_key.private_path,))

    def nodelay(client) -> int:  # type: ignore[no-untyped-def]
        sock = client.get_transport().sock
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)

    direct = SSHTransport(SSHAddress(inner.address, inner.port), options)
    try:
        assert nodelay(direct._client) != 0
        assert direct.run(Probe("h.txt", "hostname", 10)).stdout.strip() == "inner"
    finally:
        direct.close()
    jumped = SSHTransport(
        SSHAddress(inner.address, inner.port),
        SSHOptions(
            known_hosts=known_hosts,
            identities=(client_key.private_path,),
            jump=SSHAddress(bastion.address, bastion.port),
        ),
    )
    try:
        assert nodelay(jumped._hops[0]) != 0  # the hop's TCP connection
        # the target's "socket" is a channel of the hop's connection: nothing to set, and
        # the connection through it still works
        assert not isinstance(jumped._client.get_transport().sock, socket.socket)
        assert jumped.run(Probe("h.txt", "hostname", 10)).stdout.strip() == "inner"
    finally:
        jumped.close()
