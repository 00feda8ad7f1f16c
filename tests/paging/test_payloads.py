"""Each service's notice, as built (pure): it passes the service's documented shape
(tests/paging/shapes.py), for every event it carries, with the desk link and without; hostile
evidence stays text; the severity and dedup key PagerDuty reads; the generic signature a
receiver verifies, and a replayed or altered request it refuses; which notices are due."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from runbook import notify, paging
from runbook.config import Channel
from runbook.paging import generic, pagerduty, slack, teams
from tests.paging import shapes
from tests.paging.receivers import ROUTING_KEY, SECRET

NOW = 1_800_000_100.0
DESK = "https://desk.example.org/runbook"
HOSTILE = (
    "drain it <!channel> [approve](https://evil.example) **now** <script>alert(1)</script> "
    "& `rm -rf` \x1b]0;owned\x07"
)


@dataclass
class Proposal:
    id: str = "p1a2b3c4d"
    kind: str = "shm-size-limit"
    summary: str = "raise /dev/shm to 80Gi"
    node: str | None = "gpu-node-03"
    root_cause: str | None = "shm-exhausted"
    evidence: dict[str, Any] = field(default_factory=lambda: {"confidence": "high"})
    created_at: float = 1_800_000_000.0
    expires_at: float = 1_800_086_400.0
    source: str = "run"
    state: str = "pending"
    decided_by: str | None = None
    decided_at: float | None = None
    reason: str | None = None
    result: dict[str, Any] | None = None


DENIED = Proposal(state="denied", decided_by="bob", decided_at=NOW, reason="change freeze")
SUCCEEDED = Proposal(state="succeeded", decided_by="alice", decided_at=NOW)
EXPIRED = Proposal(expires_at=NOW - 60)
CHANNELS = {
    "json": Channel("webhook", "json", "https://hooks.example.org/x", SECRET),
    "slack": Channel("slack", "slack", "https://hooks.slack.com/services/x"),
    "teams": Channel("teams", "teams", "https://prod.example.logic.azure.com/workflows/x"),
    "pagerduty": Channel("pagerduty", "pagerduty", "https://events.pagerduty.com/v2/enqueue",
                         ROUTING_KEY),
}  # fmt: skip
CHECK = {"slack": shapes.slack, "teams": shapes.teams, "pagerduty": shapes.pagerduty}
CASES = [(Proposal(), "queued"), (Proposal(), "expiring"), (DENIED, "resolved"),
         (SUCCEEDED, "resolved"), (EXPIRED, "resolved")]  # fmt: skip


@pytest.mark.parametrize("service", ["slack", "teams", "pagerduty"])
@pytest.mark.parametrize("desk", [DESK, None])
def test_every_notice_a_service_carries_has_the_shape_it_documents(
    service: str, desk: str | None
) -> None:
    channel = CHANNELS[service]
    for proposal, event in CASES:
        if event not in paging.events(service):
            continue
        for p in (proposal, replace(proposal, summary=HOSTILE, node="<https://evil|x>")):
            message = paging.message(channel, p, event, now=NOW, desk_url=desk)
            assert message.headers["Content-Type"] == "application/json"
            assert CHECK[service](json.loads(message.body)) == [], (service, event)


def test_every_notice_links_to_the_proposals_page_on_the_desk() -> None:
    link = "https://desk.example.org/runbook/p/p1a2b3c4d"
    for service, channel in CHANNELS.items():
        for proposal, event in CASES:
            if event not in paging.events(service) or (service, event) == (
                "pagerduty", "resolved"
            ):  # fmt: skip
                continue
            body = json.loads(
                paging.message(channel, proposal, event, now=NOW, desk_url=DESK + "/").body
            )
            if service == "json":
                assert body["link"] == link
            elif service == "slack":
                (actions,) = [b for b in body["blocks"] if b["type"] == "actions"]
                assert actions["elements"][0]["url"] == link
            elif service == "teams":
                card = body["attachments"][0]["content"]
                assert card["actions"] == [
                    {"type": "Action.OpenUrl", "title": "Open on the approval desk", "url": link}
                ]
            else:
                assert body["links"][0]["href"] == link and body["client_url"] == link


def test_pagerduty_triggers_and_resolves_the_same_alert_by_the_proposals_id() -> None:
    trigger = pagerduty.event(Proposal(), "queued", routing_key=ROUTING_KEY, now=NOW)
    resolve = pagerduty.event(DENIED, "resolved", routing_key=ROUTING_KEY, now=NOW)
    assert trigger["event_action"] == "trigger" and resolve["event_action"] == "resolve"
    assert trigger["dedup_key"] == resolve["dedup_key"] == "runbook-proposal-p1a2b3c4d"
    assert resolve == {"routing_key": ROUTING_KEY, "event_action": "resolve",
                       "dedup_key": "runbook-proposal-p1a2b3c4d"}  # fmt: skip
    assert trigger["payload"]["source"] == "gpu-node-03"
    assert trigger["payload"]["component"] == "shm-size-limit"
    assert "waits for approval" in trigger["payload"]["summary"]
    assert "expiring" not in pagerduty.EVENTS  # the alert stays open until it is resolved


@pytest.mark.parametrize(
    ("kind", "cause", "severity"),
    [
        ("node-drain", "gpu-hardware", "critical"),
        # takes a node out on a cause that is not the hardware's: the cause's severity, as
        # the desk shows it (PagerDuty's `error` is a word the desk does not have)
        ("node-drain", "shm-exhausted", "warning"),
        ("shm-size-limit", "shm-exhausted", "warning"),
        ("shm-size-limit", "inconclusive", "info"),
        ("memory-limit", None, "info"),
    ],
)
def test_pagerdutys_severity_is_the_root_causes_as_the_desk_shows_it(
    kind: str, cause: str | None, severity: str
) -> None:
    p = Proposal(kind=kind, root_cause=cause)
    assert pagerduty.severity(p) == severity
    assert (
        pagerduty.event(p, "queued", routing_key=ROUTING_KEY, now=NOW)["payload"]["severity"]
        == severity
    )


def test_a_teams_card_shows_markdown_and_links_in_the_evidence_as_typed() -> None:
    p = Proposal(summary=HOSTILE, node="[node](https://evil.example)")
    card = teams.payload(p, "queued", now=NOW)["attachments"][0]["content"]
    texts = [b["text"] for b in card["body"] if b["type"] == "TextBlock"]
    texts += [f["value"] for b in card["body"] if b["type"] == "FactSet" for f in b["facts"]]
    joined = "\n".join(texts)
    assert r"\[approve\]\(https://evil\.example\)" in joined
    assert r"\*\*now\*\*" in joined and r"\[node\]" in joined
    for text in texts:
        # every Markdown character escaped: no link, emphasis or code span can open
        assert not re.search(r"(?<!\\)[\[\]()*_`]", text.replace("\\\\", "")), text
        assert "\x1b" not in text and "\x07" not in text


def test_a_slack_notice_shows_a_hostile_summary_as_typed_with_the_desk_button() -> None:
    payload = slack.payload(Proposal(summary=HOSTILE), "queued", now=NOW, link=DESK)
    texts = [payload["text"]] + [b["text"]["text"] for b in payload["blocks"] if "text" in b]
    assert any("&lt;!channel&gt;" in t and "&lt;script&gt;" in t for t in texts)
    assert all("<" not in t and ">" not in t for t in texts)


def test_a_resolved_notice_says_what_became_of_the_proposal() -> None:
    assert "denied by bob: change freeze" in generic.payload(DENIED, "resolved", now=NOW)["text"]
    assert generic.payload(DENIED, "resolved", now=NOW)["outcome"] == "denied"
    done = generic.payload(SUCCEEDED, "resolved", now=NOW)
    assert done["outcome"] == "succeeded" and "approved by alice and run" in done["text"]
    expired = generic.payload(EXPIRED, "resolved", now=NOW)
    assert expired["outcome"] == "expired" and "expired undecided" in expired["text"]
    failed = Proposal(state="failed", decided_by="a", result={"reason": "all_reduce_perf: 127"})
    assert "failed: all_reduce_perf: 127" in slack.payload(failed, "resolved", now=NOW)["text"]


def test_the_generic_json_is_signed_and_a_receiver_refuses_a_replay_or_a_change() -> None:
    message = paging.message(CHANNELS["json"], Proposal(), "queued", now=NOW, signed_at=NOW)
    headers = message.headers
    assert set(headers) == {"Content-Type", "X-Runbook-Timestamp", "X-Runbook-Signature"}
    assert headers["X-Runbook-Timestamp"] == str(int(NOW))
    # recomputed by the receiver's own code (tests/paging/shapes.py) and by runbook's helper
    assert shapes.signature_problem(SECRET, headers, message.body, now=NOW + 5) is None
    assert generic.verify(SECRET, headers, message.body, now=NOW + 5) is None
    assert generic.verify(SECRET, {k.lower(): v for k, v in headers.items()}, message.body,
                          now=NOW) is None  # fmt: skip
    # replayed ten minutes later: refused on its timestamp
    assert generic.verify(SECRET, headers, message.body, now=NOW + 600) is not None
    assert shapes.signature_problem(SECRET, headers, message.body, now=NOW + 600) is not None
    # a body changed, a timestamp moved, another key: refused on the signature
    changed = message.body.replace(b"p1a2b3c4d", b"p00000000")
    assert generic.verify(SECRET, headers, changed, now=NOW) == "bad signature"
    moved = {**headers, "X-Runbook-Timestamp": str(int(NOW) + 1)}
    assert generic.verify(SECRET, moved, message.body, now=NOW) == "bad signature"
    assert generic.verify("another", headers, message.body, now=NOW) == "bad signature"
    assert generic.verify(SECRET, {}, message.body, now=NOW) == "unsigned"
    # no secret set: no signature headers at all
    plain = paging.message(replace(CHANNELS["json"], secret=None), Proposal(), "queued", now=NOW)
    assert set(plain.headers) == {"Content-Type"}


def test_a_page_is_resolved_only_where_it_was_opened_and_only_once() -> None:
    pd = CHANNELS["pagerduty"]
    open_ = Proposal(id="p1")
    expired = Proposal(id="p2", expires_at=NOW - 1)
    never = Proposal(id="p3", expires_at=NOW - 1)
    decided = replace(DENIED, id="p4")
    running = Proposal(id="p5", state="running")
    sent = {("p1", "pagerduty:queued"), ("p2", "pagerduty:queued"), ("p4", "pagerduty:queued"),
            ("p5", "pagerduty:queued"), ("p2", "queued")}  # fmt: skip
    due = notify.due(pd, [open_, expired, never], [decided, running], sent, now=NOW, window=7200)
    assert [(p.id, e) for p, e in due] == [("p2", "resolved"), ("p4", "resolved")]
    done = sent | {("p2", "pagerduty:resolved"), ("p4", "pagerduty:resolved")}
    assert notify.due(pd, [open_, expired], [decided], done, now=NOW, window=7200) == []
    # the one webhook: an expired proposal it announced is resolved, one it never announced
    # is announced as expired (its former notice), a fresh one is announced
    hook = CHANNELS["json"]
    due = notify.due(hook, [open_, expired, never], [], sent, now=NOW, window=7200)
    assert [(p.id, e) for p, e in due] == [("p1", "queued"), ("p2", "resolved"),
                                           ("p3", "expiring")]  # fmt: skip
