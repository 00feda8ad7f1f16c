"""Notices of the approval queue to a webhook: a proposal queued, a proposal about to expire.

Two payloads, chosen by `notify.format`: `json`, a generic object (event, proposal, node,
verdict, summary, times, and the exact `runbook approvals show ID` command), and `slack`, what
a Slack incoming webhook (or a compatible receiver: Mattermost, Rocket.Chat) takes:
`{"text": …, "blocks": […]}`. Every text field goes through the redactor first: a summary is
rendered from a node's facts and must not carry a credential out. Every text is made printable
(runbook.printable), and what Slack reads as mrkdwn has `&`, `<` and `>` escaped as Slack asks
(`&amp;`, `&lt;`, `&gt;`): a node named `<https://…|Click to approve>` or a summary holding
`<!channel>` shows as typed, never as a link or a mention.

Delivery uses the standard library (one POST, nothing a dependency would add): a timeout on
every attempt, at most `ATTEMPTS` attempts with a short backoff, all within `DEADLINE`
seconds; a 5xx, a 408, a 429 or a network error is retried, any other answer is final. The
timeout bounds the whole attempt, not each read: a receiver that answers a byte at a time
(each read well within a socket timeout) has its connection shut when the attempt's time is
up (`_Watch`). It
never raises: it returns a `Delivery` the caller turns into one warning line. The URL may hold
a token (Slack's does), so it is only ever shown as `scheme://host/…` (`shown_url`).

Payload building is pure; `deliver` is the I/O edge.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from runbook.printable import printable
from runbook.redact import redact

ATTEMPTS = 3
#: seconds all attempts of one notice may take together, backoff included
DEADLINE = 5.0
BACKOFF = (0.25, 0.5)
QUEUED = "queued"
EXPIRING = "expiring"


class NoticeProposal(Protocol):
    """What a notice reads of a proposal (runbook.remedies.store.Proposal)."""

    id: str
    kind: str
    summary: str
    node: str | None
    root_cause: str | None
    evidence: dict[str, Any]
    created_at: float
    expires_at: float
    source: str


def shown_url(url: str) -> str:
    """The URL as it may be printed: scheme and host only (its path or query may be a token)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/…"


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _in(seconds: float) -> str:
    minutes = int(abs(seconds) // 60)
    text = f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"
    return f"in {text}" if seconds >= 0 else f"{text} ago"


def show_command(pid: str) -> str:
    return f"runbook approvals show {pid}"


def headline(p: NoticeProposal, event: str, *, now: float) -> str:
    node = p.node or "?"
    verdict = p.root_cause or "?"
    if event == QUEUED:
        return f"runbook: proposal {p.id} ({p.kind}) on {node} waits for approval: {verdict}"
    when = _in(p.expires_at - now)
    verb = "expires" if p.expires_at >= now else "expired"
    return f"runbook: proposal {p.id} ({p.kind}) on {node} {verb} {when} undecided: {verdict}"


def _plain(text: str) -> str:
    """A text field of a notice: redacted, printable."""
    return printable(redact(text))


def mrkdwn(text: Any) -> str:
    """`text` as literal characters in Slack's mrkdwn: redacted, printable, and its control
    characters `&`, `<`, `>` escaped (what opens a link, a mention or a date there)."""
    plain = _plain(str(text))
    return plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(escaped: str, limit: int) -> str:
    """Escaped mrkdwn cut to `limit` characters, never inside an entity."""
    if len(escaped) <= limit:
        return escaped
    cut = escaped[:limit]
    amp = cut.rfind("&")
    return cut[:amp] if amp >= 0 and ";" not in cut[amp:] else cut


def generic_payload(p: NoticeProposal, event: str, *, now: float) -> dict[str, Any]:
    evidence = p.evidence or {}
    return {
        "event": f"proposal-{event}",
        "text": _plain(headline(p, event, now=now)),
        "proposal": p.id,
        "kind": p.kind,
        "node": p.node,
        "verdict": {"root_cause": p.root_cause, "confidence": evidence.get("confidence")},
        "summary": _plain(p.summary),
        "source": p.source,
        "created_at": _iso(p.created_at),
        "expires_at": _iso(p.expires_at),
        "expires_in_seconds": round(p.expires_at - now),
        "command": show_command(p.id),
    }


def slack_payload(p: NoticeProposal, event: str, *, now: float) -> dict[str, Any]:
    text = mrkdwn(headline(p, event, now=now))
    evidence = p.evidence or {}
    confidence = evidence.get("confidence") or "?"
    fields = [
        f"*Node:* {mrkdwn(p.node or '?')}",
        f"*Verdict:* {mrkdwn(p.root_cause or '?')} ({mrkdwn(confidence)})",
        f"*Proposal:* `{mrkdwn(p.id)}` ({mrkdwn(p.kind)})",
        f"*Expires:* {_iso(p.expires_at)} ({_in(p.expires_at - now)})",
    ]
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
            {"type": "section", "text": {"type": "mrkdwn", "text": _cut(mrkdwn(p.summary), 2900)}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"`{mrkdwn(show_command(p.id))}`"}],
            },
        ],
    }


