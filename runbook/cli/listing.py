"""`runbook runbooks` (the shipped runbooks) and `runbook runs` (the run directories kept in the
state dir): what a newcomer can run, and what was run before, without reading the source or
the state dir by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from runbook.cli.options import format_option
from runbook.errors import RunbookError, UsageError


def _runbook_rows() -> list[dict[str, Any]]:
    from runbook.spec import load_file, resolve, shipped

    rows = []
    for ref in shipped():
        path = resolve(ref)
        try:
            book = load_file(path)
        except RunbookError as exc:  # a broken shipped file is said, not hidden
            rows.append({"id": ref, "title": "", "stages": 0, "path": str(path),
                         "error": exc.one_line()})  # fmt: skip
            continue
        rows.append({"id": book.id, "title": book.title, "stages": len(book.stages),
                     "path": str(path)})  # fmt: skip
    return rows


@click.command("runbooks")
@format_option("text", "json", default="text")
def runbooks(fmt: str) -> None:
    """List the shipped runbooks (the ids `run`, `graph` and `validate` take)."""
    rows = _runbook_rows()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    width = max((len(r["id"]) for r in rows), default=2)
    for row in rows:
        stages = f"{row['stages']} stage" + ("" if row["stages"] == 1 else "s")
        what = row.get("error") or f"{row['title']} ({stages})"
        click.echo(f"{row['id']:<{width}}  {what}")


def _row(path: Path) -> dict[str, Any]:
    return {"run_dir": str(path), "runbook": None, "node": None, "started": None,
            "root_cause": None, "status": "unknown"}  # fmt: skip


def _job_row(path: Path) -> dict[str, Any]:
    """A job run's directory (`run --job`, `--hosts-from-file`): its job verdict, job.json."""
    from runbook.jsontext import loads

    row = _row(path)
    try:
        verdict = loads((path / "job.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        row["status"] = "interrupted (a job run is not resumed: run it again)"
        return row
    except (ValueError, OSError) as exc:
        row["status"] = f"unreadable: {exc}"
        return row
    if not isinstance(verdict, dict):
        row["status"] = "unreadable: job.json is not a job verdict"
        return row
    job: dict[str, Any] = verdict["job"] if isinstance(verdict.get("job"), dict) else {}
    nodes = [str(n.get("node")) for n in verdict.get("nodes") or [] if isinstance(n, dict)]
    row.update(
        runbook=verdict.get("runbook"),
        # the job, and its nodes by the names they were given (as a node's run names its node)
        node=f"job {job.get('ref') or '?'} on " + (",".join(nodes) or "no node"),
        root_cause=verdict.get("root_cause"),
        status="finished",
    )
    return row


def _run_row(path: Path) -> dict[str, Any]:
    """One run directory, read as `resume` and `report` read it; what cannot be read is said."""
    from runbook.rundir import events, read_verdict

    if (path / "job.json").exists() or path.parent.name == "jobs":
        return _job_row(path)
    row = _row(path)
    try:
        started = next((e for e in events(path) if e.get("event") == "run-started"), None)
        verdict = read_verdict(path)
    except (RunbookError, OSError) as exc:
        row["status"] = f"unreadable: {exc}"
        return row
    if started:
        row.update(runbook=started.get("runbook"), node=started.get("node"),
                   started=started.get("time"))  # fmt: skip
    if verdict is not None:
        row.update(root_cause=verdict.root_cause, node=row["node"] or verdict.node,
                   status="finished")  # fmt: skip
    elif started:
        row["status"] = "interrupted (runbook resume it)"
    return row


@click.command("runs")
@click.option(
    "--dir", "root", type=click.Path(file_okay=False),
    help="Where run directories are kept (default: the state dir's runs/).",
)  # fmt: skip
@click.option("--limit", type=click.IntRange(1, None), default=20, show_default=True,
              help="The newest this many.")  # fmt: skip
@format_option("text", "json", default="text")
def runs(root: str | None, limit: int, fmt: str) -> None:
    """List past run directories, newest first: runbook, node (or job), root cause, whether
    finished. A node's runs (runs/) and a whole job's (jobs/), together."""
    from runbook.config import state_dir

    bases = [Path(root)] if root else [state_dir() / "runs", state_dir() / "jobs"]
    found: list[Path] = []
    for base in bases:
        try:
            found += [p for p in base.iterdir() if p.is_dir() and not p.is_symlink()]
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"cannot list {base}: {exc.strerror or exc}") from None
    # every directory's name starts with its UTC start stamp: newest first across both
    found.sort(key=lambda p: p.name, reverse=True)
    rows = [_run_row(p) for p in found[:limit]]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no runs in {' or '.join(str(b) for b in bases)}")
        return
    for row in rows:
        parts = [row["run_dir"], row["runbook"] or "-", row["node"] or "-",
                 row["root_cause"] or "-", row["status"]]  # fmt: skip
        click.echo("  ".join(str(p) for p in parts))


COMMANDS = [runbooks, runs]
