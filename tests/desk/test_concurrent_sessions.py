"""Fifty people at the desk while proposals are approved: the real `runbook desk serve`
(uvicorn) on 127.0.0.1, fifty sessions each signed in through a real OpenID Connect provider
(oidc-provider-mock), reading the queue, the decided tab, proposals and the audit trail in a
loop, while some of them approve three shm-size-limit proposals — several sessions the same
proposal at the same moment, and `runbook approvals approve` from the command line racing one
of them — and approve them again once they ran.

Each approval runs the real playbook through ansible-runner (check mode, then the real run,
patching a workload manifest). Asserted: every page read answers 200 (no error, no timeout),
the desk's log holds no traceback, each proposal ran exactly once (one `approved`, one `check`,
one `executed` in the audit trail, one real run's artifacts, its manifest patched), the audit
chain intact. The incident is a recorded bundle replayed (`replay://`): no node, no Kubernetes
API."""

from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from runbook import config as config_mod
from runbook.remedies.approval import Desk
from runbook.remedies.plans import Target
from runbook.remedies.store import Store
from runbook.verdict import Verdict
from tests.desk.conftest import DeskServer, oidc_desk, start_desk, stop_desk
from tests.integration.conftest import cli_env
from tests.tools import bundles, manifests

pytestmark = pytest.mark.ansible

SESSIONS = 50
PROPOSALS = 3
BUNDLE = bundles.path("shm-exhausted")
MANIFEST = manifests.job()
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Reads:
    """What the reading sessions saw: (path, status or the exception's name, seconds)."""

    seen: list[tuple[str, Any, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, path: str, status: Any, took: float) -> None:
        with self.lock:
            self.seen.append((path, status, took))


@dataclass
class Queue:
    server: DeskServer
    pids: list[str]
    manifests: dict[str, Path]


def verdict_of_the_incident(tmp_path: Path) -> Verdict:
    """The replayed incident's verdict, as a run writes it (verdict.json of its run dir)."""
    manifest = tmp_path / "probe.yaml"
    manifest.write_text(MANIFEST)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "runbook", "run", "nccl-init-failure", "--target",
         f"replay://{BUNDLE}", "--no-input", "--var", f"manifest={manifest}",
         "--run-dir", str(run_dir)],
        env=cli_env(tmp_path / "probe"), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return Verdict.from_json(json.loads((run_dir / "verdict.json").read_text()))


@pytest.fixture
def queue(oidc_provider: str, tmp_path: Path) -> Iterator[Queue]:
    """The desk, and three shm-size-limit proposals queued in its store, each against a
    manifest of its own (three nodes of the same incident)."""
    verdict = verdict_of_the_incident(tmp_path)
    # every sign-in here comes from 127.0.0.1: the per-client limit is raised for the test
    server = start_desk(tmp_path / "desk", oidc_desk(oidc_provider, login_attempts=1000))
    try:
        pids: list[str] = []
        manifests: dict[str, Path] = {}
        with Desk(config_mod.load(None, db=str(server.db))) as desk:
            for n in range(PROPOSALS):
                manifest = tmp_path / f"job-{n}.yaml"
                manifest.write_text(MANIFEST)
                queued = desk.queue_verdict(
                    verdict, node=f"gpu-node-{n:02d}", target=Target(url=f"replay://{BUNDLE}"),
                    runbook_id="nccl-init-failure", variables={"manifest": str(manifest)},
                    run_dir=None, requested_by="sweep",
                )  # fmt: skip
                (pid,) = [q.proposal.id for q in queued if q.proposal.kind == "shm-size-limit"]
                pids.append(pid)
                manifests[pid] = manifest
        yield Queue(server, pids, manifests)
    finally:
        stop_desk(server)


def signed_in(server: DeskServer, sub: str) -> httpx.Client:
    """A client signed in as `sub` through the provider's sign-in form."""
    client = server.client(follow_redirects=False)
    client.timeout = httpx.Timeout(60.0)
    start = client.get("/login/start")
    assert start.status_code == 302, start.text
    form = httpx.post(start.headers["location"], data={"sub": sub}, follow_redirects=False,
                      timeout=60)  # fmt: skip
    assert form.status_code in (302, 303), form.text[:500]
    back = client.get(form.headers["location"])
    assert back.status_code == 303, back.text[:2000]
    return client


def approve(client: httpx.Client, pid: str) -> int:
    page = client.get(f"/p/{pid}")
    assert page.status_code == 200, page.status_code
    token = CSRF.search(page.text)
    assert token, "no CSRF token on the proposal's page"
    return client.post(f"/p/{pid}/approve", data={"csrf": token.group(1)}).status_code