PAYLOADS: Mapping[str, Callable[..., dict[str, Any]]] = {
    "json": generic_payload,
    "slack": slack_payload,
}


@dataclass(frozen=True)
class Delivery:
    ok: bool
    attempts: int
    #: why it failed (no URL in it), or None
    error: str | None = None


class _Watch:
    """The connections of one attempt, shut down when its time is up: urllib's timeout is per
    socket operation, and a byte every second never trips it."""

    def __init__(self) -> None:
        self.connections: list[http.client.HTTPConnection] = []
        self.expired = False
        self._lock = threading.Lock()

    def add(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self.connections.append(connection)
            if self.expired:
                self._shut(connection)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for connection in self.connections:
                self._shut(connection)

    @staticmethod
    def _shut(connection: http.client.HTTPConnection) -> None:
        sock = connection.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # a read blocked on it returns at once
            except OSError:
                pass


class _WatchedHandler(urllib.request.AbstractHTTPHandler):
    watch: _Watch

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
        def connection(*args: Any, **kw: Any) -> http.client.HTTPConnection:
            made: http.client.HTTPConnection = http_class(*args, **kw)
            self.watch.add(made)
            return made

        return super().do_open(connection, req, **kwargs)


class _HTTP(_WatchedHandler, urllib.request.HTTPHandler):
    pass


class _HTTPS(_WatchedHandler, urllib.request.HTTPSHandler):
    pass


def _post(request: urllib.request.Request, budget: float) -> None:
    """Send `request` and read the answer, all within `budget` seconds (TimeoutError past
    it); an HTTP error status raises HTTPError, as urlopen does."""
    watch = _Watch()
    handlers = []
    for cls in (_HTTP, _HTTPS):
        handler = cls()
        handler.watch = watch
        handlers.append(handler)
    opener = urllib.request.build_opener(*handlers)
    timer = threading.Timer(budget, watch.expire)
    timer.daemon = True
    timer.start()
    try:
        with opener.open(request, timeout=budget) as answer:
            try:
                answer.read(65536)
            except (OSError, http.client.HTTPException):
                pass  # its status said it took the notice: delivered, whatever the body
    except (OSError, ValueError, http.client.HTTPException) as exc:
        if watch.expired and not isinstance(exc, urllib.error.HTTPError):
            raise TimeoutError from exc
        raise
    finally:
        timer.cancel()


def _retryable(status: int) -> bool:
    return status >= 500 or status in (408, 429)


def deliver(
    url: str,
    payload: Mapping[str, Any],
    *,
    timeout: float = 2.0,
    attempts: int = ATTEMPTS,
    deadline: float = DEADLINE,
    sleep: Callable[[float], None] = time.sleep,
) -> Delivery:
    """POST `payload` as JSON to `url`: bounded attempts, each with a timeout, all within
    `deadline` seconds. Never raises."""
    body = json.dumps(payload).encode("utf-8")
    ends = time.monotonic() + deadline

    def failed(tries: int, why: str) -> Delivery:
        # an error text may quote the URL (urllib's ValueError does): never its token
        return Delivery(False, tries, redact(why.replace(url, shown_url(url))))

    error = "not attempted"
    for attempt in range(1, attempts + 1):
        left = ends - time.monotonic()
        if left <= 0:
            return failed(attempt - 1, f"{error}; gave up after {deadline:g} s")
        request = urllib.request.Request(  # noqa: S310 (the scheme is checked at config load)
            url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "nccl-runbook"},
        )
        try:
            _post(request, min(timeout, left))
            return Delivery(True, attempt)
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}"
            if not _retryable(exc.code):
                return failed(attempt, error)
        except TimeoutError:
            error = f"no answer within {min(timeout, left):g} s"
        except urllib.error.URLError as exc:
            reason = exc.reason
            error = (
                f"no answer within {min(timeout, left):g} s"
                if isinstance(reason, TimeoutError)
                else f"{getattr(reason, 'strerror', None) or reason}"
            )
        except (OSError, ValueError, http.client.HTTPException) as exc:
            # a reset connection, a malformed answer
            error = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
        if attempt < attempts:
            pause = BACKOFF[min(attempt - 1, len(BACKOFF) - 1)]
            if ends - time.monotonic() <= pause:
                return failed(attempt, f"{error}; gave up after {deadline:g} s")
            sleep(pause)
    return failed(attempts, f"{error} after {attempts} attempts")
