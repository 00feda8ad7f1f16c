"""The desk's web application (Starlette): sessions, security headers, sign-in, and the
routes; the pages themselves are in runbook.desk.views.

Every response carries a Content-Security-Policy without inline script or style and with
frame-ancestors 'none', X-Content-Type-Options nosniff, X-Frame-Options DENY, no-store
caching, and HSTS when served over TLS. Every POST needs a signed-in session and its CSRF
token, and is refused when the browser says it came from another origin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runbook.config import Config
from runbook.desk import auth, views
from runbook.desk.publisher import Publisher
from runbook.desk.sessions import RateLimit, Session, Sessions
from runbook.desk.settings import DeskSettings
from runbook.desk.state import DeskApp, desk, refuse, render, set_session_cookie, signed_in

log = logging.getLogger(__name__)
HERE = Path(__file__).parent

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


# ------------------------------------------------------------------------------ middleware
class Security:
    """Resolves the session (and a trusted proxy's identity) before the route, and adds the
    security headers to every response."""

    def __init__(self, app: ASGIApp, desk_app: DeskApp) -> None:
        self.app = app
        self.desk = desk_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        cookie = request.cookies.get(self.desk.cookie)
        session = self.desk.sessions.get(cookie)
        if cookie and session is None:
            scope["desk.had_cookie"] = True  # a session that expired (or a restart ended)
        fresh: Session | None = None
        proxied = auth.header_identity(request, self.desk.settings.header)
        if proxied is not None and (session is None or session.identity != proxied):
            # the proxy vouches for this person on every request: a session of theirs holds
            # the CSRF token of their forms (a different person: a different session)
            fresh = self.desk.sessions.sign_in(session or self.desk.sessions.new(), proxied)
            session = fresh
        scope["desk.session"] = session
        scope["session"] = session.data if session else {}
        headers = [
            (b"content-security-policy", CSP.encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin"),
            (b"cache-control", b"no-store"),
        ]
        if not self.desk.settings.insecure_http:
            headers.append((b"strict-transport-security", b"max-age=31536000"))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"
                ]
                raw += headers
                if fresh is not None and "desk.cookie_set" not in scope:
                    response = Response()
                    set_session_cookie(self.desk, response, fresh)
                    raw += [(k, v) for k, v in response.raw_headers if k == b"set-cookie"]
                message = {**message, "headers": raw}
            await send(message)

        await self.app(scope, receive, send_with_headers)


Endpoint = Callable[[Request], Awaitable[Response]]


async def checked_post(request: Request) -> tuple[Session, dict[str, str]] | Response:
    """The signed-in session and the form of a POST, or the refusal: no session (403), a
    request from another origin or without its session's CSRF token (403)."""
    app = desk(request)
    session: Session | None = request.scope.get("desk.session")
    origin = request.headers.get("origin")
    if origin is not None and origin != app.origin:
        return refuse(request, 403, f"refused: a request from another origin ({origin})")
    if request.headers.get("sec-fetch-site") == "cross-site":
        return refuse(request, 403, "refused: a request from another site")
    if session is None or session.identity is None:
        return refuse(request, 403, "refused: not signed in")
    form = await request.form()
    values = {k: str(v) for k, v in form.items() if isinstance(v, str)}
    if not session.csrf_ok(values.get("csrf")):
        return refuse(
            request,
            403,
            "refused: the form's CSRF token is not this session's (reload the page and try again)",
        )
    return session, values


# ------------------------------------------------------------------------------ sign-in
async def login(request: Request) -> Response:
    app = desk(request)
    if signed_in(request) is not None:
        return RedirectResponse("/queue", status_code=303)
    return render(
        request,
        "login.html",
        oidc=app.settings.oidc is not None,
        header=app.settings.header is not None,
        expired=request.query_params.get("expired") == "1",
    )


async def login_start(request: Request) -> Response:
    app = desk(request)
    if app.oidc is None:
        return refuse(request, 404, "this desk signs in through its proxy, not OpenID Connect")
    if not app.logins.allow(auth.client_address(request, app.settings)):
        return refuse(request, 429, "too many sign-in attempts from this address: wait a minute")
    session = app.sessions.new()
    request.scope["session"] = session.data
    try:
        response: Response = await app.oidc.authorize_redirect(
            request, app.settings.base_url + "/login/callback"
        )
    except Exception as exc:  # the provider unreachable, its metadata bad
        log.warning("sign-in could not start: %s", exc)
        app.sessions.end(session.id)
        return refuse(
            request, 502, f"the sign-in provider could not be reached ({type(exc).__name__})"
        )
    set_session_cookie(app, response, session)
    return response


async def login_callback(request: Request) -> Response:
    app = desk(request)
    if app.oidc is None or app.settings.oidc is None:
        return refuse(request, 404, "this desk does not sign in through OpenID Connect")
    if not app.logins.allow(auth.client_address(request, app.settings)):
        return refuse(request, 429, "too many sign-in attempts from this address: wait a minute")
    session: Session | None = request.scope.get("desk.session")
    if session is None:
        return refuse(
            request,
            400,
            "sign-in failed: this browser's sign-in session is gone "
            "(cookies blocked, or it expired): start again",
        )
    try:
        token = await app.oidc.authorize_access_token(request)
    except auth.oauth_error() as exc:
        return refuse(request, 400, f"sign-in failed: {getattr(exc, 'description', exc)}")
    except Exception as exc:
        log.warning("sign-in failed: %s", exc)
        return refuse(request, 502, f"sign-in failed: the provider's answer ({type(exc).__name__})")
    claims = dict(token.get("userinfo") or {})
    who = auth.identity_from_claims(claims, app.settings.oidc)
    if who is None:
        return refuse(
            request, 403, f"sign-in failed: the ID token has no {app.settings.oidc.user_claim}"
        )
    if not app.settings.policy.may_enter(who):
        app.sessions.end(session.id)
        return refuse(
            request,
            403,
            f"{who.name} is not allowed on this desk (no desk.allow rule "
            "names them or their groups)",
        )
    fresh = app.sessions.sign_in(session, who)
    response = RedirectResponse("/queue", status_code=303)
    set_session_cookie(app, response, fresh)
    request.scope["desk.cookie_set"] = True
    log.info("signed in: %s (%s)", who.name, ",".join(who.groups))
    return response


async def logout(request: Request) -> Response:
    checked = await checked_post(request)
    if isinstance(checked, Response):
        return checked
    session, _ = checked
    desk(request).sessions.end(session.id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(
        desk(request).cookie,
        path="/",
        secure=not desk(request).settings.insecure_http,
        httponly=True,
        samesite="lax",
    )
    return response


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


# ------------------------------------------------------------------------------ the app
def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.asynccontextmanager
async def lifespan(state: DeskApp) -> AsyncIterator[None]:
    """Started: the publisher's first pass. Stopping (uvicorn's shutdown, after it stopped
    listening and its connections closed): no new decision, the approvals running waited for
    up to desk.shutdown_wait (what it waits for said in the log), then the publisher's last
    pass. A second SIGTERM or ^C ends the wait (runbook.cli.desk)."""
    if state.publisher is not None:
        state.publisher.start()
    try:
        yield
    finally:
        await asyncio.to_thread(state.runs.drain, state.settings.shutdown_wait, _say)
        if state.publisher is not None and not state.runs.abandoned.is_set():
            await asyncio.to_thread(state.publisher.stop)
        state.readers.close()


def build(config: Config, settings: DeskSettings) -> Starlette:
    state = DeskApp(
        config=config,
        settings=settings,
        sessions=Sessions(ttl=settings.session_ttl, idle=settings.session_idle),
        logins=RateLimit(settings.login_attempts, 60.0),
    )
    if settings.oidc is not None:
        state.oidc = auth.oidc_client(settings.oidc)
    state.publisher = Publisher(config, interval=settings.publish_interval)

    def guarded(endpoint: Callable[[Request], Any]) -> Endpoint:
        """A page for signed-in people the policy lets in; others go to the sign-in page."""

        async def run(request: Request) -> Response:
            who = signed_in(request)
            if who is None:
                expired = "desk.had_cookie" in request.scope
                return RedirectResponse(
                    "/login" + ("?expired=1" if expired else ""), status_code=303
                )
            if not settings.policy.may_enter(who):
                return refuse(request, 403, f"{who.name} is not allowed on this desk")
            from starlette.concurrency import run_in_threadpool

            result: Response = await run_in_threadpool(endpoint, request)
            return result

        return run

    def posted(endpoint: Callable[[Request, Session, dict[str, str]], Any]) -> Endpoint:
        async def run(request: Request) -> Response:
            checked = await checked_post(request)
            if isinstance(checked, Response):
                return checked
            from starlette.concurrency import run_in_threadpool

            result: Response = await run_in_threadpool(endpoint, request, *checked)
            return result

        return run

    routes = [
        Route("/", lambda r: RedirectResponse("/queue", status_code=303)),
        Route("/healthz", healthz),
        Route("/login", login),
        Route("/login/start", login_start),
        Route("/login/callback", login_callback),
        Route("/logout", logout, methods=["POST"]),
        Route("/queue", guarded(views.queue)),
        Route("/audit", guarded(views.audit)),
        Route("/p/{pid}", guarded(views.proposal)),
        Route("/p/{pid}/approve", posted(views.approve), methods=["POST"]),
        Route("/p/{pid}/deny", posted(views.deny), methods=["POST"]),
        Route("/p/{pid}/preview", posted(views.preview), methods=["POST"]),
        Route("/p/{pid}/verify", posted(views.verify), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lambda app: lifespan(state))
    app.state.desk = state
    app.add_middleware(Security, desk_app=state)
    return app
