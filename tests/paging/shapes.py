"""Each paging service's documented request shape, checked strictly: a list of what is wrong
(empty when the request is one the service takes). Written from the services' documentation,
independently of runbook.paging:

- PagerDuty Events API v2, `POST /v2/enqueue` (developer.pagerduty.com, "Send an Alert Event"):
  routing_key (the 32-character integration key), event_action trigger|acknowledge|resolve,
  dedup_key (at most 255 characters; required to acknowledge or resolve), and for a trigger a
  payload with summary (at most 1024 characters), source and severity
  critical|error|warning|info required, timestamp (ISO 8601), component, group, class and
  custom_details optional; links [{href, text}], images, client, client_url. Nothing else.
- Microsoft Teams, a workflow's "When a Teams webhook request is received" trigger or an
  incoming webhook: {"type": "message", "attachments": [{"contentType":
  "application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": <AdaptiveCard>}]};
  the card's type AdaptiveCard, a version Teams renders (1.0 to 1.5), body elements of the
  card schema, Action.OpenUrl with an http(s) url.
- Slack, an incoming webhook: `text` and/or `blocks`; at most 50 blocks of Block Kit's layout
  types; a section's text object (mrkdwn or plain_text, 1 to 3000 characters) or its fields (at
  most 10, each at most 2000); context elements (at most 10); actions elements (at most 25):
  a button's plain_text text (at most 75), url (at most 3000), action_id (at most 255, unique).
- The generic JSON: the signature recomputed here with hmac, not with runbook's own helper.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any

ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def _is_url(value: Any) -> bool:
    return isinstance(value, str) and re.match(r"^https?://[^/\s]+", value) is not None


# --------------------------------------------------------------------------------- PagerDuty
PD_TOP = {"routing_key", "event_action", "dedup_key", "payload", "images", "links", "client",
          "client_url"}  # fmt: skip
PD_PAYLOAD = {"summary", "source", "severity", "timestamp", "component", "group", "class",
              "custom_details"}  # fmt: skip


def pagerduty(event: Any) -> list[str]:
    errors: list[str] = []
    if not isinstance(event, dict):
        return ["not an object"]
    errors += [f"unknown field {k}" for k in sorted(set(event) - PD_TOP)]
    key = event.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        errors.append("routing_key: not a 32-character integration key")
    action = event.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        errors.append(f"event_action {action!r}")
    dedup = event.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or not 0 < len(dedup) <= 255):
        errors.append("dedup_key: not a string of 1 to 255 characters")
    if action in ("acknowledge", "resolve") and dedup is None:
        errors.append(f"{action} without a dedup_key")
    if action == "trigger":
        payload = event.get("payload")
        if not isinstance(payload, dict):
            return [*errors, "trigger without a payload"]
        errors += [f"payload: unknown field {k}" for k in sorted(set(payload) - PD_PAYLOAD)]
        summary = payload.get("summary")
        if not isinstance(summary, str) or not 0 < len(summary) <= 1024:
            errors.append("payload.summary: not a string of 1 to 1024 characters")
        if not isinstance(payload.get("source"), str) or not payload["source"]:
            errors.append("payload.source missing")
        if payload.get("severity") not in ("critical", "error", "warning", "info"):
            errors.append(f"payload.severity {payload.get('severity')!r}")
        if "timestamp" in payload and not ISO.match(str(payload["timestamp"])):
            errors.append("payload.timestamp: not ISO 8601")
        for name in ("component", "group", "class"):
            if name in payload and not isinstance(payload[name], str):
                errors.append(f"payload.{name}: not a string")
        if "custom_details" in payload and not isinstance(payload["custom_details"], dict):
            errors.append("payload.custom_details: not an object")
    for link in event.get("links", []):
        if not isinstance(link, dict) or not _is_url(link.get("href")):
            errors.append(f"links: {link!r}")
        elif set(link) - {"href", "text"}:
            errors.append(f"links: unknown fields in {link!r}")
    if "client_url" in event and not _is_url(event["client_url"]):
        errors.append("client_url: not a URL")
    return errors


# ------------------------------------------------------------------------------------- Teams
CARD_ELEMENTS = {"TextBlock", "FactSet", "Container", "ColumnSet", "Image", "ImageSet",
                 "ActionSet", "RichTextBlock", "Table"}  # fmt: skip
CARD_ACTIONS = {"Action.OpenUrl", "Action.Submit", "Action.ShowCard", "Action.ToggleVisibility",
                "Action.Execute"}  # fmt: skip


def _card_element(element: Any, where: str) -> list[str]:
    if not isinstance(element, dict) or element.get("type") not in CARD_ELEMENTS:
        return [f"{where}: not a card element: {element!r}"[:200]]
    kind = element["type"]
    if kind == "TextBlock" and (not isinstance(element.get("text"), str) or not element["text"]):
        return [f"{where}: TextBlock without text"]
    if kind == "FactSet":
        facts = element.get("facts")
        if not isinstance(facts, list) or not facts:
            return [f"{where}: FactSet without facts"]
        return [
            f"{where}.facts[{i}]: not {{title, value}} strings"
            for i, f in enumerate(facts)
            if not (isinstance(f, dict) and set(f) == {"title", "value"}
                    and all(isinstance(v, str) for v in f.values()))
        ]  # fmt: skip
    return []


def teams(message: Any) -> list[str]:
    if not isinstance(message, dict) or message.get("type") != "message":
        return ['not {"type": "message", …}']
    attachments = message.get("attachments")
    if not isinstance(attachments, list) or not attachments:
        return ["no attachments"]
    errors: list[str] = []
    first = attachments[0]
    if first.get("contentType") != "application/vnd.microsoft.card.adaptive":
        errors.append(f"attachments[0].contentType {first.get('contentType')!r}")
    if "contentUrl" in first and first["contentUrl"] is not None:
        errors.append("attachments[0].contentUrl: not null")
    card = first.get("content")
    if not isinstance(card, dict) or card.get("type") != "AdaptiveCard":
        return [*errors, "attachments[0].content: not an AdaptiveCard"]
    if card.get("version") not in ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5"):
        errors.append(f"content.version {card.get('version')!r}: not one Teams renders")
    body = card.get("body")
    if not isinstance(body, list) or not body:
        errors.append("content.body: empty")
    else:
        for i, element in enumerate(body):
            errors += _card_element(element, f"content.body[{i}]")
    for i, action in enumerate(card.get("actions", [])):
        if not isinstance(action, dict) or action.get("type") not in CARD_ACTIONS:
            errors.append(f"content.actions[{i}]: not an action")
        elif action["type"] == "Action.OpenUrl" and not _is_url(action.get("url")):
            errors.append(f"content.actions[{i}]: Action.OpenUrl without an http(s) url")
    return errors


# ------------------------------------------------------------------------------------- Slack
BLOCK_TYPES = {"section", "context", "actions", "header", "divider", "image", "input", "file",
               "rich_text", "video"}  # fmt: skip


def _text_object(obj: Any, where: str, limit: int) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in ("mrkdwn", "plain_text"):
        return [f"{where}: not a text object"]
    text = obj.get("text")
    if not isinstance(text, str) or not 0 < len(text) <= limit:
        return [f"{where}: text not 1 to {limit} characters"]
    return []


def slack(message: Any) -> list[str]:
    if not isinstance(message, dict):
        return ["not an object"]
    errors = [f"unknown field {k}" for k in sorted(set(message) - {"text", "blocks"})]
    blocks = message.get("blocks", [])
    if "text" not in message and not blocks:
        errors.append("neither text nor blocks")
    if not isinstance(blocks, list) or len(blocks) > 50:
        return [*errors, "blocks: not a list of at most 50"]
    action_ids: list[str] = []
    for i, block in enumerate(blocks):
        where = f"blocks[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in BLOCK_TYPES:
            errors.append(f"{where}: block type {kind!r}")
            continue
        if kind == "section":
            if "text" not in block and "fields" not in block:
                errors.append(f"{where}: section without text or fields")
            if "text" in block:
                errors += _text_object(block["text"], f"{where}.text", 3000)
            fields = block.get("fields", [])
            if len(fields) > 10:
                errors.append(f"{where}.fields: more than 10")
            for j, f in enumerate(fields):
                errors += _text_object(f, f"{where}.fields[{j}]", 2000)
        elif kind == "context":
            elements = block.get("elements") or []
            if not 0 < len(elements) <= 10:
                errors.append(f"{where}.elements: not 1 to 10")
            for j, e in enumerate(elements):
                errors += _text_object(e, f"{where}.elements[{j}]", 3000)
        elif kind == "actions":
            elements = block.get("elements") or []
            if not 0 < len(elements) <= 25:
                errors.append(f"{where}.elements: not 1 to 25")
            for j, e in enumerate(elements):
                at = f"{where}.elements[{j}]"
                if e.get("type") != "button":
                    errors.append(f"{at}: not a button")
                    continue
                errors += _text_object(e.get("text"), f"{at}.text", 75)
                if e["text"].get("type") != "plain_text":
                    errors.append(f"{at}.text: a button's text is plain_text")
                if "url" in e and (not _is_url(e["url"]) or len(e["url"]) > 3000):
                    errors.append(f"{at}.url")
                action_id = e.get("action_id")
                if action_id is not None:
                    if not isinstance(action_id, str) or len(action_id) > 255:
                        errors.append(f"{at}.action_id")
                    action_ids.append(str(action_id))
    if len(action_ids) != len(set(action_ids)):
        errors.append("action_id repeated")
    return errors


# ----------------------------------------------------------------------- the signed generic
def signature_problem(
    secret: str, headers: Mapping[str, str], body: bytes, *, now: float, window: float = 300
) -> str | None:
    """What a receiver checks: the HMAC-SHA256 of `<timestamp>.<body>` under the shared secret
    (constant-time compare), and a timestamp within `window` seconds of its own clock."""
    timestamp = headers.get("X-Runbook-Timestamp")
    given = headers.get("X-Runbook-Signature")
    if timestamp is None or given is None:
        return "unsigned"
    if not timestamp.isdigit() or abs(now - int(timestamp)) > window:
        return "stale or bad timestamp"
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    if not hmac.compare_digest("v1=" + expected.hexdigest(), given):
        return "bad signature"
    return None
