"""Benchmark: a guided `runbook run nccl-init-failure` over SSH, over `kubectl://` (the node agent)
and over `kubectl-debug://` (a debug pod made for the run), on the same test host; and the
`kubectl exec` requests one node's walk sends, one exec a probe (as before batching) against
one exec a burst.

Brings up one real OpenSSH test host in a network namespace (tests/hosts harness, needs root)
dressed as a healthy 8-GPU node (the scenario shims of tests/scenarios), and the Kubernetes API
double of tests/k8s (no API server can run here: a recorded double, its pods/exec served over
WebSocket to the real kubectl, the command run on the test host as its node) with the shipped
node agent's pod on that node. Times, as medians over --repeat runs:

  * `runbook run … --target ssh://…`, `--target kubectl://node/NODE` and `--target
    kubectl-debug://NODE` as a user runs them (a new Python process each), and `--target
    kubectl://kube-system/POD` with the package as of BEFORE (git archive: one exec a probe);
    `--nsenter PID` enters the test host's namespaces (nsenter --target 1 is refused on test
    machines);
  * one node's walk in this process over the node agent, its probes sent one exec each (a
    transport that offers no batches: what every kubectl:// walk did before) and batched;
    each with the exec requests the API saw (what a sweep sends per node).

Run:  sudo .venv/bin/python -m benchmarks.kube_exec [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from benchmarks.ssh_connection_reuse import median_text
from runbook.executor import execute
from runbook.spec import load_file, resolve
from runbook.transports.nsenter import KubectlTransport
from tests.hosts.harness import HostNetwork
from tests.k8s.fixtures import KubeApi, kubectl_env
from tests.k8s.nodes import agent_pod, namespace_object
from tests.scenarios import shims

NODE = "gpu-node-01"


#: the last revision whose kubectl:// transport ran one `kubectl exec` a probe
BEFORE = "b07da53^"


def transport_before(namespace: str, pod: str, nsenter_pid: int) -> Any:
    """The kubectl:// transport as of BEFORE (one exec a probe, its connection check an exec
    of `true`), loaded from git; None when git cannot show it."""
    done = subprocess.run(["git", "show", f"{BEFORE}:runbook/transports/nsenter.py"],
                          capture_output=True, text=True, cwd=Path(__file__).parent)  # fmt: skip
    if done.returncode != 0:
        return None
    module = types.ModuleType("nsenter_before")
    exec(compile(done.stdout, f"{BEFORE}:runbook/transports/nsenter.py", "exec"), module.__dict__)
    return module.KubectlTransport(namespace, pod, nsenter_pid=nsenter_pid)


def package_before(into: Path) -> Path | None:
    """The runbook package as of BEFORE, unpacked under `into` (git archive), for the CLI
    runs of kubectl:// as it was; None when git cannot give it."""
    archive = subprocess.run(["git", "archive", BEFORE, "runbook"], capture_output=True,
                             cwd=Path(__file__).parent.parent)  # fmt: skip
    if archive.returncode != 0:
        return None
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _count_batches(transport: KubectlTransport) -> list[int]:
    """The batches the walk sends through `transport` (their probe counts), as it sends them:
    one exec request each is the target."""
    sent: list[int] = []
    inner = transport.exec.run_batch

    def counted(probes: Any, deliver: Any, spill: Any, **kw: Any) -> None:
        sent.append(len(probes))
        inner(probes, deliver, spill, **kw)

    transport.run_batch = transport.exec.run_batch = counted  # type: ignore[method-assign]
    return sent


