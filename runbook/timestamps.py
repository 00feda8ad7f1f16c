"""The tool's two ways of writing the time: ISO 8601 in records (`now_iso`) and the compact UTC
stamp that leads a run, job or sweep directory's name so they sort by start (`utc_stamp`)."""

from __future__ import annotations

import datetime as dt


def now_iso() -> str:
    """Now, UTC, to the second: `2026-03-04T10:40:00Z` (every time the tool itself writes in
    JSON ends in `Z`, as the webhooks and the approvals write them)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_iso(text: str) -> dt.datetime:
    """An ISO 8601 time as the tool writes it (`…Z` or `+00:00`), on every Python this runs on
    (3.10's fromisoformat does not take `Z`); ValueError when it is not one."""
    return dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)


def iso_z(ts: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC with a `Z` (`2026-03-04T10:40:00.250Z`): how every
    timestamp goes out in JSON output (None stays None)."""
    if ts is None:
        return None
    at = dt.datetime.fromtimestamp(ts, dt.timezone.utc)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def z_spelled(text: str) -> str:
    """An ISO 8601 time as text with UTC's `+00:00` written `Z`, as the tool writes it for
    people (a record's own spelling is kept where it is stored)."""
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def utc_stamp() -> str:
    """Now, UTC, compact: `20260304T104000Z`."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
