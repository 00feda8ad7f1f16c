"""The memory estimate measured from real processes in a real memory cgroup.

A "rank" (a Python process started inside a fresh memory cgroup of this machine, v1 or v2)
touches RANK_MIB of anonymous memory and writes SHM_MIB into a tmpfs file (a private tmpfs,
mounted in a mount namespace of its own, as a pod's `/dev/shm` emptyDir is; its pages are
charged to the writer's cgroup as shmem), then forks two "workers" that touch WORKER_MIB each
and rename themselves `pt_data_worker` as PyTorch's DataLoader does (workers that keep their
rank's name are covered by the real `same-comm` capture of tests/unit/test_procmem.py); a
third child, like multiprocessing's resource_tracker, keeps the rank's name and must count as
a helper, not a worker. The shipped runbook's own cgroup-memory
probes then run against that cgroup with the local transport, the registered parsers read what
they printed, and the estimate is held to what was allocated and to the cgroup's real peak.
The same tree is then collected into a bundle by `runbook collect --target local` and
estimated by `estimate-memory`, which must give the same figures.

Everything is removed in teardown, pass or fail: the cgroup's tasks are killed and the cgroup
removed (tests/scenarios/cgroups.py), the tmpfs goes with its mount namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runbook import bundle
from runbook.conductor import Conductor
from runbook.parsers import get
from runbook.remedies import estimate
from runbook.spec import load_file, resolve
from runbook.transports import framing
from runbook.transports.local import LocalTransport
from tests.scenarios.cgroups import MIB, MemoryCgroup, sweep_stale

pytestmark = pytest.mark.live

RANK_MIB, WORKER_MIB, SHM_MIB = 96, 32, 24
LIMIT = 512 * MIB

TREE = textwrap.dedent(
    """
    import ctypes, os, sys, time
    MiB = 1 << 20
    shm_dir, ready, rank_mib, worker_mib, shm_mib = sys.argv[1:6]

    def touch(n):
        b = bytearray(n)
        for i in range(0, n, 4096):
            b[i] = 1
        return b

    cache = touch(int(rank_mib) * MiB)
    with open(os.path.join(shm_dir, "batch.bin"), "wb") as f:
        f.write(b"\\1" * (int(shm_mib) * MiB))
    children = []
    for k in range(3):
        pid = os.fork()
        if pid == 0:
            if k < 2:  # PR_SET_NAME, as torch's DataLoader worker loop does
                ctypes.CDLL(None).prctl(15, b"pt_data_worker", 0, 0, 0)
                own = touch(int(worker_mib) * MiB)
            open(f"{ready}.{k}", "w").close()
            time.sleep(300)
            os._exit(0)
        children.append(pid)
    while not all(os.path.exists(f"{ready}.{k}") for k in range(3)):
        time.sleep(0.02)
    open(ready, "w").close()
    time.sleep(300)
    """
)


@dataclass
class Tree:
    cgroup: MemoryCgroup
    proc: subprocess.Popen[bytes]
    pid: int


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    # as root, like the rest of the suite (tests/run.sh): a missing memory controller or
    # missing privileges is a failure here, never a skip
    sweep_stale()
    work = tmp_path_factory.mktemp("estimate-live")
    script = work / "tree.py"
    script.write_text(TREE)
    shm = work / "shm"
    shm.mkdir()
    ready = work / "ready"
    cg = MemoryCgroup("estimate", LIMIT)
    proc = None
    try:
        # into the cgroup first, then the mount namespace, then the tmpfs, then the rank:
        # every page of the tree (and of the tmpfs) is charged to the cgroup
        inner = (
            f"mount -t tmpfs -o size={2 * SHM_MIB}m rbk-estimate-shm {shm} && "
            f"exec {sys.executable} {script} {shm} {ready} {RANK_MIB} {WORKER_MIB} {SHM_MIB}"
        )
        proc = subprocess.Popen(
            ["sh", "-c", f'echo $$ > {cg.procs_file} && exec unshare --mount '
             f'--propagation private sh -c "{inner}"'],
            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"the process tree did not come up: rc {proc.poll()}: {err}")
            time.sleep(0.05)
        yield Tree(cg, proc, proc.pid)
    finally:
        cg.remove()  # kills every task in it first
        if proc is not None:
            proc.wait(timeout=10)
            if proc.stderr:
                proc.stderr.close()


def probe_facts(cg: MemoryCgroup) -> tuple[dict[str, Any], float]:
    """The shipped runbook's cgroup-memory probes over the local transport, parsed by the
    registered parsers, as a run does."""
    runbook = load_file(resolve("nccl-init-failure"))
    stage = runbook.stage("cgroup-memory")
    probes, errors = Conductor(runbook, {"cgroup_dir": str(cg.path)}).probes(stage)
    assert not errors
    transport = LocalTransport()
    files = {}
    started = time.monotonic()
    token = framing.new_token()
    for probe in probes:
        result = transport.run(framing.prepare(probe, token))
        files.update({p.name: p for p in bundle.split_multi(result, token)})
    elapsed = time.monotonic() - started
    return {name: get(name).func(files, {"vars": {}}) for name in stage.parse}, elapsed


def test_measured_rank_and_workers_are_what_they_allocated(tree: Tree) -> None:
    facts, elapsed = probe_facts(tree.cgroup)
    procmem = facts["procmem"]
    assert procmem["collected"] and elapsed < 5
    roles = {p["pid"]: p for p in procmem["processes"]}
    rank = roles[tree.pid]
    assert rank["role"] == "rank"
    workers = [p for p in procmem["processes"] if p["role"] == "worker"]
    assert {w["rank_pid"] for w in workers} == {tree.pid} and len(workers) == 2
    assert {w["name"] for w in workers} == {"pt_data_worker"}
    helpers = [p for p in procmem["processes"] if p["why"] == f"helper process of rank {tree.pid}"]
    assert len(helpers) == 1 and helpers[0]["name"] == rank["name"]
    # the rank: what it touched plus the interpreter (a few MiB), nothing of the tmpfs file
    assert RANK_MIB * MIB <= rank["own_anon_bytes"] <= (RANK_MIB + 12) * MIB, rank
    for w in workers:
        # each worker's own pages, not its rank's 96 MiB again (its RssAnon counts those)
        assert w["anon_bytes"] >= (RANK_MIB + WORKER_MIB) * MIB
        assert abs(w["own_anon_bytes"] - WORKER_MIB * MIB) <= 3 * MIB, w
    # every anonymous page once: the cgroup's own count, read at the same moment
    assert abs(procmem["total_anon_bytes"] - facts["cgroup"]["anon_bytes"]) <= 0.03 * (
        facts["cgroup"]["anon_bytes"]
    )
    # the tmpfs file is mapped by no one: only the cgroup knows it
    assert abs(facts["cgroup"]["shmem_bytes"] - SHM_MIB * MIB) <= MIB


def test_the_estimated_peak_matches_the_cgroups_real_peak(tree: Tree) -> None:
    facts, _ = probe_facts(tree.cgroup)
    est = estimate.from_facts(facts)
    shm = est.term("tmpfs/shmem")
    assert shm is not None and abs(shm.bytes - SHM_MIB * MIB) <= MIB
    assert est.inputs.ranks.value == 1 and est.inputs.workers.value == 2
    real = tree.cgroup.peak_bytes()
    # the cgroup also counts page cache and kernel memory the estimate leaves out
    assert real * 0.9 <= est.peak_bytes <= real * 1.05, (est.peak_bytes, real)
    assert not est.below_measured_peak
    assert est.limit_bytes >= est.peak_bytes * 1.2
    # a node that cannot hold the limit refuses it; one that can with 1 GiB to spare does not
    small = estimate.from_facts(facts, {"allocatable": est.limit_bytes - MIB})
    assert "is at or above the node's allocatable" in small.refused
    assert estimate.from_facts(facts, {"allocatable": est.limit_bytes + 1024 * MIB}).refused == ""


def test_collect_then_estimate_memory_gives_the_same_figures(
    tree: Tree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bundle"
    env = {**os.environ, "RUNBOOK_STATE_DIR": str(tmp_path / "state")}
    collected = subprocess.run(
        [sys.executable, "-m", "runbook", "collect", "--target", "local", "--cgroup",
         str(tree.cgroup.path), "-o", str(out)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stderr
    assert (out / "procmem" / f"{tree.pid}.status").is_file()
    assert not any(p.name.endswith(("cmdline", "environ")) for p in (out / "procmem").iterdir())

    from runbook.cli.app import cli, main
    from runbook.cli.estimate import estimate_memory

    cli.add_command(estimate_memory)
    assert main(["estimate-memory", str(out), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    facts, _ = probe_facts(tree.cgroup)
    live = estimate.from_facts(facts)
    # the same processes read a moment apart: within a MiB of each other
    assert abs(data["peak_bytes"] - live.peak_bytes) <= MIB
    assert data["inputs"]["ranks"]["value"] == 1
    assert data["inputs"]["worker_cache"]["source"].startswith("measured: /proc/")
