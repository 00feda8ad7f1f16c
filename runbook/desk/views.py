"""The desk's pages: the queue, a proposal, the audit trail; and the decisions posted from
them. Each runs in a worker thread of the server (the store's calls block) with a read-only
desk of its own; a decision runs in a worker thread of runbook.desk.runs.

What a page shows is read from the store and the audit trail, never kept in the page: a
proposal decided from the CLI or another desk shows as decided on the next load.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from runbook.desk import runs
from runbook.desk.policy import SEVERITIES, severity_of
from runbook.desk.state import desk, refuse, render, signed_in
from runbook.errors import RunbookError
from runbook.remedies import two_person

if TYPE_CHECKING:
    from runbook.desk.sessions import Session
    from runbook.desk.state import DeskApp
    from runbook.remedies.approval import Desk
    from runbook.remedies.store import QueuedProposal

#: a tab and the states it shows (the store's `pending` is within its TTL, `expired` past it)
TABS = {
    "pending": ("pending",),
    "decided": ("running", "succeeded", "failed", "denied", "refused"),
    "expired": ("expired",),
}


def _app(request: Request) -> DeskApp:
    return desk(request)


def _reader(app: DeskApp) -> contextlib.AbstractContextManager[Desk]:
    """This worker thread's read-only desk, kept between pages (runbook.desk.readers)."""
    return app.readers.reader()


# ------------------------------------------------------------------------------ queue
def queue(request: Request) -> Response:
    from runbook.remedies import kinds as kinds_mod

    app = _app(request)
    q = request.query_params
    tab = q.get("tab", "pending") if q.get("tab") in TABS else "pending"
    node = (q.get("node") or "").strip() or None
    kind = (q.get("kind") or "").strip() or None
    severity = q.get("severity") if q.get("severity") in SEVERITIES else None
    try:
        page = max(int(q.get("page", "1")), 1)
    except ValueError:
        page = 1
    all_kinds = kinds_mod.queued_names()
    size = app.settings.page_size
    now = time.time()
    with _reader(app) as reader:
        total = reader.store.count(TABS[tab], node, kind, severity)
        pages = max(math.ceil(total / size), 1)
        page = min(page, pages)
        items = reader.store.page(
            TABS[tab], node, kind, severity, offset=(page - 1) * size, limit=size
        )
    base = {
        k: v
        for k, v in {
            "tab": tab,
            "node": node or "",
            "kind": kind or "",
            "severity": severity or "",
        }.items()
        if v
    }

    def link(**change: Any) -> str:
        return "/queue?" + urlencode({**base, **change})

    return render(
        request,
        "queue.html",
        tab=tab,
        tabs=list(TABS),
        items=items,
        now=now,
        total=total,
        page=page,
        pages=pages,
        node=node or "",
        kind=kind or "",
        severity=severity or "",
        kinds=all_kinds,
        severities=SEVERITIES,
        link=link,
        prev=link(page=page - 1) if page > 1 else None,
        next=link(page=page + 1) if page < pages else None,
    )


# ------------------------------------------------------------------------------ proposal
def _target(p: QueuedProposal) -> dict[str, Any] | None:
    """Where the proposal's node is (node, address, user, jump hosts), resolved as the run
    resolved it (runbook.remedies.reach), and where its playbook runs."""
    from runbook.remedies import plans

    if not p.target:
        return None
    target = plans.Target.from_dict(p.target)
    out: dict[str, Any] = {
        "url": target.url,
        "node": p.node,
        "address": None,
        "user": None,
        "jump": [],
        "error": None,
    }
    if target.scheme == "ssh":
        try:
            from runbook.remedies import reach

            reached = reach.resolve(target)
            out["address"] = f"{reached.endpoint.host}:{reached.endpoint.port}"
            out["user"] = reached.endpoint.user
            out["jump"] = [h.address() for h in reached.endpoint.chain()]
            out["describe"] = reached.describe()
        except RunbookError as exc:
            out["error"] = exc.one_line()
    else:
        out["describe"] = plans.runs_on_node(p.node or "node", target)
    return out


def _audit(reader: Desk, app: DeskApp, pid: str | None) -> tuple[list[dict[str, Any]], Any]:
    """The proposal's audit entries (all entries when `pid` is None), and the chain's
    verification: both read again only when the chain's head moved (the store's anchor), so
    a page does not re-read the whole trail while nothing was decided."""
    anchor = reader.store.audit_head()
    key = (anchor.seq, anchor.hash) if anchor else None
    cached = app.audit_cache.get("trail")
    if cached is None or cached[0] != key:
        entries = list(reader.audit.entries())
        by_proposal: dict[str, list[dict[str, Any]]] = {}
        for entry in entries:
            by_proposal.setdefault(str(entry.get("proposal")), []).append(entry)
        cached = (key, reader.audit.verify(anchor=anchor), entries, by_proposal)
        app.audit_cache["trail"] = cached
    _, verification, everything, grouped = cached
    return (list(everything) if pid is None else list(grouped.get(pid, []))), verification


