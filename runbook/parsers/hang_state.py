"""The node's view of a hang (`parse: hang`): its ranks' flight-recorder dumps (`fr/*`), the
stacks of their live processes (`pyspy/*`), their watchdog lines (`app/*.log`, `nccl/*.log`),
the rank processes found (`ranks.txt`) and NCCL's RAS report (`ncclras.txt`), lined up by
`runbook.hang.analyse`.

Facts: `cause` (collective-desync, rank-stalled, collective-hung, or None), `statement`,
`evidence` (the culprit's earliest first), `stalled_ranks`, `views` (every rank's evidence,
which the job merge lines up across nodes), and each source's own facts under `fr`,
`pyspy`, `watchdog`, `ncclras`, `processes`. Pure.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from runbook import hang
from runbook.parsers._common import is_collected
from runbook.parsers.flight_recorder import flight_recorder_facts
from runbook.parsers.ncclras import ncclras_facts
from runbook.parsers.pyspy import pyspy_facts
from runbook.parsers.registry import Files, register
from runbook.parsers.watchdog import watchdog_facts

PROCESSES = "ranks.txt"
_PROCESS = re.compile(r"^pid=(?P<pid>\d+) rank=(?P<rank>\d+)(?P<rest>.*)$")


def parse_processes(text: str) -> list[dict[str, Any]]:
    """`ranks.txt`: one `pid=P rank=R key=value…` line per rank process found on the node."""
    out = []
    for line in text.splitlines():
        m = _PROCESS.match(line.strip())
        if m:
            record: dict[str, Any] = {"pid": int(m.group("pid")), "rank": int(m.group("rank"))}
            for pair in m.group("rest").split():
                key, _, value = pair.partition("=")
                if key in ("local_rank", "world_size") and value.isdigit():
                    record[key] = int(value)
                elif key == "fr" and value:
                    record["fr_prefix"] = value
            out.append(record)
    return out


def _now(context: Mapping[str, Any]) -> str | None:
    """The collection time as ISO text (None when the context has no time: facts stay JSON)."""
    value = context.get("collected_at")
    if isinstance(value, dt.date):
        return value.isoformat()
    return value if isinstance(value, str) else None


@register("hang", "a hang lined up from the ranks' flight recorder, stacks and watchdog lines")
def hang_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    fr = flight_recorder_facts(files, context)
    spy = pyspy_facts(files, context)
    dog = watchdog_facts(files, context)
    ras = ncclras_facts(files, context)
    processes_file = files.get(PROCESSES)
    processes = parse_processes(processes_file.text()) if is_collected(processes_file) else []
    node = context.get("node")
    views = hang.views_from_facts(fr, spy, dog, node=str(node) if node else None)
    for process in processes:
        view = views.get(process["rank"])
        if view is not None and view.pid is None:
            view.pid = process["pid"]
    result = hang.analyse(
        views, dog, now=_now(context), ras=ras, fr_reports=fr.get("analyses") or []
    )
    collected = bool(fr["collected"] or spy["collected"] or dog.get("timeouts") or processes)
    return {
        "collected": collected,
        "read_at": _now(context),
        "cause": result.get("cause"),
        "statement": result.get("statement") or "",
        "basis": result.get("basis"),
        "confidence": result.get("confidence"),
        "evidence": result.get("evidence") or [],
        "stalled_ranks": result.get("stalled_ranks") or [],
        "analysis": {k: v for k, v in result.items() if k not in ("evidence", "statement")},
        "views": [v.to_json() for _, v in sorted(views.items())],
        "processes": processes,
        "fr": {k: fr[k] for k in ("collected", "ranks", "unreadable", "analyses")},
        "pyspy": {
            "collected": spy["collected"],
            "ranks": sorted({d["rank"] for d in spy["dumps"] if d.get("rank") is not None}),
            "not_read": spy["not_read"],
            # every stack read, a rank's or not (a dump named by its pid alone has no rank)
            "stacks": [
                {
                    **{k: d.get(k) for k in ("source", "rank", "pid")},
                    "collective": (d.get("main") or {}).get("collective"),
                    "collective_thread": (d.get("main") or {}).get("collective_thread"),
                    "stack": (d.get("main") or {}).get("stack") or [],
                }
                for d in spy["dumps"][:64]
            ],
            # each process whose stack waits in a collective, as evidence (its dump's line)
            "waiting": _waiting(spy["dumps"][:64]),
        },
        "watchdog": {
            k: dog.get(k) or []
            for k in ("timeouts", "statuses", "lagging", "mismatches", "gloo_timeouts")
        },
        "ncclras": ras,
    }


def _waiting(dumps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each dump whose rank (or process) waits in a collective: where, as one evidence line."""
    found = []
    for d in dumps:
        main = d.get("main") or {}
        line = main.get("line")
        if not main.get("collective") or not isinstance(line, int) or isinstance(line, bool):
            continue
        who = f"rank {d['rank']}" if d.get("rank") is not None else f"process {d.get('pid')}"
        where = " → ".join(main.get("stack") or []) or main["collective"]
        found.append(
            {
                "source": d.get("source"),
                "line": line,
                "text": f"{who} waits in {main['collective']}: {where}",
            }
        )
    return found
