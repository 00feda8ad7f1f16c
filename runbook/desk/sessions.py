"""Sign-in sessions kept on the server, their CSRF tokens, and the login rate limit.

The browser holds only a random session id (cookie `rbk_desk`, HttpOnly, SameSite=Lax,
Secure unless serving plain HTTP on the loopback); what it stands for — who signed in, when,
the CSRF token, the sign-in's state while at the provider — stays in this process, so
signing out or an expiry ends it for good (a stolen cookie is not a lasting pass). A session
ends `ttl` after sign-in, or `idle` after its last request. Restarting the desk signs
everyone out.

The CSRF token is bound to the session and sent in every form; a POST whose token is not its
session's is refused, whatever its Origin (a page on another port of the same host is the
same *site*, so SameSite alone would send the cookie).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from runbook.desk.policy import Identity


@dataclass
class Session:
    id: str
    csrf: str
    created: float
    seen: float
    identity: Identity | None = None
    signed_in: float | None = None
    #: what the OIDC client keeps between the redirect and the callback (state, PKCE verifier)
    data: dict[str, Any] = field(default_factory=dict)

    def csrf_ok(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf, str(token))


class Sessions:
    def __init__(self, *, ttl: float, idle: float, limit: int = 10000) -> None:
        self.ttl = ttl
        self.idle = idle
        self.limit = limit
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def new(self) -> Session:
        now = time.time()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now)
        with self._lock:
            if len(self._by_id) >= self.limit:
                self._sweep(now)
                if len(self._by_id) >= self.limit:  # still full: the oldest unsigned goes
                    oldest = min(
                        self._by_id.values(), key=lambda s: (s.identity is not None, s.seen)
                    )
                    del self._by_id[oldest.id]
            self._by_id[session.id] = session
        return session

    def get(self, sid: str | None) -> Session | None:
        """The live session of this id (touched), or None (unknown, or expired: dropped)."""
        if not sid:
            return None
        now = time.time()
        with self._lock:
            session = self._by_id.get(sid)
            if session is None:
                return None
            if self._expired(session, now):
                del self._by_id[sid]
                return None
            session.seen = now
            return session

    def _expired(self, session: Session, now: float) -> bool:
        started = session.signed_in or session.created
        return now - started > self.ttl or now - session.seen > self.idle

    def _sweep(self, now: float) -> None:
        for sid in [s.id for s in self._by_id.values() if self._expired(s, now)]:
            del self._by_id[sid]

    def sign_in(self, session: Session, identity: Identity) -> Session:
        """A fresh session for the signed-in identity (a new id and CSRF token: the id the
        browser held before signing in is never the signed-in one)."""
        fresh = self.new()
        fresh.identity = identity
        fresh.signed_in = time.time()
        self.end(session.id)
        return fresh

    def end(self, sid: str) -> None:
        with self._lock:
            self._by_id.pop(sid, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_id)


class RateLimit:
    """At most `attempts` per `window` seconds for each client (a sliding window)."""

    def __init__(self, attempts: int, window: float = 60.0) -> None:
        self.attempts = attempts
        self.window = window
        self._lock = threading.Lock()
        self._seen: dict[str, deque[float]] = {}

    def allow(self, client: str) -> bool:
        now = time.monotonic()
        with self._lock:
            times = self._seen.setdefault(client, deque())
            while times and now - times[0] > self.window:
                times.popleft()
            if len(times) >= self.attempts:
                return False
            times.append(now)
            if len(self._seen) > 10000:  # forget clients seen long ago
                for key in [k for k, t in self._seen.items() if not t or now - t[-1] > self.window]:
                    del self._seen[key]
            return True