def _latest_diff(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest check-mode run of the proposal (a preview, or an approval's check run)."""
    for entry in reversed(entries):
        if entry.get("event") in ("previewed", "check"):
            data = entry.get("data") or {}
            return {
                "event": entry["event"],
                "time": entry.get("time"),
                "status": data.get("status"),
                "rc": data.get("rc"),
                "diff": str(data.get("diff") or ""),
                "by": entry.get("actor"),
            }
    return None


def proposal(request: Request) -> Response:
    from runbook.remedies.store import NotFound
    from runbook.verify.record import verifiable

    app = _app(request)
    pid = request.path_params["pid"]
    who = signed_in(request)
    assert who is not None
    with _reader(app) as reader:
        try:
            p = reader.store.get(pid)
        except NotFound:
            return refuse(request, 404, f"no proposal {pid} in this queue")
        entries, verification = _audit(reader, app, pid)
    run = app.runs.get(pid)
    policy = app.settings.policy
    can_verify = (
        verifiable(p) is None
        and bool(p.target)
        and not str((p.target or {}).get("url", "")).startswith("replay://")
    )
    return render(
        request,
        "proposal.html",
        p=p,
        severity=severity_of(p.root_cause),
        now=time.time(),
        evidence=p.evidence or {},
        first=(p.evidence or {}).get("first_anomaly") or {},
        plan=p.plan or {},
        target=_target(p),
        check=_latest_diff(entries),
        entries=entries,
        verification=verification,
        run=runs.describe(run),
        may_decide=policy.may_decide(who, p.kind, p.root_cause),
        why_not=policy.why_not(who, p.kind, p.root_cause),
        two_person=two_person.stated(p.kind, two_person.Policy.from_config(app.config)),
        approvals=p.approvals,
        requested_by=getattr(p, "requested_by", None),
        can_verify=can_verify,
        refresh=run is not None and run.running,
    )


def _back(pid: str) -> Response:
    return RedirectResponse(f"/p/{pid}#run", status_code=303)


def _started(
    request: Request, app: DeskApp, run: runs.Run, body: Callable[[runs.Run], str]
) -> Response:
    """Start `run` in a worker thread and go back to its page; refused while stopping."""
    try:
        app.runs.start(run, body)
    except runs.Stopping as exc:
        return refuse(request, 503, exc.one_line())
    return _back(run.pid)


def approve(request: Request, session: Session, form: dict[str, str]) -> Response:
    """Approve: what `runbook approvals approve` runs (the two-person rule included: the
    Desk records this approval and refuses while a second person is needed), in a worker
    thread; the page shows its output."""
    app = _app(request)
    pid = request.path_params["pid"]
    who = session.identity
    assert who is not None
    policy = app.settings.policy
    body = runs.approve(app.config, policy, who, app.publisher)
    return _started(request, app, runs.Run(pid, "approve", who.name), body)


def deny(request: Request, session: Session, form: dict[str, str]) -> Response:
    app = _app(request)
    pid = request.path_params["pid"]
    who = session.identity
    assert who is not None
    reason = " ".join(form.get("reason", "").split())
    if not reason:
        return refuse(request, 400, "a denial needs a reason")
    if app.runs.closing:
        return refuse(request, 503, "the desk is stopping: it takes no new decision")
    try:
        with runs.WebDesk(app.config, who, app.settings.policy, app.publisher) as web:
            web.deny(pid, reason=reason, as_user=who.name)
    except RunbookError as exc:
        return refuse(request, 409, exc.one_line())
    return _back(pid)


def preview(request: Request, session: Session, form: dict[str, str]) -> Response:
    """Check mode with diff (`runbook approvals preview`), in a worker thread; for those who
    may decide the proposal (it runs Ansible, if only in check mode)."""
    app = _app(request)
    pid = request.path_params["pid"]
    who = session.identity
    assert who is not None
    with _reader(app) as reader:
        try:
            p = reader.store.get(pid)
        except RunbookError as exc:
            return refuse(request, 404, exc.one_line())
    why = app.settings.policy.why_not(who, p.kind, p.root_cause)
    if why is not None:
        return refuse(request, 403, why)

    def body(run: runs.Run) -> str:
        from runbook.cli.approvals import print_diff, task_printer

        console = run.console()
        console.print(f"check mode of {pid} (changes nothing)")
        with runs.WebDesk(app.config, who, app.settings.policy, app.publisher) as d:
            result = d.preview(pid, on_task=task_printer(console))
        print_diff(console, result.diff_text(), ok=result.ok)
        return "checked" if result.ok else "check failed"

    return _started(request, app, runs.Run(pid, "preview", who.name), body)


def verify(request: Request, session: Session, form: dict[str, str]) -> Response:
    app = _app(request)
    pid = request.path_params["pid"]
    who = session.identity
    assert who is not None
    body = runs.verify(app.config, app.settings.policy, who, app.publisher)
    return _started(request, app, runs.Run(pid, "verify", who.name), body)


# ------------------------------------------------------------------------------ audit
def audit(request: Request) -> Response:
    app = _app(request)
    with _reader(app) as reader:
        entries, verification = _audit(reader, app, None)
    try:
        page = max(int(request.query_params.get("page", "1")), 1)
    except ValueError:
        page = 1
    size = 100
    newest = list(reversed(entries))
    pages = max(math.ceil(len(newest) / size), 1)
    page = min(page, pages)
    return render(
        request,
        "audit.html",
        entries=newest[(page - 1) * size : page * size],
        verification=verification,
        total=len(entries),
        page=page,
        pages=pages,
        log=str(app.config.audit_log),
    )
