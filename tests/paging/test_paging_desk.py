"""Pages and the web desk: the link every notice carries opens the proposal's page on the desk
itself, and a denial posted on the desk resolves the page at once without waiting on the
receivers. The desk is its own ASGI application (runbook.desk.app.build) called in this
process through httpx, signed in by the trusted-proxy header from 127.0.0.1; the store is real
SQLite; PagerDuty and Slack are local receivers checking their documented shapes."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from runbook import config as config_mod
from runbook.desk import app as desk_app
from runbook.desk import settings as desk_settings
from runbook.oncall import publish
from runbook.remedies.store import Store
from tests.paging import receivers as rx

BASE = "http://127.0.0.1:8080"
DESK = {
    "base_url": BASE,
    "trusted_header": {"proxies": ["127.0.0.1/32"]},
    "allow": [{"groups": ["gpu-oncall"], "kinds": ["*"]}],
}
HEADERS = {"X-Forwarded-Email": "alice@example.org", "X-Forwarded-Groups": "gpu-oncall"}


def enqueue(db: Path) -> str:
    with Store(str(db)) as store:
        stored, _ = store.enqueue(
            key="gpu-node-07:shm-size-limit", kind="shm-size-limit", remedy="shm-size-limit",
            summary="raise /dev/shm", params={}, evidence={"confidence": "high"}, source="sweep",
            ttl=86400, node="gpu-node-07", root_cause="shm-exhausted",
        )  # fmt: skip
    return stored.id


async def deny_on_the_desk(app: Any, pid: str, link: str) -> tuple[int, int, float]:
    """GET the notice's link on the desk, then deny from that page: (page status, deny
    status, seconds the denial took)."""
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=HEADERS) as client:
        page = await client.get(urlsplit(link).path)
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token, page.text[:500]
        started = time.monotonic()
        denied = await client.post(f"/p/{pid}/deny",
                                   data={"csrf": token.group(1), "reason": "freeze"})  # fmt: skip
        return page.status_code, denied.status_code, time.monotonic() - started


def paged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pagerduty: rx.Receiver, slack: rx.Receiver
) -> tuple[Path, Path, Any, str, dict[str, Any]]:
    """A desk's config paging both receivers, one proposal queued and its pages sent:
    (store, config file, config, proposal id, PagerDuty's trigger)."""
    db = tmp_path / "approvals.db"
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({
        "approvals": {"db": str(db)},
        "desk": DESK,
        "notify": {"pagerduty": {"url": pagerduty.url}, "slack": {"webhook_url": slack.url},
                   "timeout": "1s"},
    }))  # fmt: skip
    monkeypatch.setenv("RUNBOOK_PAGERDUTY_ROUTING_KEY", rx.ROUTING_KEY)
    config = config_mod.load(path)
    pid = enqueue(db)
    with Store(str(db)) as store:
        assert publish(config, store).notices_sent == 2
    (trigger,) = pagerduty.accepted
    return db, path, config, pid, trigger


def test_a_notices_link_opens_the_proposal_on_the_desk_and_a_denial_there_resolves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with rx.receiver("pagerduty") as pagerduty, rx.receiver("slack") as slack:
        _, path, config, pid, trigger = paged(tmp_path, monkeypatch, pagerduty, slack)
        link = trigger["links"][0]["href"]
        assert link == f"{BASE}/p/{pid}"

        slack.mode = "hang"  # Slack holds each request 30 s: the denial does not wait on it
        app = desk_app.build(config, desk_settings.load(DESK, source=str(path), base_url=None,
                                                        insecure_http=True))  # fmt: skip
        page, denied, took = asyncio.run(deny_on_the_desk(app, pid, link))
        try:
            assert (page, denied) == (200, 303)
            assert took < 1.0, took
            resolve = wait_for(lambda: resolves(pagerduty), 15)
            assert [p for p in pagerduty.problems if p] == []
            assert resolve[0]["dedup_key"] == trigger["dedup_key"]
        finally:
            app.state.desk.publisher.stop()


def resolves(pagerduty: rx.Receiver) -> list[Any]:
    return [a for a in pagerduty.accepted if a["event_action"] == "resolve"]


def wait_for(found: Any, timeout: float) -> Any:
    """`found()`'s first truthy answer, asked every 0.1 s for `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        answer = found()
        if answer:
            return answer
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s")


def test_a_denial_on_the_desk_never_waits_on_a_receiver_that_hangs_and_the_page_resolves_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue owes Slack more than the resolve (a proposal queued since the last publish):
    the desk publishes in its own thread, so the denial answers at once, and PagerDuty's
    resolve arrives once the publisher has given up on Slack."""
    with rx.receiver("pagerduty") as pagerduty, rx.receiver("slack") as slack:
        db, path, config, pid, trigger = paged(tmp_path, monkeypatch, pagerduty, slack)
        with Store(str(db)) as store:  # queued since: owed a page everywhere
            store.enqueue(
                key="gpu-node-08:shm-size-limit", kind="shm-size-limit", remedy="shm-size-limit",
                summary="raise /dev/shm", params={}, evidence={}, source="sweep", ttl=86400,
                node="gpu-node-08", root_cause="shm-exhausted",
            )  # fmt: skip
        slack.mode = "hang"
        app = desk_app.build(config, desk_settings.load(DESK, source=str(path), base_url=None,
                                                        insecure_http=True))  # fmt: skip
        try:
            started = time.monotonic()
            page, denied, took = asyncio.run(
                deny_on_the_desk(app, pid, trigger["links"][0]["href"])
            )
            assert (page, denied) == (200, 303)
            assert took < 1.0, took
            (resolve,) = wait_for(lambda: resolves(pagerduty), 20)
            assert resolve["dedup_key"] == trigger["dedup_key"]
            assert time.monotonic() - started > 1.0  # after Slack's attempts, not before
            with Store(str(db)) as store:
                assert store.get(pid).state == "denied"
        finally:
            slack.release.set()
            app.state.desk.publisher.stop()


def test_a_page_and_the_desk_row_it_opens_name_the_same_severity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.desk import inprocess
    from tests.desk.queueing import enqueue as enqueue_desk
    from tests.desk.test_desk_severity import rows

    monkeypatch.setenv("RUNBOOK_PAGERDUTY_ROUTING_KEY", rx.ROUTING_KEY)
    with rx.receiver("pagerduty") as pagerduty:
        cfg = inprocess.config(tmp_path, notify={"pagerduty": {"url": pagerduty.url}})
        db = str(cfg.db)
        queued = [
            enqueue_desk(db, kind="node-drain", node="gpu-node-1", root_cause="gpu-hardware"),
            # a kind that takes the node out, on a cause that is not the hardware's
            enqueue_desk(db, kind="node-drain", node="gpu-node-2", root_cause="shm-exhausted"),
            enqueue_desk(db, node="gpu-node-3"),
            enqueue_desk(db, node="gpu-node-4", root_cause="inconclusive"),
        ]
        with Store(db) as store:
            assert publish(cfg, store).notices_sent == len(queued)
        paged = {t["payload"]["custom_details"]["proposal"]: t["payload"]["severity"]
                 for t in pagerduty.accepted}  # fmt: skip
        (queue,) = inprocess.get(inprocess.build(cfg), "/queue")
        shown = {pid: severity for pid, (_, severity) in rows(queue.text).items()}
        assert sorted(paged) == sorted(shown) == sorted(queued)
        assert paged == shown
        assert sorted(set(shown.values())) == ["critical", "info", "warning"]
