"""`kubectl://` through the shipped node agent, end to end with the real kubectl 1.32 binary: the
API is a recorded double (no API server can run here, tests/k8s/apiserver.py) whose pods/exec
runs the command on the SSH test host standing for node gpu-node-01 (tests/k8s/nodes.py), through
a real nsenter into the host's namespaces. A burst of probes is one exec; a probe's process group
is stopped on the node when it times out, when it holds back the rest of its batch too long, and
when the run is closed; the agent is found by the node's name; a sweep and a job reach nodes
through the agent or through debug pods."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runbook.executor import execute
from runbook.spec import load_file, resolve
from runbook.transports.base import CommandResult, Probe
from runbook.transports.kube_exec import BATCH_PATIENCE_S
from runbook.transports.nsenter import KubectlTransport
from tests.job.kube_objects import TRAINING_JOBS
from tests.k8s.nodes import NODE, KubeCluster, agent_pod, manifest
from tests.k8s.nodes import kube_cluster as kube_cluster
from tests.k8s.test_kube_debug import _assert_rbac_within, _debug_pods, _env, _shipped_role

pytestmark = pytest.mark.ssh


def _transport(cluster: KubeCluster) -> KubectlTransport:
    return KubectlTransport("kube-system", cluster.agent, nsenter_pid=cluster.nsenter_pid)


def _cli(cluster: KubeCluster, tmp_path: Path, *args: str, **extra: str) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "runbook", *args], env=_env(cluster, tmp_path, **extra),
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip


def test_a_burst_of_probes_is_one_exec_each_with_its_own_output_and_status(
    kube_cluster: KubeCluster,
) -> None:
    """API double: sixteen probes in one run_batch run in one shell of one pods/exec (before:
    an exec each); each gets its own stdout, stderr and exit status, run on the node. The API
    sees two execs in all: the one the batch ran in (started ahead, as the connection check)
    and the one started ahead for the next batch."""
    transport = _transport(kube_cluster)
    try:
        probes = [Probe(f"p{i}", f"echo {i} $$; hostname; echo e{i} >&2; exit {i % 3}")
                  for i in range(16)]  # fmt: skip
        got: dict[int, CommandResult] = {}
        transport.run_batch(probes, got.__setitem__, lambda i: pytest.fail(f"handed back {i}"))
    finally:
        transport.close()
    shells = {result.stdout.split()[1] for result in got.values()}
    assert len(shells) == 1, shells
    for i, result in got.items():
        assert result.stdout == f"{i} {next(iter(shells))}\n{kube_cluster.host.name}\n"
        assert result.stderr == f"e{i}\n" and result.exited == i % 3
    assert len(kube_cluster.exec_requests()) <= 2
    # the batch is not in any exec's command line (nor the API server's audit log)
    assert not [r for r in kube_cluster.exec_requests() if "echo 5" in " ".join(r.query["command"])]


def test_a_guided_walk_sends_one_exec_a_batch_and_none_ahead_after_its_last(
    kube_cluster: KubeCluster,
) -> None:
    """API double: the whole nccl-init-failure walk over the agent: the exec requests the API
    sees are the walk's batches, one each (the transport counts them as the executor sends
    them), with none started ahead after the last one (before: one more, killed unused)."""
    kube_cluster.api.clear_log()
    transport = _transport(kube_cluster)
    batches = []
    inner = transport.exec.run_batch

    def counted(probes: Any, deliver: Any, spill: Any, **kw: Any) -> None:
        batches.append(len(probes))
        inner(probes, deliver, spill, **kw)

    transport.run_batch = transport.exec.run_batch = counted  # type: ignore[method-assign]
    try:
        result = execute(load_file(resolve("nccl-init-failure")), transport)
    finally:
        transport.close()
    execs = kube_cluster.exec_requests()
    assert len(result.results) > 20 and len(batches) >= 3, batches
    # the first exec is the connection check, and it runs the first batch
    assert len(execs) == len(batches), (len(execs), batches)


def test_a_burst_larger_than_one_script_goes_as_two_execs_each_probe_whole(
    kube_cluster: KubeCluster,
) -> None:
    """API double: sixteen probes of 6 KiB of text each are more than one batch's script
    holds (64 KiB): the first exec runs what fits (its input more than a pipe holds), the rest
    is handed back whole, and every probe prints its own text."""
    transport = _transport(kube_cluster)
    texts = [f"{i:02d}" + "x" * 6000 for i in range(16)]
    probes = [Probe(f"p{i}", f"printf '%s' {text}") for i, text in enumerate(texts)]
    got: dict[int, CommandResult] = {}
    handed: list[int] = []
    try:
        transport.run_batch(probes, got.__setitem__, handed.append)
        (rest,) = handed
        assert 8 <= rest < 16
        transport.run_batch(probes[rest:], lambda i, r: got.__setitem__(rest + i, r), handed.append)
    finally:
        transport.close()
    assert handed == [rest]
    assert [got[i].stdout for i in range(16)] == texts


def test_a_timed_out_probe_is_stopped_on_the_node_not_only_in_kubectl(
    kube_cluster: KubeCluster,
) -> None:
    """API double: an exec whose kubectl is killed leaves its command running (a kubelet does
    not signal it); the transport stops the probe's process group on the node from a second
    exec, through nsenter."""
    transport = _transport(kube_cluster)
    try:
        result = transport.run(Probe("slow.txt", "sleep 271 | cat", timeout=1.0))
        assert result.timed_out
        time.sleep(0.3)
        assert kube_cluster.processes("sleep 271") == []
    finally:
        transport.close()
        kube_cluster.kill("sleep 271")


def test_a_hung_probe_hands_the_rest_of_its_batch_to_a_new_exec(
    kube_cluster: KubeCluster,
) -> None:
    """API double: the second of four probes hangs; the two after it are handed back (and run
    as a new exec) within the patience, long before the hung one's timeout."""
    transport = _transport(kube_cluster)
    results: dict[int, tuple[float, CommandResult]] = {}
    threads: list[threading.Thread] = []
    start = time.monotonic()
    probes = [Probe("a", "echo a"), Probe("hang", "sleep 272; echo late", timeout=8.0),
              Probe("c", "echo c"), Probe("d", "echo d")]  # fmt: skip

    def run(offset: int) -> None:
        def deliver(index: int, result: CommandResult) -> None:
            results[offset + index] = (time.monotonic() - start, result)

        def spill(index: int) -> None:
            thread = threading.Thread(target=run, args=(offset + index,))
            threads.append(thread)
            thread.start()

        transport.run_batch(probes[offset:], deliver, spill)

    try:
        run(0)
        while threads:
            threads.pop().join(30)
    finally:
        transport.close()
        kube_cluster.kill("sleep 272")
    assert sorted(results) == [0, 1, 2, 3]
    assert results[2][1].stdout == "c\n" and results[3][1].stdout == "d\n"
    assert results[3][0] < 4.0 + BATCH_PATIENCE_S, "the rest waited for the hung probe"
    assert results[1][1].timed_out
    assert kube_cluster.processes("sleep 272") == []


