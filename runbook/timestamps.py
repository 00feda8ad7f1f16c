"""The tool's two ways of writing the time: ISO 8601 in records (`now_iso`) and the compact UTC
stamp that leads a run, job or sweep directory's name so they sort by start (`utc_stamp`)."""

from __future__ import annotations

import datetime as dt


def now_iso() -> str:
    """Now, UTC, to the second: `2026-03-04T10:40:00+00:00`."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def iso_z(ts: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC with a `Z` (`2026-03-04T10:40:00.250Z`): how every
    timestamp goes out in JSON output (None stays None)."""
    if ts is None:
        return None
    at = dt.datetime.fromtimestamp(ts, dt.timezone.utc)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_stamp() -> str:
    """Now, UTC, compact: `20260304T104000Z`."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
