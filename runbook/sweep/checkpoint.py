"""progress.jsonl: a sweep's results as they come, so a killed sweep can be re-run for the
hosts it had not finished (`runbook sweep … --report DIR --resume`).

One whole JSON line each (appended at once, undone if a write is cut short), in
`REPORT_DIR/progress.jsonl`:

    {"event": "sweep", "format": 1, "key": …, "runbook": …, "source": …, "shard": …,
     "total": M, "started_at": …, "pid": …, "resumed_from": null | started_at of the earlier}
    {"event": "host", "host": NAME, "result": {…sweep.json's host object…}}     × each host
    {"event": "finished", "finished_at": …}          after the four reports were written

A file without its `finished` line is a sweep that was interrupted. Its host lines are each
a host it had finished (its proposals already queued). Lines are written without fsync: they
survive the sweep being killed (the data is the kernel's once written), not the machine
crashing. A last line cut short (a SIGKILL inside a long write) is ignored when read.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbook.atomic import append_whole
from runbook.errors import disk_full_as_error
from runbook.sweep.results import HostResult
from runbook.timestamps import now_iso
from runbook.verdict import VerdictError

log = logging.getLogger(__name__)

NAME = "progress.jsonl"
FORMAT = 1


@dataclass
class Earlier:
    """What an earlier sweep left in the report directory."""

    path: Path
    header: dict[str, Any]
    #: the hosts it finished, by name, in the order they finished
    results: dict[str, HostResult] = field(default_factory=dict)
    finished: bool = False

    @property
    def total(self) -> int:
        return int(self.header.get("total") or 0)

    @property
    def started_at(self) -> str:
        return str(self.header.get("started_at") or "")

    def of(self, key: str, runbook_ref: str) -> bool:
        """Whether it swept the same inventory (lock key, shard included) with the same runbook."""
        return self.header.get("key") == key and self.header.get("runbook") == runbook_ref


def _lines(raw: bytes) -> Iterable[dict[str, Any]]:
    for line in raw.split(b"\n")[:-1]:  # the last piece is "" or a line cut short
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            yield data


def read(directory: Path) -> Earlier | None:
    """The progress file in `directory`, if any."""
    path = directory / NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    lines = list(_lines(raw))
    header = lines[0] if lines and lines[0].get("event") == "sweep" else {}
    earlier = Earlier(path, header)
    for line in lines[1:]:
        if line.get("event") == "host" and isinstance(line.get("result"), Mapping):
            try:
                result = HostResult.from_dict(line["result"])
            except (KeyError, TypeError, ValueError, VerdictError):
                continue
            earlier.results[result.host] = result
        elif line.get("event") == "finished":
            earlier.finished = True
    return earlier


def move_aside(earlier: Earlier) -> Path:
    """Keep an interrupted sweep's progress file under another name (never deleted)."""
    stamp = "".join(c for c in earlier.started_at if c.isalnum())[:15] or "unknown"
    target = earlier.path.with_name(f"progress.interrupted-{stamp}.jsonl")
    n = 1
    while target.exists():
        n += 1
        target = earlier.path.with_name(f"progress.interrupted-{stamp}-{n}.jsonl")
    os.replace(earlier.path, target)
    return target


def _line(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, default=str, ensure_ascii=False) + "\n").encode("utf-8")


class Checkpoint:
    """Appends each host's result to progress.jsonl as it completes. A write that fails (a full
    disk) is logged once and the sweep goes on without it: the reports at the end are the
    sweep's product, the progress file only what lets a killed one be resumed."""

    def __init__(
        self, directory: Path, header: Mapping[str, Any], reused: Iterable[HostResult] = ()
    ) -> None:
        self.path = directory / NAME
        self._fd = -1
        body = _line({"event": "sweep", "format": FORMAT, **header, "pid": os.getpid()})
        body += b"".join(_line({"event": "host", "host": r.host, "result": r.as_dict()})
                         for r in reused)  # fmt: skip
        with disk_full_as_error(directory):
            directory.mkdir(parents=True, exist_ok=True)
            # the header and the reused hosts replace any earlier file at once
            tmp = self.path.with_name(f".{NAME}.{os.getpid()}")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                try:
                    append_whole(fd, body)
                finally:
                    os.close(fd)
                os.replace(tmp, self.path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def _append(self, data: Mapping[str, Any]) -> None:
        if self._fd < 0:
            return
        try:
            append_whole(self._fd, _line(data))
        except OSError as exc:
            log.warning("%s: cannot record progress (%s); going on without it", self.path, exc)
            self.close()

    def host_done(self, result: HostResult) -> None:
        self._append({"event": "host", "host": result.host, "result": result.as_dict()})

    def finish(self) -> None:
        """After the reports are written: this sweep is not one to resume."""
        self._append({"event": "finished", "finished_at": now_iso()})
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
