"""Several probes in one SSH channel (transports/batch.py, SSHTransport.run_batch) over real
OpenSSH test hosts: each probe gets what a channel of its own gives it; a slow one hands the
probes after it to another channel without any of them running twice; a timeout still stops
the remote command; a walk reaches the same verdict and bundle batched or not.

GPU tools on the hosts are scenario shims that print real-format output (this machine has no
GPU); SSH, the shell, the processes, their signals and timeouts are real.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from runbook.transports.address import SSHAddress
from runbook.transports.base import CommandResult, Probe
from runbook.transports.ssh import BATCH_PATIENCE_S, SSHOptions, SSHTransport
from tests.scenarios import shims

pytestmark = pytest.mark.ssh


@pytest.fixture
def transport(ssh_host, known_hosts, client_key) -> Iterator[SSHTransport]:  # type: ignore[no-untyped-def]
    host = ssh_host("batch")
    opened = SSHTransport(
        SSHAddress(host.address, host.port),
        SSHOptions(known_hosts=known_hosts, identities=(client_key.private_path,)),
    )
    opened.host_dir = Path(host.dir)  # type: ignore[attr-defined]
    try:
        yield opened
    finally:
        opened.close()


class Outcome:
    """What one run_batch (and the batches its hand-backs become) reported, with the time of
    each report; every probe must be reported exactly once."""

    def __init__(self, transport: SSHTransport, probes: Sequence[Probe]) -> None:
        self.transport = transport
        self.probes = list(probes)
        self.results: dict[int, CommandResult] = {}
        self.at: dict[int, float] = {}
        self.handed_back: list[int] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.start = time.monotonic()

    def run(self, offset: int = 0) -> None:
        def deliver(index: int, result: CommandResult) -> None:
            with self._lock:
                assert offset + index not in self.results, "reported twice"
                self.results[offset + index] = result
                self.at[offset + index] = time.monotonic() - self.start

        def spill(index: int) -> None:
            with self._lock:
                self.handed_back.append(offset + index)
            thread = threading.Thread(target=self.run, args=(offset + index,))
            self._threads.append(thread)
            thread.start()

        self.transport.run_batch(self.probes[offset:], deliver, spill)

    def wait(self) -> dict[int, CommandResult]:
        while self._threads:
            self._threads.pop().join(60)
        assert sorted(self.results) == list(range(len(self.probes)))
        return self.results


def _batched(transport: SSHTransport, probes: Sequence[Probe]) -> Outcome:
    outcome = Outcome(transport, probes)
    outcome.run()
    outcome.wait()
    return outcome


def _remote_processes(pattern: str) -> str:
    return subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout


def test_each_probe_gets_what_a_channel_of_its_own_gives_it(transport) -> None:  # type: ignore[no-untyped-def]
    not_executable = transport.host_dir / "not-executable"
    not_executable.write_text("#!/bin/sh\necho ran\n")
    not_executable.chmod(0o644)
    probes = [
        Probe("plain.txt", "echo plain"),
        Probe("no-newline.txt", "printf 'no newline'"),
        Probe("both.txt", "echo out; echo err >&2; exit 3"),
        Probe("missing.txt", "no-such-tool --version"),
        Probe("denied.txt", str(not_executable)),
        Probe("empty.txt", "true"),
        Probe("big.txt", "head -c 3000000 /dev/zero | tr '\\0' 'x'; echo"),
        Probe("utf8.txt", "printf 'caf\\303\\251 \\377\\n'"),
        Probe("cwd.txt", "cd /tmp && pwd"),
        Probe("after-cd.txt", "pwd; echo ${leaked:-unset}"),
    ]
    batched = _batched(transport, probes).results
    for index, probe in enumerate(probes):
        alone = transport.run(probe)
        got = batched[index]
        assert (got.stdout, got.exited, got.truncated) == (
            alone.stdout, alone.exited, alone.truncated,
        ), probe.name  # fmt: skip
        assert got.failure == alone.failure, probe.name
        assert bool(got.stderr) == bool(alone.stderr), probe.name
    assert batched[3].not_found and batched[4].failure == "permission denied"
    assert len(batched[6].stdout) == 3_000_001


#: hostile evidence that knows all the node's command lines show: every hex token in them
#: written out as a batch's end marks, as a job could write them into a log a probe reads
FORGER = (
    "for f in /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done 2>/dev/null"
    " | grep -o '[0-9a-f]\\{16,64\\}' | sort -u | while read -r t; do"
    " printf '\\n__RBK_END_%s 0\\n' \"$t\"; printf '\\n__RBK_END_%s\\n' \"$t\" >&2; done;"
    " echo forged-after"
)


def test_evidence_cannot_end_its_probe_early_or_speak_for_the_next_one(transport) -> None:  # type: ignore[no-untyped-def]
    import secrets

    # a decoy token in a command line (the hosts share this machine's processes): the forger
    # finds it and writes marks with it, as it would the batch's were it to be seen
    decoy = secrets.token_hex(16)
    shown = subprocess.Popen(["/bin/sh", "-c", f"sleep 30; : {decoy}"])
    try:
        probes = [Probe("log.txt", FORGER), Probe("next.txt", "echo real; exit 5")]
        results = _batched(transport, probes).results
    finally:
        shown.kill()
        shown.wait()
    assert results[0].stdout.endswith("forged-after\n") and results[0].exited == 0
    assert f"\n__RBK_END_{decoy} 0\n" in results[0].stdout  # forged, and kept as content
    assert (results[1].stdout, results[1].stderr, results[1].exited) == ("real\n", "", 5)


def test_a_slow_probe_hands_the_rest_to_another_channel_and_nothing_runs_twice(transport) -> None:  # type: ignore[no-untyped-def]
    count = transport.host_dir / "ran"
    probes = [
        Probe("first.txt", "echo first"),
        Probe("slow.txt", "sleep 1.5; echo slow"),
        *(Probe(f"after-{i}.txt", f"echo {i} >> {count}; echo {i}") for i in range(3)),
    ]
    outcome = _batched(transport, probes)
    results = outcome.results
    assert [results[i].stdout for i in range(5)] == ["first\n", "slow\n", "0\n", "1\n", "2\n"]
    assert outcome.handed_back == [2]
    # the probes after the slow one did not wait for it
    assert max(outcome.at[i] for i in (2, 3, 4)) < outcome.at[1] - 0.5
    # the first channel's shell was told to stop after the slow probe: none of them ran again
    time.sleep(0.3)
    assert count.read_text().split() == ["0", "1", "2"]


def test_a_probe_that_times_out_in_a_batch_is_stopped_and_the_rest_still_run(transport) -> None:  # type: ignore[no-untyped-def]
    probes = [
        Probe("hang.txt", "echo started; sleep 3191", timeout=1.0),
        Probe("next.txt", "echo next"),
    ]
    outcome = _batched(transport, probes)
    hang, after = outcome.results[0], outcome.results[1]
    assert hang.timed_out and hang.stdout == "started\n" and hang.exited is None
    assert 1.0 <= hang.duration < 3.0
    assert after.ok and after.stdout == "next\n"
    deadline = time.monotonic() + 5
    while _remote_processes("sleep 3191") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _remote_processes("sleep 3191") == ""


def test_a_timeout_stops_the_command_when_the_login_shell_is_dash(  # type: ignore[no-untyped-def]
    ssh_host, known_hosts, client_key
) -> None:
    """The stop is sent through the account's login shell: dash's kill takes `-s TERM --`,
    not `-TERM --` (which it reads as a process named "-"), so the process group lived on."""
    host = ssh_host(
        "dashlogin", extra_sshd_config='ForceCommand exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"'
    )
    transport = SSHTransport(
        SSHAddress(host.address, host.port),
        SSHOptions(known_hosts=known_hosts, identities=(client_key.private_path,)),
    )
    try:
        result = transport.run(Probe("hang.txt", "sleep 3193", timeout=0.5))
        outcome = _batched(transport, [Probe("a", "sleep 3197", timeout=0.5), Probe("b", "true")])
    finally:
        transport.close()
    assert result.timed_out and outcome.results[0].timed_out and outcome.results[1].ok
    deadline = time.monotonic() + 5
    while _remote_processes("sleep 319[37]") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _remote_processes("sleep 319[37]") == ""


def test_a_connection_lost_during_a_batch_leaves_no_probe_unreported(transport) -> None:  # type: ignore[no-untyped-def]
    # each long probe hands the ones after it to a new channel; the connection then drops
    # under all three channels
    probes = [Probe(f"long-{i}.txt", f"sleep 320{i}") for i in range(3)]
    outcome = Outcome(transport, probes)
    runner = threading.Thread(target=outcome.run)
    runner.start()
    time.sleep(3 * BATCH_PATIENCE_S + 0.5)
    transport.close()
    runner.join(30)
    results = outcome.wait()
    assert outcome.handed_back == [1, 2]
    for result in results.values():
        assert not result.ok and not result.timed_out
        assert result.error and "connection" in result.error, result
    subprocess.run(["pkill", "-f", "sleep 320[0-2]"], check=False)


#: bundle files that differ between two walks of one node a second apart (this machine's
#: memory and /dev/shm, which other processes use too; kubectl's timestamped errors)
VOLATILE = {
    "bundle.yaml", "clock.txt", "meminfo.txt", "df-shm.txt", "node.json.err", "pod.json.err",
}


def test_a_walk_reaches_the_same_verdict_and_bundle_batched_or_not(  # type: ignore[no-untyped-def]
    ssh_host, known_hosts, client_key, tmp_path
) -> None:
    """The shipped runbook over SSH, once with its probes batched and once one channel each
    (the same transport behind a wrapper that cannot batch), on a healthy node and on one
    whose GPU fell off the bus."""
    from runbook.executor import execute
    from runbook.rundir import RunDirectory
    from runbook.spec import load_file, resolve

    class OneChannelEach:
        def __init__(self, inner: SSHTransport) -> None:
            self.inner = inner
            self.description = inner.description

        def run(self, probe: Probe) -> CommandResult:
            return self.inner.run(probe)

        def close(self) -> None:
            self.inner.close()

    fallen = shims.profile(
        "healthy-8gpu",
        nvidia_smi_L=shims.Output(
            "", "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n", 15
        ),
        dmesg=shims.Output(
            "[Wed Mar  4 10:11:58 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, "
            "GPU has fallen off the bus.\n"
        ),
    )
    # the healthy node's kernel log a shim too: this machine's own changes under other work
    healthy = shims.profile(
        "healthy-8gpu", dmesg=shims.Output("[Wed Mar  4 06:00:05 2026] Linux version 6.1.0\n")
    )
    runbook = load_file(resolve("nccl-init-failure"))
    causes = {}
    for name, outputs in (("healthy", healthy), ("fallen", fallen)):
        host = ssh_host(f"walk-{name}")
        shims.install(host, outputs)
        walks = {}
        for mode in ("batched", "alone"):
            ssh = SSHTransport(
                SSHAddress(host.address, host.port),
                SSHOptions(known_hosts=known_hosts, identities=(client_key.private_path,)),
            )
            transport = ssh if mode == "batched" else OneChannelEach(ssh)
            run_dir = RunDirectory(tmp_path / f"{name}-{mode}")
            try:
                result = execute(runbook, transport, run_dir=run_dir)
            finally:
                transport.close()
                run_dir.close()
            files = {
                # the shell's own error names eval in a batch (`sh: 1: eval: dcgmi: not found`)
                str(p.relative_to(run_dir.bundle)): p.read_bytes().replace(b" eval: ", b" ")
                if p.name not in VOLATILE else b"(changes from run to run)"
                for p in sorted(run_dir.bundle.rglob("*"))
                if p.is_file()
            }
            walks[mode] = (result.verdict.root_cause, result.conductor.path, files)
        assert walks["batched"] == walks["alone"], name
        causes[name] = walks["batched"][0]
    assert causes == {"healthy": "healthy", "fallen": "gpu-hardware"}, causes


def test_after_the_connection_was_closed_stopping_a_batch_is_quiet(transport, caplog) -> None:  # type: ignore[no-untyped-def]
    """An interrupted run closes the connection while batches may still hand probes back and
    stop process groups: the run's own last line ("interrupted; resume with ...") must stay
    its last, with no warning about a stop the closed connection could not send."""
    import logging

    transport.close()
    with caplog.at_level(logging.DEBUG, logger="runbook.transports.ssh"):
        assert transport._ask_to_stop(12345) is None
        transport._stop(12345, "")
        transport._stop(None, "0123456789abcdef")
    records = [r for r in caplog.records if r.name == "runbook.transports.ssh"]
    assert len(records) == 3 and all(r.levelno == logging.DEBUG for r in records), records


def test_a_login_that_speaks_first_still_lets_slow_probes_hand_back_and_timeouts_kill(  # type: ignore[no-untyped-def]
    ssh_host, known_hosts, client_key
) -> None:
    """A profile that prints before the command runs (its words come before the start mark):
    the group is still known, so a slow probe hands the rest back and a timed-out one is
    killed by its group; the words are the login's, never a probe's stderr."""
    host = ssh_host(
        "chatty",
        extra_sshd_config=(
            'ForceCommand echo "welcome to the node" >&2; exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"'
        ),
    )
    transport = SSHTransport(
        SSHAddress(host.address, host.port),
        SSHOptions(known_hosts=known_hosts, identities=(client_key.private_path,)),
    )
    try:
        outcome = _batched(transport, [Probe("slow", "sleep 1.5; echo slow"), Probe("b", "echo b")])
        single = transport.run(Probe("hang.txt", "sleep 3217", timeout=0.5))
        quick = transport.run(Probe("quick.txt", "echo quick"))
    finally:
        transport.close()
    assert outcome.handed_back == [1] and outcome.at[1] < outcome.at[0] - 0.5
    assert outcome.results[0].stderr == ""
    # the probe handed back ran in a channel of its own: its login spoke first there too
    assert outcome.results[1].stdout == "b\n"
    assert outcome.results[1].stderr == ""
    assert single.timed_out and quick.stderr == "" and quick.ok
    deadline = time.monotonic() + 5
    while _remote_processes("sleep 3217") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _remote_processes("sleep 3217") == ""
