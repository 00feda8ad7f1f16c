"""Live collection that evidence cannot forge (security round 3, item 6).

A job writes the logs a multi-file probe reads (`app/*.log`, NCCL's `nccl.*.log` in the
world-writable /tmp by default). Each attack here is planted on a real OpenSSH test host
(tests/hosts/) and the shipped runbook is run against it with the real CLI, as on-call would:

* a job log holding `==> …/rank-0.log <==` and `==> …/rank-1.log.rc <==` lines (the old
  `tail -v` headers): both ranks' real errors must still reach the verdict, the bundle must
  hold each file as it is on the node, and no file of the bundle may be another's;
* a link to a root-only file, placed by the job's own user (`nobody`, a real other uid) in its
  log directory and in a sticky world-writable directory (this machine has
  fs.protected_symlinks=0, where root follows it): its content must reach no file of the run,
  and the bundle must say the link was not read;
* a FIFO among the logs: the probe returns at once, the other logs are kept, the FIFO noted;
* a login that prints a banner (root's ~/.bashrc on the host, which bash reads for every
  command sshd runs): it must reach no evidence, neither `hostname.txt` nor the first file.

The token that frames the files travels on the probe's standard input: the last test starts a
framed probe through each transport (ssh alone and batched, local, nsenter, kubectl exec) and checks
that the token never appears in a command line anyone on the node could read, while the probe
still gets it. `kubectl` there is a recorded double (no Kubernetes API here): a script that
does what `kubectl exec [-i] … -- ARGV` does with its input and runs ARGV on this machine.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runbook.transports import framing
from runbook.transports.address import SSHAddress
from runbook.transports.base import Probe
from runbook.transports.local import LocalTransport
from runbook.transports.nsenter import KubectlTransport, NsenterTransport
from runbook.transports.ssh import SSHOptions, SSHTransport
from tests.hardening.other_user import OtherUser, another_user
from tests.hardening.runs import Finished, run_now, stages
from tests.hosts.harness import TestHost
from tests.integration.conftest import cli_env

pytestmark = pytest.mark.ssh

T = "2026-03-04T10:3"
RANK0 = (
    f"{T}0:00.100Z [rank0] INFO init_process_group(nccl)\n"
    f"{T}1:00.000Z [rank0] ERROR RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
)
RANK1 = (
    f"{T}0:00.200Z [rank1] INFO init_process_group(nccl)\n"
    f"{T}2:00.000Z [rank1] ERROR torch.distributed.DistBackendError: NCCL error: unhandled "
    "system error\n"
)
#: the run's wall time a prompt walk stays under (the app-error stage's probes time out at 30 s)
PROMPT_S = 20.0


@pytest.fixture
def other() -> Iterator[OtherUser]:
    yield from another_user()


def _node_dirs(root: Path) -> dict[str, Path]:
    dirs = {name: root / name for name in ("app", "nccl", "tests")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    return dirs


def _diagnose(
    host: TestHost, known_hosts: Path, key: Path, work: Path, dirs: dict[str, Path]
) -> tuple[Finished, dict[str, Any], Path]:
    """`runbook run nccl-init-failure` over SSH against `host`, its logs in `dirs`."""
    run_dir = work / "run"
    args = [
        "run", "nccl-init-failure", "--target", f"ssh://root@{host.address}:{host.port}",
        "--known-hosts", str(known_hosts), "--identity", str(key),
        "--var", f"app_log_dir={dirs['app']}", "--var", f"nccl_log_dir={dirs['nccl']}",
        "--var", f"nccl_tests_dir={dirs['tests']}",
        "--run-dir", str(run_dir), "--format", "json", "--no-input",
    ]  # fmt: skip
    done = run_now(args, cli_env(work), work / "cli", timeout=120)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    return done, done.json(), run_dir


def _first_errors(verdict: dict[str, Any]) -> dict[int, str]:
    applog = stages(verdict)["app-error"]["facts"]["applog"]
    return {r["rank"]: r["first_error"]["text"] for r in applog["ranks"] if r.get("first_error")}


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_forged_header_in_a_job_log_takes_no_ranks_place_and_hides_no_error(
    ssh_host: Any, known_hosts: Path, client_key: Any, tmp_path: Path
) -> None:
    host = ssh_host("forge")
    dirs = _node_dirs(tmp_path / "node")
    app = dirs["app"]
    # the launcher's log (sorted before the ranks') echoes text that looks like tail's headers:
    # rank 0 and rank 1 "fine", rank 1's exit status 1
    forged = (
        f"{T}0:00.000Z launcher INFO starting 2 ranks\n"
        f"==> {app}/rank-0.log <==\n{T}0:00.100Z [rank0] INFO step 1 loss 2.31\n\n"
        f"==> {app}/rank-1.log <==\n{T}0:00.200Z [rank1] INFO step 1 loss 2.30\n\n"
        f"==> {app}/rank-1.log.rc <==\n1\n"
    )
    originals = {"launcher.log": forged, "rank-0.log": RANK0, "rank-1.log": RANK1}
    for name, text in originals.items():
        (app / name).write_text(text)

    done, verdict, run_dir = _diagnose(host, known_hosts, client_key.private_path, tmp_path, dirs)
    assert done.rc in (0, 1), done.stderr
    first = _first_errors(verdict)
    assert "CUDA out of memory" in first.get(0, ""), first
    assert "unhandled system error" in first.get(1, ""), first
    assert verdict["root_cause"] == "gpu-memory-oom", verdict["root_cause"]
    # the bundle holds each file as the node has it, its status its own
    bundle = run_dir / "bundle" / "app"
    for name, text in originals.items():
        assert (bundle / name).read_text() == text, name
        assert (bundle / f"{name}.rc").read_text() == "0\n", name
    assert sorted(p.name for p in bundle.iterdir() if not p.name.endswith((".rc", ".err"))) == [
        "launcher.log", "rank-0.log", "rank-1.log",
    ]  # fmt: skip
    # and the bundle analysed again says the same
    again = subprocess.run(
        [sys.executable, "-m", "runbook", "analyze", str(run_dir / "bundle"), "--format", "json"],
        capture_output=True, text=True, env=cli_env(tmp_path), timeout=120,
    )  # fmt: skip
    assert again.returncode in (0, 1), again.stderr
    assert _first_errors(json.loads(again.stdout)) == first


def test_a_link_to_a_root_only_file_among_the_logs_is_not_followed_and_is_noted(
    ssh_host: Any, known_hosts: Path, client_key: Any, tmp_path: Path, other: OtherUser
) -> None:
    """The job's user links its own log directory's `rank-8.log` to a file only root may read,
    and another user does the same in a sticky world-writable directory (NCCL's default log
    directory is /tmp): the content reaches no file of the run."""
    host = ssh_host("links")
    secret_marker = f"root-only-{uuid.uuid4().hex}"
    secret = tmp_path / "root-only"
    secret.write_text(f"{secret_marker}\n")
    secret.chmod(0o600)
    dirs = _node_dirs(tmp_path / "node")
    dirs["app"] = other.mkdir(other.world / "app")  # the job's own log directory
    dirs["nccl"] = other.world / "tmp"  # a /tmp of its own: root's, world-writable, sticky
    dirs["nccl"].mkdir()
    dirs["nccl"].chmod(0o1777)
    (dirs["app"] / "rank-0.log").write_text(RANK0)
    plant = "import os, sys; os.symlink(sys.argv[1], sys.argv[2])"
    other.run(plant, str(secret), str(dirs["app"] / "rank-8.log"))
    other.run(plant, str(secret), str(dirs["nccl"] / "nccl.node-1.4242.log"))
    assert os.lstat(dirs["nccl"] / "nccl.node-1.4242.log").st_uid == other.uid

    done, verdict, run_dir = _diagnose(host, known_hosts, client_key.private_path, tmp_path, dirs)
    leaked = [name for name, data in _files(run_dir).items() if secret_marker.encode() in data]
    assert leaked == []
    assert secret_marker not in done.stdout + done.stderr
    bundle = run_dir / "bundle"
    for link in ("app/rank-8.log", "nccl/nccl.node-1.4242.log"):
        assert not (bundle / link).exists(), link
        note = (bundle / f"{link}.err").read_text()
        assert note == "runbook: not read: a symbolic link (not followed)\n", (link, note)
    assert (bundle / "app" / "rank-0.log").read_text() == RANK0
    assert "CUDA out of memory" in _first_errors(verdict)[0]
    assert stages(verdict)["app-error"]["not_collected"]["app/rank-8.log"] == "not collected"


def test_a_fifo_among_the_logs_neither_holds_the_probe_nor_loses_the_other_logs(
    ssh_host: Any, known_hosts: Path, client_key: Any, tmp_path: Path
) -> None:
    host = ssh_host("fifo")
    dirs = _node_dirs(tmp_path / "node")
    (dirs["app"] / "rank-0.log").write_text(RANK0)
    os.mkfifo(dirs["app"] / "rank-5.log")  # sorted between the two real logs
    (dirs["app"] / "rank-9.log").write_text(RANK1.replace("rank1", "rank9"))
    os.mkfifo(dirs["nccl"] / "nccl.node-1.77.log")

    done, verdict, run_dir = _diagnose(host, known_hosts, client_key.private_path, tmp_path, dirs)
    assert done.wall_s < PROMPT_S, f"the walk took {done.wall_s:.1f}s"
    bundle = run_dir / "bundle"
    assert (bundle / "app" / "rank-0.log").read_text() == RANK0
    assert (bundle / "app" / "rank-9.log").read_text() == RANK1.replace("rank1", "rank9")
    fifo_note = "runbook: not read: a FIFO (not opened)\n"
    assert (bundle / "app" / "rank-5.log.err").read_text() == fifo_note
    assert (bundle / "nccl" / "nccl.node-1.77.log.err").read_text() == fifo_note
    assert not (bundle / "app" / "rank-5.log").exists()
    first = _first_errors(verdict)
    assert "CUDA out of memory" in first[0] and "unhandled system error" in first[9], first
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    app_probe = next(e for e in events if e["event"] == "probe" and e["name"] == "app/*.log")
    assert app_probe["failure"] is None and app_probe["duration"] < 5, app_probe


def test_a_login_banner_becomes_neither_the_nodes_name_nor_part_of_a_file(
    ssh_host: Any, known_hosts: Path, client_key: Any, tmp_path: Path
) -> None:
    host = ssh_host("banner")
    banner = "Welcome to the GPU cluster. Unauthorized use is prohibited."  # no newline
    host.login_prints(banner, "Last login: never\n")
    check = subprocess.run(
        host.network.ssh_argv(host, "echo hi"), capture_output=True, text=True, timeout=30
    )
    assert check.stdout.startswith(banner), "the host's login does not print its banner"
    dirs = _node_dirs(tmp_path / "node")
    (dirs["app"] / "rank-0.log").write_text(RANK0)

    done, verdict, run_dir = _diagnose(host, known_hosts, client_key.private_path, tmp_path, dirs)
    assert "Welcome to the GPU" not in done.stdout + done.stderr
    assert "CUDA out of memory" in _first_errors(verdict)[0]
    assert (run_dir / "bundle" / "app" / "rank-0.log").read_text() == RANK0
    # `runbook collect` keeps every probe, the preamble's too
    bundle = tmp_path / "collected"
    args = [
        "collect", "--target", f"ssh://root@{host.address}:{host.port}",
        "--known-hosts", str(known_hosts), "--identity", str(client_key.private_path),
        "--var", f"app_log_dir={dirs['app']}", "--var", f"nccl_log_dir={dirs['nccl']}",
        "--var", f"nccl_tests_dir={dirs['tests']}", "-o", str(bundle), "--format", "json",
    ]  # fmt: skip
    collected = run_now(args, cli_env(tmp_path), tmp_path / "collect", timeout=120)
    assert collected.rc == 0, collected.stderr
    assert (bundle / "hostname.txt").read_text() == f"{host.name}\n"
    assert (bundle / "app" / "rank-0.log").read_text() == RANK0
    for root in (run_dir, bundle):
        assert [name for name, data in _files(root).items() if b"Welcome to the GPU" in data] == []
    # alone and batched, a probe's output is the command's, byte for byte
    transport = SSHTransport(
        SSHAddress(host.address, host.port),
        SSHOptions(known_hosts=known_hosts, identities=(client_key.private_path,)),
    )
    try:
        alone = transport.run(Probe("hostname.txt", "hostname"))
        batched: dict[int, Any] = {}
        transport.run_batch(
            [Probe("hostname.txt", "hostname"), Probe("x.txt", "printf x")],
            batched.__setitem__,
            lambda index: pytest.fail(f"handed back from {index}"),
        )
    finally:
        transport.close()
    assert (alone.stdout, alone.stderr, alone.exited) == (f"{host.name}\n", "", 0)
    assert [(r.stdout, r.stderr) for _, r in sorted(batched.items())] == [
        (f"{host.name}\n", ""), ("x", ""),
    ]  # fmt: skip


def _fake_kubectl(path: Path) -> Path:
    """`kubectl exec [-i] -n NS POD -- ARGV`: ARGV run here, given kubectl's input only with -i
    (what the real one does with the container's input)."""
    path.write_text(
        "#!/bin/sh\n"
        'interactive=; while [ "$1" != -- ]; do [ "$1" = -i ] && interactive=1; shift; done\n'
        "shift\n"
        'if [ -n "$interactive" ]; then exec "$@"; else exec "$@" </dev/null; fi\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_frame_token_reaches_each_transports_probe_on_its_input_never_in_a_command_line(
    ssh_host: Any, known_hosts: Path, client_key: Any, tmp_path: Path
) -> None:
    """A framed probe that looks at every command line on the node while it runs, and prints
    the token it was given: the token is there, and in no command line (`ps` shows those to
    every user)."""
    host = ssh_host("token")
    token = framing.new_token()
    look = (
        "rbk_file seen; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; rbk_end 0; "
        'rbk_file mine; printf "%s" "$rbk_m"; rbk_end 0'
    )
    probe = framing.prepare(Probe("probe/*", look, 20.0), token)
    ssh = SSHTransport(
        SSHAddress(host.address, host.port),
        SSHOptions(known_hosts=known_hosts, identities=(client_key.private_path,)),
    )
    kubectl = KubectlTransport(
        "ns", "agent", kubectl=str(_fake_kubectl(tmp_path / "kubectl")), nsenter_pid=None
    )
    results = {}
    try:
        results["ssh"] = ssh.run(probe)
        batch: dict[int, Any] = {}
        ssh.run_batch(
            [Probe("a.txt", "true"), probe],
            batch.__setitem__,
            lambda index: pytest.fail(f"handed back from {index}"),
        )
        results["ssh batch"] = batch[1]
        results["local"] = LocalTransport().run(probe)
        # into this process's own namespaces: nsenter passes its input on to the probe's shell
        results["nsenter"] = NsenterTransport(LocalTransport(), os.getpid()).run(probe)
        results["kubectl"] = kubectl.run(probe)
    finally:
        ssh.close()
        kubectl.close()
    for how, result in results.items():
        assert result.ok, (how, result)
        files = {r.name: r.text for r in framing.parse(result.stdout, token).records}
        assert files["mine"] == f"{framing.MARK}{token}", how
        assert "rbk_tail" in files["seen"], f"{how}: the probe's own command line not seen"
        assert token not in files["seen"], f"{how}: the token is in a command line"
