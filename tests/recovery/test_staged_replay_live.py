"""The staged replay, live: the real-fault scenario's kind of job (gloo torch ranks building a
loader's host memory) replayed stage by stage in a real memory cgroup whose limit the approved
memory-limit remedy raised, through the real CLI over SSH.

The node (a test host dressed by tests/scenarios/job.Node: the memory cgroup hierarchy mounted
in its namespace) has a pod cgroup with a sidecar container already holding memory. A
memory-limit proposal for the pod is queued and approved (`runbook approvals approve`: the real
playbook patches the Job manifest through ansible-runner); the new limit from the patched
manifest is then written to the pod cgroup, as the kubelet does when the pod restarts. `runbook
verify ID` runs the collective test (nvidia-smi and all_reduce_perf are shims: no GPU here),
then restores the job's original configuration (workers 2, prefetch 4, batch 128 MiB) one knob
per stage. The last stage's prefetch queue does not fit under the headroom: the watcher stops
it before the kernel acts, which the cgroup's own counters confirm (oom_kill 0, failcnt 0,
under_oom 0). Before the limit is applied, the replay refuses to run at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from runbook import config as config_mod
from runbook.remedies.approval import Desk
from runbook.verdict import Verdict
from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.recovery import shims
from tests.recovery.conftest import Cli
from tests.scenarios.cgroups import MIB, MemoryCgroup
from tests.scenarios.job import Node
from tests.tools import manifests

pytestmark = [pytest.mark.live, pytest.mark.ssh, pytest.mark.ansible]

JOB_PROGRAM = Path(__file__).with_name("replay_job.py")
OLD_LIMIT = 1024 * MIB
#: memory-limit's estimate from a 1 GiB measured peak × 1.25 headroom
NEW_LIMIT = 1280 * MIB
SIDECAR_MIB = 48
HEADROOM = "15%"
MANIFEST = manifests.job(
    "train-small",
    image="registry.example.com/train:2.0",
    resources="requests:\n  memory: 1Gi\nlimits:\n  memory: 1Gi",
    shm=False,
    sidecars="        - name: log-shipper\n          image: registry.example.com/fluent-bit:3\n",
)


@dataclass
class Replayed:
    pod: MemoryCgroup
    sidecar_pid: int
    pid: str
    #: what the approval printed on its terminal (the offer, the check it ran)
    approve_out: str
    refused: dict[str, Any]
    verification: dict[str, Any]
    verify_rc: int
    verify_err: str
    cli: Cli
    manifest: Path
    #: wall seconds of each step, for the record
    timings: dict[str, float]


def _cache_torch() -> None:
    """Read torch's libraries once, so their page cache is charged here, not to the pod."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    for path in (Path(spec.origin).parent / "lib").glob("*.so*"):
        with path.open("rb") as f:
            while f.read(8 << 20):
                pass


def _job_command() -> str:
    return (f"{sys.executable} {JOB_PROGRAM} --ranks 2 --workers {{workers}} "
            "--prefetch {prefetch} --batch-mib {batch} --worker-mib 40 --hold 0.2")


def _queue(db: Path, host: TestHost, network: HostNetwork, manifest: Path, pod: MemoryCgroup,
           ) -> str:
    """The memory-limit proposal a diagnosis of the OOM would have queued (its measured
    params: the pod's cgroup peak at its 1 GiB limit), for this node over SSH."""
    from runbook.remedies.plans import Target

    verdict = {
        "format": 1, "node": host.name, "root_cause": "host-memory-oom", "confidence": "high",
        "surfaced_as": None,
        "first_anomaly": {"source": "dmesg.txt", "line": 1, "text": "oom-kill"},
        "chain": [{"stage": "cgroup-memory", "finding": "cgroup memory at its limit"}],
        "proposals": [{
            "id": "memory-limit-live", "kind": "memory-limit", "remedy": "memory-limit",
            "requires_approval": True,
            "summary": "size the limit from the measured peak", "playbook": "memory-limit.yml",
            "params": {"peak_bytes": str(OLD_LIMIT), "limit_bytes": str(OLD_LIMIT),
                       "headroom": "1.25", "node_allocatable_bytes": str(20 << 30)},
        }],
    }  # fmt: skip
    target = Target(url=f"ssh://root@{host.address}:{host.port}",
                    identities=(str(network.client_key.private_path),),
                    known_hosts=str(network.known_hosts_path), connect_timeout=5.0)
    variables = {"manifest": str(manifest), "cgroup_dir": str(pod.path),
                 "job_command": _job_command(), "workers": 2, "prefetch": 4, "batch": 128,
                 "repeats": 1}
    with Desk(config_mod.load(None, db=str(db))) as desk:
        (queued,) = desk.queue_verdict(Verdict.from_json(verdict), node=host.name, target=target,
                                       runbook_id="nccl-init-failure", variables=variables,
                                       run_dir=None)
    assert queued.plan is not None, queued.plan_error
    return queued.proposal.id