def state(db: Path, pid: str) -> str:
    with Store(str(db), readonly=True) as store:
        return store.get(pid).state


def audit_events(server: DeskServer) -> list[dict[str, Any]]:
    path = server.root / "state" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_fifty_sessions_read_while_approvals_run_and_each_approval_runs_once(
    queue: Queue,
) -> None:
    server = queue.server
    # people sign in one after another (the provider is a small test server), then read at once
    clients = [signed_in(server, ("alice", "bob")[n % 2]) for n in range(SESSIONS)]
    assert len({c.cookies.get("rbk_desk") for c in clients}) == SESSIONS  # fifty sessions

    reads = Reads()
    stop = threading.Event()
    pages = ["/queue", "/queue?tab=decided", "/audit", *(f"/p/{pid}" for pid in queue.pids)]

    def read_loop(client: httpx.Client, seed: int) -> None:
        rng = random.Random(seed)
        rounds = 0
        while not stop.is_set() or rounds < 3:
            path = rng.choice(pages)
            started = time.monotonic()
            try:
                status: Any = client.get(path).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            reads.add(path, status, time.monotonic() - started)
            rounds += 1
            time.sleep(rng.uniform(0.2, 0.8))  # a person reading, not a load generator

    readers = [threading.Thread(target=read_loop, args=(c, n), daemon=True)
               for n, c in enumerate(clients)]  # fmt: skip
    for reader in readers:
        reader.start()

    # several sessions approve each proposal at the same moment; the command line races the
    # first of them from another process
    env = server.env
    cli = subprocess.Popen(
        [sys.executable, "-m", "runbook", "approvals", "approve", queue.pids[0], "--as", "carol"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    approvers = [(pid, clients[n * 5 + k]) for n, pid in enumerate(queue.pids) for k in range(5)]
    with ThreadPoolExecutor(len(approvers)) as pool:
        posted = list(pool.map(lambda pc: approve(pc[1], pc[0]), approvers))
    assert posted == [303] * len(approvers), posted

    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        if all(state(server.db, pid) in ("succeeded", "failed") for pid in queue.pids):
            break
        time.sleep(1.0)
    cli_out, cli_err = cli.communicate(timeout=300)
    # approved again once they ran: refused, never run a second time
    again = [approve(clients[40 + n], pid) for n, pid in enumerate(queue.pids)]
    assert again == [303] * PROPOSALS
    time.sleep(2.0)
    stop.set()
    for reader in readers:
        reader.join(60)

    states = {pid: state(server.db, pid) for pid in queue.pids}
    assert set(states.values()) == {"succeeded"}, (states, server.log())
    # the command line either won the race for its proposal or was told it lost
    assert cli.returncode == 0 or (
        cli.returncode == 1 and ("already being executed" in cli_err or "never run twice"
                                 in cli_err)
    ), (cli.returncode, cli_out, cli_err)  # fmt: skip

    events = audit_events(server)
    for pid in queue.pids:
        mine = [e["event"] for e in events if e.get("proposal") == pid]
        assert mine.count("approved") == 1, (pid, mine)
        assert mine.count("check") == 1 and mine.count("executed") == 1, (pid, mine)
        assert "failed" not in mine, (pid, mine)
        volume = yaml.safe_load(queue.manifests[pid].read_text())["spec"]["template"]["spec"]
        assert volume["volumes"][0]["emptyDir"].get("sizeLimit"), queue.manifests[pid].read_text()
    applies = list((server.root / "state" / "remedies").glob("*/ansible-apply-*"))
    assert len(applies) == PROPOSALS, applies
    verified = subprocess.run([sys.executable, "-m", "runbook", "audit", "verify"], env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert verified.returncode == 0 and "chain intact" in verified.stdout, verified.stderr

    bad = [(path, status) for path, status, _ in reads.seen if status != 200]
    assert not bad, bad[:20]
    assert len(reads.seen) >= SESSIONS * 3
    log = server.log()
    assert "Traceback" not in log and "internal error" not in log, log
    took = sorted(t * 1000 for _, _, t in reads.seen)
    median, p95 = statistics.median(took), took[int(len(took) * 0.95)]
    print(f"\n{len(took)} page reads by {SESSIONS} sessions during {PROPOSALS} approvals: "
          f"median {median:.0f} ms, p95 {p95:.0f} ms, max {took[-1]:.0f} ms")  # fmt: skip