def test_closing_the_transport_stops_a_batch_in_flight_on_the_node(
    kube_cluster: KubeCluster,
) -> None:
    """API double: a run stopped (^C closes its transport) while a probe runs in the pod: the
    batch's process group on the node is killed, not left to run out its timeout."""
    transport = _transport(kube_cluster)
    got: dict[int, CommandResult] = {}
    worker = threading.Thread(
        target=transport.run_batch,
        args=([Probe("a", "sleep 273", timeout=60)], got.__setitem__, lambda i: None),
    )
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while not kube_cluster.processes("sleep 273"):
            assert time.monotonic() < deadline, "the probe never started"
            time.sleep(0.05)
        transport.close()
        worker.join(20)
        assert not worker.is_alive()
        assert kube_cluster.processes("sleep 273") == []
    finally:
        kube_cluster.kill("sleep 273")


def test_kubectl_node_target_finds_the_agent_by_label_and_node_name(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """API double: `--target kubectl://node/gpu-node-01` lists agent pods by the DaemonSet's
    label and `spec.nodeName`, collects through the one found, with one exec a burst (far
    fewer execs than probes), and asks only what the shipped agent Role grants."""
    # another agent, on another node: the field selector, not the caller, tells them apart
    kube_cluster.api.state.put(agent_pod("gpu-node-02"))
    kube_cluster.api.clear_log()
    done = _cli(
        kube_cluster, tmp_path, "collect", "--target", f"kubectl://node/{NODE}",
        "--nsenter", str(kube_cluster.nsenter_pid), "-o", str(tmp_path / "bundle"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lookups = [r for r in kube_cluster.api.requests if r.verbs == ("list",)]
    assert lookups[0].query["labelSelector"] == ["app=node-agent"]
    assert lookups[0].query["fieldSelector"] == [f"spec.nodeName={NODE}"]
    execs = kube_cluster.exec_requests()
    assert {r.path.split("/")[-2] for r in execs} == {kube_cluster.agent}
    files = [p for p in (tmp_path / "bundle").rglob("*") if p.is_file()]
    assert (tmp_path / "bundle" / "hostname.txt").read_text().strip() == kube_cluster.host.name
    assert len(execs) * 4 <= len(files), (len(execs), len(files))
    _assert_rbac_within(kube_cluster, _shipped_role("nccl-runbook-agent-exec",
                                                   "runbook-agent-rbac.yaml"))  # fmt: skip


def test_a_node_without_an_agent_is_one_line_naming_the_way_in(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """API double: no agent pod on gpu-node-03: exit 3, one line that names the manifest and
    the debug target."""
    done = _cli(kube_cluster, tmp_path, "collect", "--target", "kubectl://node/gpu-node-03",
                "-o", str(tmp_path / "bundle"))  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "no node-agent pod" in done.stderr and "kubectl-debug://gpu-node-03" in done.stderr


def test_a_sweep_through_debug_pods_makes_one_per_node_and_deletes_each(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """API double: `sweep --kube-selector … --kube-debug` reaches the selected node through a
    debug pod of its own (no agent is looked up) and leaves none behind."""
    done = _cli(
        kube_cluster, tmp_path, "sweep", "nccl-init-failure",
        "--kube-selector", f"kubernetes.io/hostname={NODE}", "--kube-debug",
        "--nsenter", str(kube_cluster.nsenter_pid), "--report", str(tmp_path / "report"),
        "--format", "json",
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    report = json.loads((tmp_path / "report" / "sweep.json").read_text())
    (host,) = report["hosts"]
    assert host["status"] not in ("unreachable", "error", "timeout"), host
    created = [r for r in kube_cluster.api.requests if r.method == "POST" and r.status == 201]
    assert [r.body["spec"]["nodeName"] for r in created] == [NODE]
    assert not [r for r in kube_cluster.api.requests if "labelSelector" in r.query
                and r.query["labelSelector"] == ["app=node-agent"]]  # fmt: skip
    assert _debug_pods(kube_cluster) == []


def test_a_job_through_debug_pods_reads_the_node_that_runs_and_reports_the_one_that_cannot(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """API double: `run --job pytorchjob/ml/llama-ft --kube-debug`: the job's nodes are
    gpu-node-01 (a test host: its debug pod runs and the node is read) and gpu-node-02 (no
    kubelet answers: its pod never runs, the node is unreachable with the reason); both pods
    are deleted."""
    kube_cluster.api.state.load([TRAINING_JOBS])
    done = _cli(
        kube_cluster, tmp_path, "run", "nccl-init-failure", "--job", "pytorchjob/ml/llama-ft",
        "--kube-debug", "--nsenter", str(kube_cluster.nsenter_pid), "--no-input",
        "--format", "json", "--timeout-per-host", "60", RUNBOOK_DEBUG_TIMEOUT="8",
    )  # fmt: skip
    assert done.returncode in (0, 1, 3), done.stderr[-2000:]
    verdict = json.loads(done.stdout)
    nodes = {n["node"]: n for n in verdict["nodes"]}
    assert nodes["gpu-node-01"]["status"] not in ("unreachable", "error", "timeout")
    assert nodes["gpu-node-01"]["target"] == "kubectl-debug://gpu-node-01"
    assert nodes["gpu-node-02"]["status"] == "unreachable"
    assert "did not run within 8s" in nodes["gpu-node-02"]["error"]
    created = sorted(
        r.body["spec"]["nodeName"] for r in kube_cluster.api.requests
        if r.method == "POST" and r.resource == "pods" and r.status == 201
    )  # fmt: skip
    assert created == ["gpu-node-01", "gpu-node-02"]
    assert _debug_pods(kube_cluster) == []


def test_every_shipped_kubernetes_manifest_is_valid_against_the_v1_32_schemas(
    tmp_path: Path,
) -> None:
    """kubernetes-validate, offline (run with no network: its schemas are in the package), in
    strict mode (an unknown field fails): the node agent, both RBAC files, the sweep's CronJob;
    and it does fail a manifest with a misspelt field."""
    files = sorted((Path(__file__).parents[2] / "examples").rglob("*.yaml"))
    kube = [f for f in files if "apiVersion:" in f.read_text()]
    assert {f.name for f in kube} >= {
        "node-agent.yaml",
        "runbook-agent-rbac.yaml",
        "runbook-debug-rbac.yaml",
        "kubernetes-cronjob.yaml",
    }
    # in a network namespace of its own: no network at all, so the schemas are the package's
    command = ["unshare", "--net", sys.executable, "-m", "kubernetes_validate", "-k", "1.32.0",
               "--strict"]  # fmt: skip
    done = subprocess.run([*command, *map(str, kube)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    daemonset = next(d for d in manifest("node-agent.yaml") if d["kind"] == "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    (container,) = spec["containers"]
    assert container["securityContext"] == {"privileged": True, "readOnlyRootFilesystem": True}
    assert container["resources"]["limits"]["memory"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        (kube[0].read_text()).replace("apiVersion: v1\nkind:", "apiVersion: v1\nkindd: x\nkind:", 1)
    )
    assert subprocess.run([*command, str(broken)], capture_output=True, timeout=120).returncode != 0
