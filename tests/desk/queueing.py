"""Proposals put in a desk's store the way a run puts them there (runbook.remedies.store,
real SQLite), with evidence as hostile as a job's log can make it."""

from __future__ import annotations

from typing import Any

from runbook.remedies.store import Store

HOSTILE = (
    '<script>document.title="owned"</script><img src=x onerror=alert(1)> '
    '[click me](javascript:alert(1)) <a href="javascript:alert(2)">link</a> **bold**'
)


def enqueue(db: Any, *, kind: str = "shm-size-limit", node: str = "gpu-node-07", n: int = 0,
            text: str = "Call to posix_fallocate failed: No space left on device",
            ttl: float = 3600.0, root_cause: str | None = "shm-exhausted",
            **extra: Any) -> str:  # fmt: skip
    evidence = {
        "root_cause": root_cause, "confidence": "high", "surfaced_as": "nccl-init",
        "first_anomaly": {"source": "nccl/rank-1.log", "line": 3, "time": None, "text": text},
        "chain": [{"stage": "shm-p2p", "finding": text, "cause": "shm-exhausted"}],
    }  # fmt: skip
    with Store(db) as store:
        stored, _ = store.enqueue(
            key=f"{node}:{kind}:{n}", kind=kind, remedy=kind, summary=f"{kind} for {node}",
            params={"measured_bytes": "1024"}, evidence=evidence, source="sweep", ttl=ttl,
            node=node, root_cause=root_cause,
            **{"plan": {"playbook": f"{kind}.yml", "inventory": {}, "extravars": {"v": text},
                        "runs_on": "localhost = this machine (local)"}, **extra},
        )  # fmt: skip
    return stored.id
