"""Benchmark: the approval desk's queue page over a queue of 10,000 proposals — the server's
time to answer, measured inside the process around the desk's own ASGI application (sign-in
middleware, the page's store queries, the template), not the network.

The queue is filled through the store's own write path (Store.enqueue, claim, finish,
decide): about 10 % pending, 5 % expired undecided, 65 % run (succeeded or failed), 20 %
denied, over 500 nodes and every queued kind, each proposal carrying an evidence chain, a
plan and a target the size a real one has. The desk is `runbook.desk.app.build` with a
trusted-proxy sign-in (the header from 127.0.0.1); each page is requested `--repeat` times
after two warm-ups, and the median (and the slowest) server time reported. The target: the
first page of the queue under 200 ms.

Backends: SQLite (on /dev/shm when there is one, as the store's directory would be on a local
disk), and PostgreSQL when its binaries are installed (a private server started for the run,
tests/pg/server.py; never the machine's own).

Run:  .venv/bin/python -m benchmarks.desk_queue [--proposals 10000] [--repeat 15]
                                                [--backend sqlite|postgresql|both] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: the pages measured; the first two are "the first page of the queue"
PAGES = {
    "queue (pending, first page)": "/queue",
    "queue (decided, first page)": "/queue?tab=decided",
    "queue (expired, first page)": "/queue?tab=expired",
    "queue (decided, one node)": "/queue?tab=decided&node=gpu-node-0042",
    "queue (decided, kind + severity)": "/queue?tab=decided&kind=node-drain&severity=critical",
    "queue (decided, page 100)": "/queue?tab=decided&page=100",
}
FIRST_PAGES = ("queue (pending, first page)", "queue (decided, first page)")
TARGET_MS = 200.0
CAUSES = ("shm-exhausted", "gpu-hardware", "ib-link-down", "memory-oom", "inconclusive")
USER = "bench@example.org"
HEADERS = {"X-Forwarded-Email": USER, "X-Forwarded-Groups": "gpu-oncall"}


def _evidence(rng: random.Random, cause: str, node: str) -> dict[str, Any]:
    line = (f"{node}:1234:1290 [3] transport/shm.cc:{rng.randint(100, 999)} NCCL WARN Call to "
            "posix_fallocate failed: No space left on device; Error while creating shared memory "
            f"segment /dev/shm/nccl-{rng.getrandbits(32):08x} (size {rng.randint(1, 9)}194304)")  # fmt: skip
    return {
        "root_cause": cause,
        "confidence": rng.choice(("high", "medium")),
        "surfaced_as": "nccl-init",
        "first_anomaly": {
            "source": f"nccl/rank-{rng.randint(0, 7)}.log",
            "line": 3,
            "time": "2026-12-05T23:10:04Z",
            "text": line,
        },
        "chain": [
            {"stage": stage, "finding": f"{stage}: {line[:120]}", "cause": cause}
            for stage in (
                "app-error",
                "nccl-init",
                "shm-p2p",
                "cgroup-memory",
                "kernel-logs",
                "decide",
            )
        ],
    }


def fill(db: str, n: int, *, seed: int = 7) -> dict[str, int]:
    """`n` proposals through the store's own writes; how many of each state."""
    from runbook.remedies import kinds
    from runbook.remedies.store import Store

    rng = random.Random(seed)
    queued_kinds = kinds.queued_names()
    counts: dict[str, int] = {}
    with Store(db) as store:
        for i in range(n):
            node = f"gpu-node-{i % 500:04d}"
            kind = queued_kinds[i % len(queued_kinds)]
            cause = CAUSES[(i // 7) % len(CAUSES)]
            roll = rng.random()
            state = ("pending" if roll < 0.10 else "expired" if roll < 0.15
                     else "denied" if roll < 0.35 else "ran")  # fmt: skip
            stored, _ = store.enqueue(
                key=f"{node}:{kind}:{i}", kind=kind, remedy=kind,
                summary=f"{kind} on {node}: what the evidence of {cause} asks for",
                params={"measured_bytes": str(rng.randint(1 << 30, 1 << 36)), "headroom": 1.25},
                evidence=_evidence(rng, cause, node), source=rng.choice(("run", "sweep")),
                ttl=0.001 if state == "expired" else 7 * 86400, node=node, root_cause=cause,
                playbook=f"playbooks/{kind}.yml",
                plan={"playbook": f"playbooks/{kind}.yml", "limit": node,
                      "inventory": {"all": {"hosts": {node: {"ansible_host": f"10.8.{i % 250}.7",
                                                             "ansible_user": "root"}}}},
                      "extravars": {"workload_patch_manifest": f"/srv/deploy/{node}/job.yaml",
                                    "workload_patch_size": "80Gi", "node": node},
                      "sources": {f"/srv/deploy/{node}/job.yaml": "0" * 64}},
                target={"url": f"ssh://root@{node}:22", "identities": [], "known_hosts": None},
                runbook="nccl-init-failure", variables={"manifest": f"/srv/deploy/{node}/job.yaml"},
                run_dir=f"/var/lib/nccl-runbook/runs/{i:06d}", requested_by="sweep",
            )  # fmt: skip
            if state == "denied":
                store.decide(stored.id, "denied", actor="oncall as alice", reason="change freeze")
            elif state == "ran":
                store.claim(stored.id, actor="oncall as bob")
                ok = rng.random() < 0.9
                store.finish(stored.id, ok=ok, result={
                    "stage": "apply", "status": "successful" if ok else "failed", "rc": 0 if ok else 2,
                    "diff": "--- before\n+++ after\n@@ -1 +1 @@\n-  medium: Memory\n+  sizeLimit: 80Gi\n",
                    "reason": None if ok else "kubectl patch: exit 1",
                })  # fmt: skip
            counts[state] = counts.get(state, 0) + 1
    return counts


class Timed:
    """An ASGI wrapper that keeps each request's time inside the application: from the call
    to the last byte of the response body handed to the server."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.times: list[float] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        start = time.perf_counter()

        async def timed(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.times.append(time.perf_counter() - start)

        await self.app(scope, receive, timed)


def desk_app(root: Path, db: str) -> Any:
    from runbook import config as config_mod
    from runbook.desk import app as desk_app_mod
    from runbook.desk import settings as settings_mod

    raw = {
        "base_url": "http://127.0.0.1:8080",
        "trusted_header": {"proxies": ["127.0.0.1/32"]},
        "allow": [{"groups": ["gpu-oncall"], "kinds": ["*"]}],
    }
    path = root / "config.yaml"
    path.write_text(json.dumps({"approvals": {"db": db, "audit_log": str(root / "audit.jsonl")},
                                "desk": raw}))  # fmt: skip
    config = config_mod.load(path, db=db)
    settings = settings_mod.load(raw, source=str(path), base_url=None, insecure_http=True)
    return desk_app_mod.build(config, settings)


async def measure(app: Any, repeat: int) -> dict[str, dict[str, float]]:
    import httpx

    timed = Timed(app)
    transport = httpx.ASGITransport(app=timed, client=("127.0.0.1", 40000))
    out: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080",
                                 headers=HEADERS) as client:  # fmt: skip
        for name, path in PAGES.items():
            for _ in range(2):  # warm-up: templates compiled, the database's pages cached
                answer = await client.get(path)
                if answer.status_code != 200:
                    raise SystemExit(f"{path}: HTTP {answer.status_code}: {answer.text[:300]}")
            timed.times.clear()
            rows = 0
            for _ in range(repeat):
                answer = await client.get(path)
                assert answer.status_code == 200, answer.status_code
                rows = answer.text.count('<li class="item')
            ms = [t * 1000 for t in timed.times]
            out[name] = {"median_ms": round(statistics.median(ms), 1),
                         "max_ms": round(max(ms), 1), "rows": rows}  # fmt: skip
    return out


@contextmanager
def backend(kind: str) -> Iterator[tuple[str, Path]]:
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="rbk-desk-bench-", dir=shm if shm.is_dir() else None))
    try:
        if kind == "sqlite":
            yield str(root / "approvals.db"), root
            return
        from tests.pg import server as pg

        running = pg.start()
        try:
            yield running.url(running.new_database()), root
        finally:
            running.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(kind: str, proposals: int, repeat: int) -> dict[str, Any]:
    with backend(kind) as (db, root):
        started = time.perf_counter()
        counts = fill(db, proposals)
        filled = time.perf_counter() - started
        app = desk_app(root, db)
        pages = asyncio.run(measure(app, repeat))
    first = max(pages[name]["median_ms"] for name in FIRST_PAGES)
    return {"backend": kind, "proposals": proposals, "states": counts,
            "fill_seconds": round(filled, 1), "repeat": repeat, "pages": pages,
            "first_page_median_ms": first, "target_ms": TARGET_MS,
            "within_target": first < TARGET_MS}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    kinds = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    results: list[dict[str, Any]] = []
    for kind in kinds:
        try:
            results.append(run(kind, args.proposals, args.repeat))
        except Exception as exc:  # a backend that cannot run here is reported, not hidden
            if kind == "postgresql" and type(exc).__name__ == "ServerMissing":
                results.append({"backend": kind, "not_run": str(exc)})
                continue
            raise
    if args.json:
        print(json.dumps(results, indent=2))
        return 0 if all(r.get("within_target", True) for r in results) else 1
    for r in results:
        if "not_run" in r:
            print(f"{r['backend']}: not run: {r['not_run']}")
            continue
        print(f"{r['backend']}: {r['proposals']} proposals {r['states']} "
              f"(filled in {r['fill_seconds']} s); server time, median of {r['repeat']} (max):")  # fmt: skip
        for name, m in r["pages"].items():
            print(f"  {name:34} {m['median_ms']:7.1f} ms ({m['max_ms']:.1f})  {m['rows']} rows")
        verdict = "within" if r["within_target"] else "OVER"
        print(
            f"  first page: {r['first_page_median_ms']} ms, {verdict} the {TARGET_MS:.0f} ms target"
        )
    return 0 if all(r.get("within_target", True) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
