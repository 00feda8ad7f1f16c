"""Notices of the approval queue, delivered: a proposal queued, about to expire, resolved.

Where they go is the config's (runbook.config.Notify.channels): the one `webhook_url` (generic
JSON, optionally signed, or Slack), Slack, Microsoft Teams, PagerDuty; what each service is sent
is runbook.paging's (pure). Here is the I/O: `send_due` sends what the queue owes each place
(runbook.oncall.publish calls it whenever a command lets go of the queue, and
`runbook approvals publish` from a timer), `decided` resolves a proposal's pages the moment it
is decided, in the background.

Exactly once, across processes: each (proposal, notice) is claimed in the store before it is
sent (`Store.claim_notice`), marked sent after, released when the place gave up, so the next
command tries again. A `resolved` notice goes only where that proposal's `queued` one went: a
page is closed only where it was opened, and never before it was.

Delivery uses the standard library (one POST, nothing a dependency would add): a timeout on
every attempt, at most `ATTEMPTS` attempts with a short backoff, all within `DEADLINE`
seconds; a 5xx, a 408, a 429 or a network error is retried, any other answer is final. The
timeout bounds the whole attempt, not each read: a receiver that answers a byte at a time
(each read well within a socket timeout) has its connection shut when the attempt's time is
up (`_Watch`). It never raises: it returns a `Delivery` the caller turns into one warning
line. The URL may hold a token (Slack's and Teams' do), so it is only ever shown as
`scheme://host/…` (`shown_url`); a routing key or signing secret is only ever in a body or a
signature, never in a message.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runbook import paging
from runbook.paging import generic, slack
from runbook.paging.text import (
    EXPIRING,
    QUEUED,
    RESOLVED,
    NoticeProposal,
    headline,
    show_command,
)
from runbook.redact import redact

if TYPE_CHECKING:
    from runbook.config import Channel, Config
    from runbook.remedies.store import QueuedProposal, Store

__all__ = [
    "EXPIRING", "QUEUED", "RESOLVED", "Delivery", "NoticeProposal", "decided", "deliver",
    "due", "generic_payload", "headline", "mrkdwn", "send_due", "show_command",
    "shown_url", "slack_payload",
]  # fmt: skip

ATTEMPTS = 3
#: seconds all attempts of one notice may take together, backoff included
DEADLINE = 5.0
BACKOFF = (0.25, 0.5)

generic_payload = generic.payload
slack_payload = slack.payload
mrkdwn = slack.mrkdwn


def shown_url(url: str) -> str:
    """The URL as it may be printed: scheme and host only (its path or query may be a token)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/…"


