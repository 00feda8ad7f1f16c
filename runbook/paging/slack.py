"""The Slack notice: what an incoming webhook (or a compatible receiver: Mattermost,
Rocket.Chat) takes, `{"text": …, "blocks": […]}` in Block Kit.

What Slack reads as mrkdwn has `&`, `<` and `>` escaped as Slack asks (`&amp;`, `&lt;`,
`&gt;`): a node named `<https://…|Click to approve>` or a summary holding `<!channel>` shows
as typed, never as a link or a mention. With the desk's base URL set, an `actions` block holds
a button opening the proposal's page. Incoming webhooks cannot edit a message they posted: a
decided or expired proposal gets a follow-up message naming what became of it. Pure.
"""

from __future__ import annotations

from typing import Any

from runbook.paging.text import (
    EXPIRING,
    QUEUED,
    RESOLVED,
    NoticeProposal,
    iso,
    plain,
    relative,
    show_command,
)
from runbook.paging.text import (
    headline as _headline,
)

EVENTS = (QUEUED, EXPIRING, RESOLVED)
#: Block Kit's limit on a section's text
SECTION_TEXT = 3000


def mrkdwn(text: Any) -> str:
    """`text` as literal characters in Slack's mrkdwn: redacted, printable, and its control
    characters `&`, `<`, `>` escaped (what opens a link, a mention or a date there)."""
    return plain(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(escaped: str, limit: int) -> str:
    """Escaped mrkdwn cut to `limit` characters, never inside an entity."""
    if len(escaped) <= limit:
        return escaped
    head = escaped[:limit]
    amp = head.rfind("&")
    return head[:amp] if amp >= 0 and ";" not in head[amp:] else head


def _button(link: str) -> dict[str, Any]:
    return {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": "Open on the approval desk"},
                "url": link,
                "action_id": "runbook-open-proposal",
            }
        ],
    }


def payload(
    p: NoticeProposal, event: str, *, now: float, link: str | None = None
) -> dict[str, Any]:
    text = mrkdwn(_headline(p, event, now=now))
    evidence = p.evidence or {}
    confidence = evidence.get("confidence") or "?"
    fields = [
        f"*Node:* {mrkdwn(p.node or '?')}",
        f"*Verdict:* {mrkdwn(p.root_cause or '?')} ({mrkdwn(confidence)})",
        f"*Proposal:* `{mrkdwn(p.id)}` ({mrkdwn(p.kind)})",
    ]
    if event == RESOLVED:
        decided = getattr(p, "decided_at", None)
        fields.append(
            f"*Decided:* {iso(decided)}" if decided else f"*Expired:* {iso(p.expires_at)}"
        )
    else:
        fields.append(f"*Expires:* {iso(p.expires_at)} ({relative(p.expires_at - now)})")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, SECTION_TEXT)}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
    ]
    if event != RESOLVED and p.summary:
        summary = cut(mrkdwn(p.summary), SECTION_TEXT - 100)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": summary}})
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"`{mrkdwn(show_command(p.id))}`"}],
        }
    )
    if link:
        blocks.append(_button(link))
    return {"text": text, "blocks": blocks}
