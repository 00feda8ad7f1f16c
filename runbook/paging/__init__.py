"""Paging: the approval queue's notices as each service takes them, one module per service.

    generic    JSON of our own, optionally signed (HMAC-SHA256 over timestamp and body)
    slack      Block Kit, a button to the proposal's desk page, a follow-up when decided
    teams      an Adaptive Card in a Teams message, a follow-up card when decided
    pagerduty  Events API v2: trigger when queued, resolve (same dedup_key) when decided

Each notice is one of three events: `queued`, `expiring` (within the expiry window, or
expired, undecided), `resolved` (decided, or expired). A service takes the events it has a
meaning for (`events`); `message` renders one as the exact bytes and headers to POST. Pure:
delivery is runbook.notify's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runbook.paging import generic, pagerduty, slack, teams
from runbook.paging.text import EXPIRING, QUEUED, RESOLVED, NoticeProposal, desk_link

if TYPE_CHECKING:
    from runbook.config import Channel

__all__ = ["EXPIRING", "QUEUED", "RESOLVED", "Message", "events", "message", "notice_name"]

_EVENTS = {
    "json": generic.EVENTS,
    "slack": slack.EVENTS,
    "teams": teams.EVENTS,
    "pagerduty": pagerduty.EVENTS,
}


@dataclass(frozen=True)
class Message:
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def events(service: str) -> tuple[str, ...]:
    return _EVENTS[service]


def notice_name(channel: Channel, event: str) -> str:
    """The notice's name in the store: the one `webhook_url` keeps the bare event names it
    always had (`queued`), every other place is prefixed (`pagerduty:queued`)."""
    return event if channel.name == "webhook" else f"{channel.name}:{event}"


def message(
    channel: Channel,
    p: NoticeProposal,
    event: str,
    *,
    now: float,
    desk_url: str | None = None,
    signed_at: float | None = None,
) -> Message:
    """`now` dates the notice's text; `signed_at` (default `now`) the signature: the moment
    it is sent, which a receiver checks against its own clock."""
    link = desk_link(desk_url, p.id)
    data: dict[str, Any]
    if channel.service == "pagerduty":
        assert channel.secret is not None, "a PagerDuty channel has its routing key"
        data = pagerduty.event(p, event, routing_key=channel.secret, now=now, link=link)
    elif channel.service == "teams":
        data = teams.payload(p, event, now=now, link=link)
    elif channel.service == "slack":
        data = slack.payload(p, event, now=now, link=link)
    else:
        data = generic.payload(p, event, now=now, link=link)
    body = json.dumps(data).encode("utf-8")
    headers = {"Content-Type": "application/json"}
    if channel.service == "json" and channel.secret:
        headers.update(
            generic.signed_headers(
                channel.secret, body, now=now if signed_at is None else signed_at
            )
        )
    return Message(body, headers)
