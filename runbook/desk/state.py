"""What every route of the desk reads (DeskApp: the configuration, the settings, the sessions,
the runs) and how a page is answered (render, refuse); the templates' environment. Both the
routes (runbook.desk.app) and the pages (runbook.desk.views) use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from runbook.config import Config
from runbook.desk.filters import FILTERS
from runbook.desk.policy import Identity
from runbook.desk.publisher import Publisher
from runbook.desk.readers import Readers
from runbook.desk.runs import Runs
from runbook.desk.sessions import RateLimit, Session, Sessions
from runbook.desk.settings import DeskSettings

HERE = Path(__file__).parent


@dataclass
class DeskApp:
    """What every route reads: the configuration, the desk's settings and its state."""

    config: Config
    settings: DeskSettings
    sessions: Sessions
    logins: RateLimit
    runs: Runs = field(default_factory=Runs)
    #: the queue's metrics and notices, published in a thread of the desk's own
    publisher: Publisher | None = None
    #: the read-only stores the pages read through, one per worker thread
    readers: Readers = field(init=False)
    oidc: Any = None
    templates: jinja2.Environment = field(default_factory=lambda: _templates())
    #: the audit chain's verification, kept while the log is unchanged (size, mtime)
    audit_cache: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.readers = Readers(self.config)

    @property
    def cookie(self) -> str:
        # __Host-: sent only over HTTPS, for this host and path / alone
        return "rbk_desk" if self.settings.insecure_http else "__Host-rbk_desk"

    @property
    def origin(self) -> str:
        parts = urlsplit(self.settings.base_url)
        return f"{parts.scheme}://{parts.netloc}"


def _templates() -> jinja2.Environment:
    """HTML templates, every value escaped (autoescape): evidence is shown as text, never as
    markup; nothing is marked safe. (runbook.templating's environment renders commands.)"""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(FILTERS)
    return env


# ------------------------------------------------------------------------------ responses
def desk(request: Request) -> DeskApp:
    found: DeskApp = request.app.state.desk
    return found


def render(request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
    app = desk(request)
    session: Session | None = request.scope.get("desk.session")
    html = app.templates.get_template(name).render(
        who=session.identity if session else None,
        csrf=session.csrf if session else "",
        **values,
    )
    return HTMLResponse(html, status_code=status)


def refuse(request: Request, status: int, message: str) -> HTMLResponse:
    return render(request, "error.html", status=status, message=message, status_code=status)


def set_session_cookie(app: DeskApp, response: Response, session: Session) -> None:
    response.set_cookie(
        app.cookie,
        session.id,
        max_age=int(app.settings.session_ttl),
        path="/",
        secure=not app.settings.insecure_http,
        httponly=True,
        samesite="lax",
    )


def signed_in(request: Request) -> Identity | None:
    session: Session | None = request.scope.get("desk.session")
    return session.identity if session else None