def _execs(api: KubeApi) -> int:
    return sum(1 for r in api.requests if r.resource == "pods/exec")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="rbk-bench-") as tmp, HostNetwork(Path(tmp)) as net:
        host = net.add_host(NODE)
        shims.install(host, shims.load_profile("healthy-8gpu"))
        api = KubeApi(Path(tmp) / "kubeconfig")
        try:
            api.server_version.update(minor="32", gitVersion="v1.32.4")  # kubectl 1.32 runs
            api.attach_node(NODE, host, net)
            for name in ("default", "kube-system"):
                if api.state.get("namespaces", name) is None:
                    api.state.put(namespace_object(name))
            agent = agent_pod(NODE)
            api.state.put(agent)
            env.update(kubectl_env(api, Path(tmp)))
            os.environ.update({k: env[k] for k in ("KUBECONFIG", "HOME", "KUBECACHEDIR")})
            env["RUNBOOK_STATE_DIR"] = str(Path(tmp) / "state")
            pid = str(host.sshd_pid)
            base = [sys.executable, "-m", "runbook", "run", "nccl-init-failure", "--no-input"]
            targets = {
                "ssh://": ["--target", f"ssh://root@{host.address}:{host.port}",
                           "--known-hosts", str(net.known_hosts_path),
                           "--identity", str(net.client_key.private_path)],
                "kubectl://node/": ["--target", f"kubectl://node/{NODE}", "--nsenter", pid],
                "kubectl-debug://": ["--target", f"kubectl-debug://{NODE}", "--nsenter", pid],
            }  # fmt: skip
            old = package_before(Path(tmp) / "before")
            if old is not None:  # as it was: the agent named by its pod, one exec a probe
                targets["kubectl:// (before)"] = [
                    "--target", f"kubectl://kube-system/{agent['metadata']['name']}",
                    "--nsenter", pid,
                ]  # fmt: skip
            cli: dict[str, list[float]] = {name: [] for name in targets}
            execs: dict[str, int] = {}
            envs = {name: env for name in targets}
            if old is not None:
                envs["kubectl:// (before)"] = {**env, "PYTHONPATH": str(old)}
            for name, words in targets.items():  # one untimed run each: bytecode, kubectl cache
                subprocess.run([*base, *words, "--run-dir", f"{tmp}/warm-{len(name)}"],
                               check=False, capture_output=True, env=envs[name],
                               cwd=old if "before" in name else None)  # fmt: skip
            for i in range(args.repeat):
                for name, words in targets.items():
                    before = _execs(api)
                    start = time.perf_counter()
                    done = subprocess.run(
                        [*base, *words, "--run-dir", f"{tmp}/run-{i}-{len(name)}"],
                        capture_output=True, text=True, env=envs[name],
                        cwd=old if "before" in name else None,
                    )  # fmt: skip
                    cli[name].append(time.perf_counter() - start)
                    if done.returncode not in (0, 1):
                        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr[-500:]}")
                    execs[name] = _execs(api) - before
            runbook = load_file(resolve("nccl-init-failure"))
            walks: dict[str, list[float]] = {"one exec a probe": [], "one exec a burst": []}
            pod = agent["metadata"]["name"]
            walk_execs: dict[str, int] = {}
            probes: dict[str, int] = {}
            batches: list[int] = []  # the batches the last batched walk sent
            for _ in range(args.repeat):
                for name in walks:
                    before = _execs(api)
                    start = time.perf_counter()
                    walked = (
                        transport_before("kube-system", pod, int(pid))
                        if name == "one exec a probe"
                        else KubectlTransport("kube-system", pod, nsenter_pid=int(pid))
                    )
                    if walked is None:
                        continue
                    if isinstance(walked, KubectlTransport):
                        batches = _count_batches(walked)
                    try:
                        result = execute(runbook, walked)
                    finally:
                        walked.close()
                    walks[name].append(time.perf_counter() - start)
                    walk_execs[name] = _execs(api) - before
                    probes[name] = len(result.results)
            before = _execs(api)
            sweep = subprocess.run(
                [sys.executable, "-m", "runbook", "sweep", "nccl-init-failure",
                 "--kube-selector", f"kubernetes.io/hostname={NODE}", "--nsenter", pid,
                 "--report", f"{tmp}/sweep"], capture_output=True, text=True, env=env,
            )  # fmt: skip
            if sweep.returncode not in (0, 1):
                raise SystemExit(f"sweep: exit {sweep.returncode}: {sweep.stderr[-500:]}")
            sweep_execs = _execs(api) - before
        finally:
            api.stop()
    ssh = statistics.median(cli["ssh://"])
    print(f"runbook run nccl-init-failure, new process each, {args.repeat} runs "
          "(exec requests the API saw in the last run):")  # fmt: skip
    for name, samples in cli.items():
        ratio = statistics.median(samples) / ssh
        shown = "" if name == "ssh://" else f"  {ratio:.2f}x ssh, {execs[name]} execs"
        print(f"  {name:<20} {median_text(samples)}{shown}")
    print(f"one node's walk over the node agent, in this process ({args.repeat} runs; one exec "
          f"a probe: the transport as of {BEFORE}):")  # fmt: skip
    for name, samples in walks.items():
        if not samples:
            print(f"  {name:<18} not run: git cannot show {BEFORE}")
            continue
        print(f"  {name:<18} {median_text(samples)}  {walk_execs[name]} exec requests "
              f"for {probes[name]} probe results")  # fmt: skip
    print(f"  the batched walk's batches (probes each): {batches}")
    print(f"runbook sweep --kube-selector (one node): {sweep_execs} exec requests for the node")
    return 0


if __name__ == "__main__":
    sys.exit(main())