def _approve_on_a_terminal(cli: Cli, pid: str) -> str:
    import io

    import pexpect

    log = io.StringIO()
    child = pexpect.spawn(sys.executable, ["-m", "runbook", "approvals", "approve", pid,
                                           "--as", "alice", "--no-recheck"],
                          env={**cli.env, "TERM": "dumb"}, encoding="utf-8", timeout=180,
                          dimensions=(60, 200))
    child.logfile_read = log
    try:
        child.expect("succeeded")
        child.expect(r"run the recovery check now")
        child.sendline("y")
        child.expect("verification: failed-verification")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0, log.getvalue()[-3000:]
    return log.getvalue()


def _limit_in(manifest: Path) -> int:
    from runbook.units import parse_size

    doc = yaml.safe_load(manifest.read_text())
    trainer = doc["spec"]["template"]["spec"]["containers"][0]
    return parse_size(trainer["resources"]["limits"]["memory"])


@pytest.fixture(scope="module")
def replayed(recovery_hosts: HostFactory, host_network: HostNetwork,
             tmp_path_factory: pytest.TempPathFactory) -> Any:
    host = recovery_hosts("rc-train")
    shims.install(host, "h100-nvlink", {"model": "NVIDIA H100 80GB HBM3", "peak_busbw": 620.0})
    node = Node(host)
    # torch's files in the page cache before the job: charged where they were read, not to
    # the pod (as on a node where the image's layers are cached)
    _cache_torch()
    pod = MemoryCgroup("rc-pod", OLD_LIMIT)
    sidecar_dir = pod.path / "sidecar"
    sidecar_dir.mkdir()
    sidecar = subprocess.Popen(
        ["sh", "-c", f"echo $$ > {sidecar_dir}/cgroup.procs && exec python3 -c "
         "'import ctypes, time; ctypes.CDLL(None).prctl(15, b\"fluent-bit\", 0, 0, 0); "
         f"b = bytearray({SIDECAR_MIB} << 20); "
         "[b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; print(1, flush=True); "
         "time.sleep(600)'"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert sidecar.stdout is not None and sidecar.stdout.readline().strip() == "1"
        root = tmp_path_factory.mktemp("replay")
        manifest = root / "job.yaml"
        manifest.write_text(MANIFEST)
        cli = Cli(root, host_network)
        pid = _queue(cli.db, host, host_network, manifest, pod)
        timings: dict[str, float] = {}
        clock = time.monotonic()
        # approved on a terminal: the prompt offers the recovery check at once, and taking it
        # finds the pod still under its old limit (the pod has not restarted yet)
        approved = _approve_on_a_terminal(cli, pid)
        timings["approve+offered check"], clock = time.monotonic() - clock, time.monotonic()
        refused = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
        verify = ["verify", pid, "--headroom", HEADROOM, "--stage-seconds", "90",
                  "--collective-pattern", "first all_reduce ok", "--format", "json"]
        # what the kubelet does when the pod restarts with the patched spec
        (pod.path / "memory.limit_in_bytes").write_text(str(_limit_in(manifest)))
        done = cli(*verify, timeout=300)
        timings["verify"] = time.monotonic() - clock
        print("timings:", {k: round(v, 1) for k, v in timings.items()})
        yield Replayed(pod, sidecar.pid, pid, approved, refused["verification"],
                       json.loads(done.stdout or "{}"), done.rc, done.stderr, cli, manifest,
                       timings)
    finally:
        sidecar.kill()
        sidecar.wait(5)
        if sidecar.stdout is not None:
            sidecar.stdout.close()
        for leftover in pod.path.iterdir():
            if leftover.is_dir():
                for task in (leftover / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(task), signal.SIGKILL)
                with contextlib.suppress(OSError):
                    leftover.rmdir()
        pod.remove()
        node.close()


def stages(r: Replayed) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = r.verification["layers"]["replay"]["stages"]
    return out


def test_the_approved_remedy_raised_the_limit_and_its_check_was_offered_at_once(
    replayed: Replayed,
) -> None:
    assert _limit_in(replayed.manifest) == NEW_LIMIT
    # the check taken at the prompt ran the collective test and showed its verdict
    assert "Minimal collective test" in replayed.approve_out
    assert "collective test on rc-train: healthy" in replayed.approve_out


def test_the_replay_refuses_to_run_under_the_old_limit(replayed: Replayed) -> None:
    assert replayed.refused["status"] == "failed-verification"
    assert "not the approved 1.2 GiB" in replayed.refused["reason"]
    assert "not the approved 1.2 GiB" in " ".join(replayed.approve_out.split())
    assert replayed.refused["layers"]["replay"]["stages"] == []


def test_the_stages_restore_the_configuration_one_knob_at_a_time(replayed: Replayed) -> None:
    assert replayed.verify_rc == 1, replayed.verify_err[-3000:]
    assert [s["knobs"] for s in stages(replayed)] == [
        {"workers": "0", "prefetch": "1", "batch": "32"},
        {"workers": "2", "prefetch": "1", "batch": "32"},
        {"workers": "2", "prefetch": "4", "batch": "32"},
        {"workers": "2", "prefetch": "4", "batch": "128"},
    ]
    assert [s["outcome"] for s in stages(replayed)] == ["completed"] * 3 + ["stopped-at-headroom"]


def test_each_stage_records_its_peaks_from_the_real_cgroup(replayed: Replayed) -> None:
    ran = stages(replayed)
    for s in ran:
        assert s["limit_bytes"] == NEW_LIMIT and s["cgroup_version"] in (1, 2)
        assert s["peak_since_stage_start"] is True
        assert s["anon_bytes"] and s["anon_bytes"] > 200 * MIB, s
        assert s["shmem_bytes"] is not None and s["file_bytes"] is not None
        assert s["ranks"] == 2, s["containers"]
        assert s["per_rank_peak_rss_bytes"] > 100 * MIB
    peaks = [s["peak_bytes"] for s in ran[:3]]
    assert peaks == sorted(peaks) and peaks[2] > peaks[0] + 200 * MIB, peaks
    assert [s["workers"] for s in ran] == [0, 4, 4, 4]
    # the first collective ran in each stage that fitted (and not in the one stopped first)
    assert all(s["first_collective_s"] and s["first_collective_s"] > 0 for s in ran[:3])
    assert ran[3]["first_collective_s"] is None


def test_the_pod_peak_is_broken_down_per_container_and_shows_the_sidecar(
    replayed: Replayed,
) -> None:
    for s in stages(replayed):
        by_name = {c["name"]: c for c in s["containers"]}
        assert set(by_name) == {"sidecar", "runbook-replay"}, by_name
        assert by_name["sidecar"]["peak_bytes"] >= SIDECAR_MIB * MIB
        assert by_name["sidecar"]["ranks"] == 0
        assert by_name["runbook-replay"]["replayed"] and by_name["runbook-replay"]["ranks"] == 2
        assert by_name["runbook-replay"]["peak_bytes"] > by_name["sidecar"]["peak_bytes"]


def test_the_stage_that_would_not_fit_is_stopped_before_the_kernel_kills_anything(
    replayed: Replayed,
) -> None:
    last = stages(replayed)[-1]
    assert last["peak_working_set_bytes"] >= last["stop_at_bytes"]
    assert last["peak_working_set_bytes"] < NEW_LIMIT
    assert last["stop_at_bytes"] == NEW_LIMIT - int(NEW_LIMIT * 0.15)
    assert all(s["oom_kills"] == 0 and s["failcnt"] == 0 for s in stages(replayed))
    pod = replayed.pod
    assert pod.oom_kills() == 0 and pod.failcnt() == 0
    control = pod.read("memory.oom_control") if pod.version == 1 else pod.read("memory.events")
    assert "oom_kill 0" in control and ("under_oom 0" in control or pod.version == 2), control
    # nothing of the replay is left: its container cgroup is gone, the sidecar runs on
    assert not (pod.path / "runbook-replay").exists()
    assert pod.pids() == [] and (pod.path / "sidecar" / "cgroup.procs").read_text().split() == [
        str(replayed.sidecar_pid)]


def test_the_failed_verification_is_recorded_with_the_stage_that_did_not_fit(
    replayed: Replayed,
) -> None:
    v = replayed.verification
    assert v["status"] == "failed-verification" and v["verified"] is False
    assert v["reason"].startswith("staged replay: stage 4 (workers=2, prefetch=4, batch=128) "
                                  "stopped"), v["reason"]
    assert v["layers"]["collective"]["root_cause"] == "healthy"
    assert v["previous"][0]["status"] == "failed-verification"  # the refused attempt
    cli = replayed.cli
    shown = cli("approvals", "show", replayed.pid)
    assert shown.rc == 0, shown.stderr
    assert "verification: failed-verification" in shown.stdout
    assert "container sidecar" in shown.stdout and "stage 4" in shown.stdout
    trail = cli("audit", "show", "--proposal", replayed.pid, "--format", "json")
    events = [json.loads(line) for line in trail.stdout.splitlines()]
    failed = [e for e in events if e["event"] == "failed-verification"]
    assert len(failed) == 2 and "stage 4" in failed[-1]["data"]["reason"]
    assert cli("audit", "verify").rc == 0
    # the check's run directory keeps each stage's full report: the processes at the peak
    raw = json.loads((Path(v["run_dir"]) / "replay" / "stage-4.json").read_text())
    assert raw["outcome"] == "stopped-at-headroom"
    assert len(raw["snapshot"]["containers"]["runbook-replay"]["processes"]["statuses"]) >= 7


def test_replay_stages_stops_a_stage_that_outgrows_the_headroom_on_a_local_node(
    tmp_path: Path, host_network: HostNetwork,
) -> None:
    """`runbook replay-stages` on its own, over the local target: a job that touches its
    whole allocation as fast as it can (no loader pacing) is still stopped before the kernel
    acts, by the stop line or the replay container's guard."""
    pod = MemoryCgroup("rc-fast", 256 * MIB)
    try:
        job = ("python3 -c 'import time; b = bytearray({mib} << 20); "
               "[b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; "
               "print(\"all_reduce done\", flush=True); time.sleep(0.2)'")
        cli = Cli(tmp_path, host_network)
        out = cli("replay-stages", "--target", "local", "--cgroup", pod.path, "--command", job,
                  "--stage", "mib=32", "--stage", "mib=600", "--stage", "mib=64",
                  "--headroom", "20%", "--format", "json", timeout=120)
        assert out.rc == 1, out.stderr[-2000:]
        result = json.loads(out.stdout)
        first, second = result["stages"]  # the third never ran
        assert first["outcome"] == "completed" and first["first_collective_s"] is not None
        assert second["outcome"] == "stopped-at-headroom", second
        assert result["stopped_at"] == 2
        assert pod.oom_kills() == 0 and pod.failcnt() == 0
        assert second["oom_kills"] == 0 and second["failcnt"] == 0
        assert not (pod.path / "runbook-replay").exists()
        # a headroom of 1 %: the stop line and the guard 1 % apart, the job faster than any
        # poll; the guard holds it (observed: its tasks wait at the guard, killable), and
        # still nothing is OOM-killed and the pod never touches its limit
        tight = cli("replay-stages", "--target", "local", "--cgroup", pod.path,
                    "--command", job, "--stage", "mib=600", "--headroom", "1%",
                    "--format", "json", timeout=120)
        (only,) = json.loads(tight.stdout)["stages"]
        assert only["outcome"] == "stopped-at-headroom" and only["peak_bytes"] < 256 * MIB
        assert pod.oom_kills() == 0 and pod.failcnt() == 0
        usage = cli("replay-stages", "--target", "local", "--cgroup", pod.path,
                    "--command", job, "--format", "json")
        assert usage.rc == 2 and "--stage" in usage.stderr
    finally:
        pod.remove()
