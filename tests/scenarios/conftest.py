"""Fixtures of the scenario suite (see tests/scenarios/__init__.py for what each scenario is).

* ``scenario_hosts`` (module): a factory of test hosts that live for the whole module, so a
  scenario's failure is produced once and several tests read it; removed at the module's end;
* ``memory_cgroups`` (module): a factory of real memory cgroups, each removed (its tasks
  killed first) at the module's end, pass or fail;
* ``nodes`` (module): ``nodes(host, shm_bytes=...)`` -> :class:`~tests.scenarios.job.Node`,
  unmounted at the module's end;
* ``job_on_node`` (module): ``job_on_node(name, ranks, ...)`` brings up a host dressed as a
  node, makes a decoy OOM in a neighbour cgroup, runs the job in a cgroup of its own, then
  diagnoses the host over SSH; returns an :class:`Outcome` (everything is removed at the
  module's end);
* ``diagnose`` (session): runs ``python -m runbook run nccl-init-failure`` over SSH against a
  host as on-call would (``RBK_SCENARIO_VERDICTS=DIR`` keeps each verdict there as JSON), and
  returns a :class:`Diagnosis`.

Teardown order is the reverse of setup: nodes unmount, cgroups are emptied and removed, then the
hosts (and every process left in their namespaces) go.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.scenarios import shims
from tests.scenarios.cgroups import MIB, MemoryCgroup, foreign_oom, sweep_stale
from tests.scenarios.job import JobResult, Node, RankSpec, TrainingJob


@dataclass
class Diagnosis:
    """What ``runbook run … --format json`` said about a host, and how long it took."""

    verdict: dict[str, Any]
    wall_s: float
    stderr: str
    argv: list[str]

    def stage(self, stage_id: str) -> dict[str, Any]:
        return next(s for s in self.verdict["stages"] if s["id"] == stage_id)

    def facts(self, stage_id: str, parser: str) -> dict[str, Any]:
        facts: dict[str, Any] = self.stage(stage_id)["facts"].get(parser, {})
        return facts

    @property
    def statuses(self) -> dict[str, str]:
        return {s["id"]: s["status"] for s in self.verdict["stages"]}

    @property
    def causes(self) -> set[str]:
        """Every cause a finding of the chain points to."""
        return {c["cause"] for c in self.verdict["chain"] if "cause" in c}

    @property
    def proposal_kinds(self) -> list[str]:
        return [p["kind"] for p in self.verdict["proposals"]]

    def explain(self) -> str:
        """For assertion messages: the verdict's head and chain."""
        v = self.verdict
        chain = "\n".join(f"  - [{c['stage']}] {c.get('cause', '-')}: {c['finding']}"
                          for c in v["chain"])
        failed = {s["id"]: s.get("not_collected") or s.get("errors")
                  for s in v["stages"] if s["status"] == "error"}
        return (f"root_cause={v['root_cause']} first_anomaly={v['first_anomaly']}\n"
                f"chain:\n{chain}\nstatuses={self.statuses}\nstage errors={failed}")


@pytest.fixture(scope="session", autouse=True)
def _sweep_stale_cgroups() -> None:
    """Cgroups a killed earlier run left behind (their owner pid is gone) are removed first."""
    sweep_stale()


@pytest.fixture(scope="module")
def scenario_hosts(host_network: HostNetwork) -> Iterator[HostFactory]:
    factory = HostFactory(host_network)
    yield factory
    factory.remove_all()


@pytest.fixture(scope="module")
def memory_cgroups() -> Iterator[Any]:
    made: list[MemoryCgroup] = []

    def make(label: str, limit_bytes: int) -> MemoryCgroup:
        cg = MemoryCgroup(label, limit_bytes)
        made.append(cg)
        return cg

    yield make
    errors = []
    for cg in reversed(made):
        try:
            cg.remove()
        except Exception as exc:
            errors.append(f"{cg}: {exc}")
    if errors:
        raise RuntimeError("; ".join(errors))


@pytest.fixture(scope="module")
def nodes(scenario_hosts: HostFactory) -> Iterator[Any]:
    made: list[Node] = []

    def make(host: TestHost, *, shm_bytes: int | None = None) -> Node:
        node = Node(host, shm_bytes=shm_bytes)
        made.append(node)
        return node

    yield make
    for node in reversed(made):
        node.close()


@pytest.fixture(scope="session")
def diagnose(host_network: HostNetwork) -> Iterator[Any]:
    state = tempfile.mkdtemp(prefix="rbk-scn-state-")

    def run(
        host: TestHost,
        variables: Mapping[str, str] | None = None,
        *,
        nsenter: int | None = None,
        timeout: float = 120.0,
    ) -> Diagnosis:
        argv = [
            sys.executable, "-m", "runbook", "run", "nccl-init-failure",
            "--target", f"ssh://root@{host.address}:{host.port}",
            "--known-hosts", str(host_network.known_hosts_path),
            "--identity", str(host_network.client_key.private_path),
            "--connect-timeout", "5", "--no-input", "--format", "json",
        ]  # fmt: skip
        for name, value in (variables or {}).items():
            argv += ["--var", f"{name}={value}"]
        if nsenter is not None:
            argv.append(f"--nsenter={nsenter}")
        env = {**os.environ, "RUNBOOK_STATE_DIR": state, "COLUMNS": "200"}
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise AssertionError(f"runbook exited {proc.returncode}: {proc.stderr[-2000:]}\n"
                                 f"sshd log of {host.name}:\n{host.sshd_log_tail(15)}")
        verdict = json.loads(proc.stdout)
        keep = os.environ.get("RBK_SCENARIO_VERDICTS")  # a dir: keep each verdict, for reports
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            name = f"{host.name}{'-nsenter' if nsenter else ''}.json"
            (Path(keep) / name).write_text(json.dumps({"wall_s": wall, **verdict}, indent=1))
        return Diagnosis(verdict, wall, proc.stderr, argv)

    yield run
    subprocess.run(["rm", "-rf", state], check=False)


@dataclass
class Outcome:
    """A job that ran on a node, and the runbook's diagnosis of that node afterwards."""

    host: TestHost
    node: Node
    cgroup: MemoryCgroup
    decoy_memcg: str
    job: JobResult
    log_dir: Path
    diagnosis: Diagnosis


@pytest.fixture(scope="module")
def job_on_node(
    scenario_hosts: HostFactory,
    nodes: Any,
    memory_cgroups: Any,
    diagnose: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Any:
    def run(
        name: str,
        ranks: list[RankSpec | None],
        *,
        shm_bytes: int = 64 * MIB,
        limit_bytes: int = 2048 * MIB,
        timeout_s: float = 10.0,
        gpu_profile: str | None = "healthy-8gpu",
    ) -> Outcome:
        host = scenario_hosts(name)
        if gpu_profile:
            shims.install(host, shims.load_profile(gpu_profile))
        node = nodes(host, shm_bytes=shm_bytes)
        _, decoy = foreign_oom()
        cgroup = memory_cgroups(f"job-{name}", limit_bytes)
        log_dir = tmp_path_factory.mktemp(f"{name}-logs")
        job = TrainingJob(node, cgroup, ranks, log_dir=log_dir, timeout_s=timeout_s).run()
        diagnosis = diagnose(host, {"app_log_dir": str(log_dir), "cgroup_dir": str(cgroup.path),
                                    "nccl_log_dir": str(log_dir)})
        return Outcome(host, node, cgroup, decoy, job, log_dir, diagnosis)

    return run