def _stderr(line: str) -> None:
    print(f"runbook: warning: {redact(line)}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ what is due
def due(
    channel: Channel,
    pending: Sequence[NoticeProposal],
    done: Sequence[NoticeProposal],
    sent: Iterable[tuple[str, str]],
    *,
    now: float,
    window: float,
) -> list[tuple[NoticeProposal, str]]:
    """(proposal, event) `channel` is owed, oldest proposal first. `pending`: the proposals
    waiting (an expired one among them is resolved where it was announced, else announced as
    expired); `done`: proposals decided since. Pure."""
    seen = set(sent)
    wants = paging.events(channel.service)

    def owed(p: NoticeProposal, event: str) -> bool:
        return event in wants and (p.id, paging.notice_name(channel, event)) not in seen

    out: list[tuple[NoticeProposal, str]] = []
    for p in sorted(pending, key=lambda p: p.created_at):
        announced = not owed(p, QUEUED) and QUEUED in wants
        if p.expires_at > now and owed(p, QUEUED):
            out.append((p, QUEUED))
        if p.expires_at <= now and announced and owed(p, RESOLVED):
            out.append((p, RESOLVED))
        elif (
            p.expires_at - now <= window
            and owed(p, EXPIRING)
            and not (p.expires_at <= now and announced)
        ):
            out.append((p, EXPIRING))
    for p in sorted(done, key=lambda p: p.created_at):
        if getattr(p, "state", None) in ("pending", "running"):
            continue
        if (p.id, paging.notice_name(channel, QUEUED)) in seen and owed(p, RESOLVED):
            out.append((p, RESOLVED))
    return out


def unresolved(sent: Iterable[tuple[str, str]], channels: Sequence[Channel]) -> set[str]:
    """Proposals announced somewhere and not resolved there yet."""
    seen = set(sent)
    out: set[str] = set()
    for channel in channels:
        queued = paging.notice_name(channel, QUEUED)
        resolved = paging.notice_name(channel, RESOLVED)
        out |= {pid for pid, name in seen if name == queued and (pid, resolved) not in seen}
    return out


# ------------------------------------------------------------------------------- sending
def _send(
    config: Config,
    store: Store,
    channel: Channel,
    proposal: NoticeProposal,
    event: str,
    now: float,
) -> Delivery | None:
    """One notice, claimed first: None when another process has it (or sent it already)."""
    name = paging.notice_name(channel, event)
    if not store.claim_notice(proposal.id, name):
        return None
    message = paging.message(channel, proposal, event, now=now,
                             desk_url=config.notify.desk_url, signed_at=time.time())  # fmt: skip
    delivery = deliver(channel.url, message.body, headers=message.headers,
                       timeout=config.notify.timeout)  # fmt: skip
    if delivery.ok:
        store.notice_sent(proposal.id, name)
    else:
        store.release_notice(proposal.id, name)
    return delivery


def _gave_up(channel: Channel, delivery: Delivery, left: int) -> str:
    return (
        f"{channel.name} {shown_url(channel.url)}: {delivery.error}; "
        f"{left} notice{'s' if left != 1 else ''} not sent (tried again at the next command)"
    )


def send_due(
    config: Config,
    store: Store,
    pending: Sequence[QueuedProposal],
    now: float,
    warn: Callable[[str], None] = _stderr,
) -> int:
    """Every notice the queue owes each place, each claimed in the store first; how many were
    sent. A place that gives up keeps the rest of its notices for the next command (a dead
    webhook costs one deadline, not one per proposal); the other places go on."""
    from runbook.remedies.store import NotFound

    channels = config.notify.channels
    sent_before = store.sent_notices()
    waiting = {p.id for p in pending}
    done: list[QueuedProposal] = []
    for pid in sorted(unresolved(sent_before, channels) - waiting):
        try:
            done.append(store.get(pid))
        except NotFound:
            continue
    sent = 0
    for channel in channels:
        owed = due(channel, pending, done, sent_before, now=now,
                   window=config.notify.expiry_window)  # fmt: skip
        for number, (proposal, event) in enumerate(owed):
            delivery = _send(config, store, channel, proposal, event, now)
            if delivery is None:
                continue  # another process is sending it
            if delivery.ok:
                sent += 1
                continue
            warn(_gave_up(channel, delivery, len(owed) - number))
            break
    return sent


def decided(
    config: Config,
    proposal: QueuedProposal,
    *,
    store: Store | None = None,
    warn: Callable[[str], None] = _stderr,
) -> threading.Thread | None:
    """Resolve `proposal`'s pages now that it is decided. Its `resolved` notices are claimed
    here, in the store of the desk that decided (`store`, else one opened for this), so the
    same command's publish on its way out leaves them alone; they are delivered in a thread
    of its own: the decision never waits on a slow place and never fails for one (a warning;
    a failed one is released, and the next command's publish tries again). The thread is not
    a daemon: a command's process ends once it is done, within the delivery deadline. Returns
    it (None when there is nothing to send). Never raises."""
    channels = [c for c in config.notify.channels if RESOLVED in paging.events(c.service)]
    if not channels or proposal.state in ("pending", "running"):
        return None
    try:
        if store is None:
            from runbook.remedies.store import Store

            with Store(config.db) as own:
                claimed = _claim_resolves(own, channels, proposal)
        else:
            claimed = _claim_resolves(store, channels, proposal)
    except Exception as exc:
        warn(f"proposal {proposal.id}: pages not resolved: {_why(exc)}")
        return None
    if not claimed:
        return None
    thread = threading.Thread(
        target=_deliver_resolves, args=(config, proposal, claimed, warn),
        name=f"runbook-resolve-{proposal.id}",
    )  # fmt: skip
    thread.start()
    return thread


def _why(exc: BaseException) -> str:
    one_line = getattr(exc, "one_line", None)
    return str(one_line()) if callable(one_line) else f"{type(exc).__name__}: {exc}"


def _claim_resolves(
    store: Store, channels: Sequence[Channel], proposal: QueuedProposal
) -> list[Channel]:
    """The places whose `resolved` notice of `proposal` this process is to send, claimed."""
    sent = store.sent_notices()
    now = time.time()
    return [
        channel
        for channel in channels
        if due(channel, (), [proposal], sent, now=now, window=0)
        and store.claim_notice(proposal.id, paging.notice_name(channel, RESOLVED))
    ]


def _deliver_resolves(
    config: Config,
    proposal: QueuedProposal,
    channels: Sequence[Channel],
    warn: Callable[[str], None],
) -> None:
    """Send the claimed `resolved` notices; each marked sent, or released (a warning)."""
    from runbook.remedies.store import Store

    try:
        outcomes = []
        for channel in channels:
            message = paging.message(channel, proposal, RESOLVED, now=time.time(),
                                     desk_url=config.notify.desk_url)  # fmt: skip
            delivery = deliver(channel.url, message.body, headers=message.headers,
                               timeout=config.notify.timeout)  # fmt: skip
            outcomes.append((channel, delivery))
        with Store(config.db) as store:  # a connection of this thread's own
            for channel, delivery in outcomes:
                name = paging.notice_name(channel, RESOLVED)
                if delivery.ok:
                    store.notice_sent(proposal.id, name)
                else:
                    store.release_notice(proposal.id, name)
                    warn(_gave_up(channel, delivery, 1))
    except Exception as exc:  # a background thread: whatever happens is one warning
        warn(f"proposal {proposal.id}: pages not resolved: {_why(exc)}")


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
    payload: Mapping[str, Any] | bytes,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 2.0,
    attempts: int = ATTEMPTS,
    deadline: float = DEADLINE,
    sleep: Callable[[float], None] = time.sleep,
) -> Delivery:
    """POST `payload` (JSON, or the exact bytes given) to `url` with `headers`: bounded
    attempts, each with a timeout, all within `deadline` seconds. Never raises."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
    sent_headers = {"Content-Type": "application/json", **(headers or {}),
                    "User-Agent": "nccl-runbook"}  # fmt: skip
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
            headers=sent_headers,
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
