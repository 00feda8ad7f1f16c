"""Local stand-ins for the paging services: an HTTP server on 127.0.0.1 per service, in a
thread, that checks every request against the service's documented shape (tests/paging/
shapes.py) and answers as the service does — PagerDuty 202 with its JSON, 400 "invalid event"
for a malformed one; Teams 202; Slack 200 `ok`, 400 `invalid_blocks`; the generic receiver
verifies the signature and refuses (401) what does not verify or is replayed — or hangs when
told to. What each was sent is kept, raw, for the test to read."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.paging import shapes

ROUTING_KEY = "R0UT1NGK3Y0000000000000000000abc"  # 32 characters, as PagerDuty's are
SECRET = "s1gn1ng-s3cr3t-0f-th3-r3c3iv3r"
URL_TOKEN = "T0AAAA/B0BBBB/w3bh00kt0k3n"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    service: str
    url: str = ""
    requests: list[Received] = field(default_factory=list)
    #: what the shape checks found wrong, per request, in order
    problems: list[list[str]] = field(default_factory=list)
    #: "ok" | "hang" | an HTTP status to answer with
    mode: Any = "ok"
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def accepted(self) -> list[Any]:
        """The JSON of every request answered as taken (shape right, signature verified)."""
        return [r.json() for r, p in zip(self.requests, self.problems, strict=True) if not p]


CHECKS: dict[str, Callable[[Received], list[str]]] = {
    "pagerduty": lambda r: shapes.pagerduty(r.json()),
    "teams": lambda r: shapes.teams(r.json()),
    "slack": lambda r: shapes.slack(r.json()),
}


def _check(service: str, request: Received) -> list[str]:
    if request.headers.get("Content-Type") != "application/json":
        return [f"Content-Type {request.headers.get('Content-Type')!r}"]
    try:
        request.json()
    except ValueError:
        return ["not JSON"]
    if service == "json":
        why = shapes.signature_problem(SECRET, request.headers, request.body, now=time.time())
        return [why] if why else []
    return CHECKS[service](request)


@contextmanager
def receiver(service: str) -> Iterator[Receiver]:
    state = Receiver(service)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = Received(self.path, dict(self.headers.items()), body)
            problems = _check(service, request)
            with state.lock:
                state.requests.append(request)
                state.problems.append(problems)
            if state.mode == "hang":
                state.release.wait(30)
                return
            if state.mode != "ok":
                self._answer(int(state.mode), b"unavailable")
            elif service == "pagerduty":
                data = request.json() if not problems else {}
                answer = (
                    {"status": "invalid event", "message": "Event object is invalid",
                     "errors": problems}
                    if problems
                    else {"status": "success", "message": "Event processed",
                          "dedup_key": data.get("dedup_key")}
                )  # fmt: skip
                self._answer(400 if problems else 202, json.dumps(answer).encode())
            elif service == "slack":
                self._answer(400 if problems else 200, b"invalid_blocks" if problems else b"ok")
            elif service == "json" and problems:
                self._answer(401, problems[0].encode())
            else:
                self._answer(400 if problems else 202, b"")

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    path = "/v2/enqueue" if service == "pagerduty" else f"/hooks/{URL_TOKEN}"
    state.url = f"http://{host}:{port}{path}"
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def config_text(
    receivers: dict[str, Receiver], *, desk: str = "https://desk.example.org", extra: str = ""
) -> str:
    """A config whose notify section sends to each receiver given (no secret in it: the
    routing key and the signing secret come from the environment, `secret_env`)."""
    lines = [extra, "notify:"] if extra else ["notify:"]
    if "json" in receivers:
        lines += [f"  webhook_url: {receivers['json'].url}", "  format: json"]
    if "slack" in receivers:
        lines += [f"  slack: {{webhook_url: '{receivers['slack'].url}'}}"]
    if "teams" in receivers:
        lines += [f"  teams: {{webhook_url: '{receivers['teams'].url}'}}"]
    if "pagerduty" in receivers:
        lines += [f"  pagerduty: {{url: '{receivers['pagerduty'].url}'}}"]
    lines += ["  timeout: 1s", "desk:", f"  base_url: {desk}"]
    return "\n".join(lines) + "\n"


def secret_env() -> dict[str, str]:
    return {"RUNBOOK_PAGERDUTY_ROUTING_KEY": ROUTING_KEY, "RUNBOOK_WEBHOOK_SECRET": SECRET}
