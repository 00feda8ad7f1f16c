"""The Microsoft Teams notice: an Adaptive Card in the message shape that a Teams workflow
("When a Teams webhook request is received", Power Automate) and the older incoming-webhook
connectors accept::

    {"type": "message",
     "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive",
                      "contentUrl": null,
                      "content": {"type": "AdaptiveCard", "version": "1.4", "body": […],
                                  "actions": [{"type": "Action.OpenUrl", …}]}}]}

A TextBlock renders a subset of Markdown, so every text from a proposal has Markdown's
characters escaped with a backslash: a summary holding `[approve](https://evil…)` or `**`
shows as typed. Facts go in a FactSet. A webhook cannot edit the card it posted: a decided or
expired proposal gets a follow-up card saying what became of it. Pure.
"""

from __future__ import annotations

import re
from typing import Any

from runbook.paging.text import (
    EXPIRING,
    QUEUED,
    RESOLVED,
    NoticeProposal,
    cut,
    iso,
    outcome,
    plain,
    relative,
    show_command,
)
from runbook.paging.text import (
    headline as _headline,
)

EVENTS = (QUEUED, EXPIRING, RESOLVED)
CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
VERSION = "1.4"

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!<>|~])")


def text(value: Any) -> str:
    """`value` as literal characters in a TextBlock: redacted, printable, Markdown escaped."""
    return _MARKDOWN.sub(r"\\\1", plain(value))


def _color(p: NoticeProposal, event: str, *, now: float) -> str:
    if event == QUEUED:
        return "Attention"
    if event == EXPIRING:
        return "Warning"
    return "Good" if outcome(p, now=now) == "succeeded" else "Default"


def card(p: NoticeProposal, event: str, *, now: float, link: str | None = None) -> dict[str, Any]:
    evidence = p.evidence or {}
    facts = [
        {"title": "Node", "value": text(p.node or "?")},
        {"title": "Verdict", "value": text(f"{p.root_cause or '?'} "
                                           f"({evidence.get('confidence') or '?'})")},
        {"title": "Proposal", "value": text(f"{p.id} ({p.kind})")},
    ]  # fmt: skip
    if event == RESOLVED:
        facts.append({"title": "Outcome", "value": text(outcome(p, now=now))})
    else:
        expires = f"{iso(p.expires_at)} ({relative(p.expires_at - now)})"
        facts.append({"title": "Expires", "value": text(expires)})
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": text(_headline(p, event, now=now)),
            "wrap": True,
            "weight": "Bolder",
            "color": _color(p, event, now=now),
        },
        {"type": "FactSet", "facts": facts},
    ]
    if event != RESOLVED and p.summary:
        body.append({"type": "TextBlock", "text": text(cut(plain(p.summary), 2000)), "wrap": True})
    body.append({"type": "TextBlock", "text": text(show_command(p.id)), "wrap": True,
                 "fontType": "Monospace", "isSubtle": True})  # fmt: skip
    content: dict[str, Any] = {
        "$schema": SCHEMA,
        "type": "AdaptiveCard",
        "version": VERSION,
        "body": body,
    }
    if link:
        content["actions"] = [
            {"type": "Action.OpenUrl", "title": "Open on the approval desk", "url": link}
        ]
    return content


def payload(
    p: NoticeProposal, event: str, *, now: float, link: str | None = None
) -> dict[str, Any]:
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": CONTENT_TYPE,
                "contentUrl": None,
                "content": card(p, event, now=now, link=link),
            }
        ],
    }
