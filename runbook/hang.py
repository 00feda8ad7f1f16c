"""A hang, from each rank's last collectives: which rank never arrived, which called something
else, or whether every rank entered and nothing completed. Pure: no I/O.

Each rank is a `RankView` built from what its node gave: its flight-recorder dump (every
collective it entered, by process group and sequence number), the stack of its live process
(`py-spy dump`), and its watchdog lines. `analyse` lines the ranks up by (process group,
sequence number):

- the hung collective is the lowest sequence number some rank entered and did not complete;
- ranks that called that number with another op, or the same op with other sizes or dtypes,
  are a **collective-desync**;
- member ranks whose last collective is below it never entered it: **rank-stalled** (their
  stack says where they are instead);
- every member entered it with the same op and sizes and none completed: **collective-hung**
  (transport or fabric);
- members with no evidence at all (their node not read) leave it open: no cause, and what is
  missing is named.

Without dumps, the report of PyTorch's own analyser of them (`fr_trace`) where an operator
left it beside them (the ranks it found missing from a collective, or the culprits that called
it with another op, size or dtype); then the watchdog lines (a desync report's lagging ranks, a
DETAIL fingerprint mismatch, two ranks timing out in the same number with another op or size,
ranks that logged no timeout while the others did; one rank's timeout alone names no cause);
without either the stacks (ranks in a collective and ranks not in one), and last NCCL RAS
(ranks missing from a communicator, or behind its count).
The node's parser (`hang`) and the job merge (`runbook.job.hang`) both call
`analyse`: one node sees its own ranks, the job all of them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbook.causal import parse_time
from runbook.parsers.flight_recorder import DESYNC_ERRORS

CAUSES = ("collective-desync", "rank-stalled", "collective-hung")


@dataclass
class RankView:
    """One rank's evidence (see the module docstring); serialisable with `to_json`."""

    rank: int
    node: str | None = None
    pid: int | None = None
    #: process group name -> {"ranks": [...], "desc": str, "entries": [...], "entered": int}
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    fr_source: str | None = None
    #: the main thread's innermost frames, outermost of them first
    stack: list[str] = field(default_factory=list)
    #: the c10d call the main thread is in, if any
    in_collective: str | None = None
    stack_source: str | None = None
    stack_line: int | None = None
    #: this rank's watchdog timeouts (seq, op, numel_in, …) and its last timed log line
    timeouts: list[dict[str, Any]] = field(default_factory=list)
    last_seen: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node": self.node,
            "pid": self.pid,
            "groups": self.groups,
            "fr_source": self.fr_source,
            "stack": self.stack,
            "in_collective": self.in_collective,
            "stack_source": self.stack_source,
            "stack_line": self.stack_line,
            "timeouts": self.timeouts,
            "last_seen": self.last_seen,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankView:
        return cls(
            rank=int(data["rank"]),
            node=data.get("node"),
            pid=data.get("pid"),
            groups=dict(data.get("groups") or {}),
            fr_source=data.get("fr_source"),
            stack=list(data.get("stack") or []),
            in_collective=data.get("in_collective"),
            stack_source=data.get("stack_source"),
            stack_line=data.get("stack_line"),
            timeouts=list(data.get("timeouts") or []),
            last_seen=data.get("last_seen"),
        )


def views_from_facts(
    fr: Mapping[str, Any],
    pyspy: Mapping[str, Any],
    watchdog: Mapping[str, Any],
    node: str | None = None,
) -> dict[int, RankView]:
    """Each rank's view from a node's parsed facts (flight_recorder, pyspy, watchdog)."""
    views: dict[int, RankView] = {}

    def view(rank: int) -> RankView:
        return views.setdefault(rank, RankView(rank=rank, node=node))

    for dump in fr.get("dumps") or []:
        if dump.get("rank") is None or dump.get("error"):
            continue
        v = view(int(dump["rank"]))
        v.groups = dict(dump.get("groups") or {})
        v.fr_source = dump.get("source")
    for dump in pyspy.get("dumps") or []:
        main = dump.get("main")
        if dump.get("rank") is None or not main:
            continue
        v = view(int(dump["rank"]))
        v.pid = dump.get("pid")
        v.stack = list(main.get("stack") or [])
        v.in_collective = main.get("collective")
        v.stack_source = dump.get("source")
        v.stack_line = main.get("line")
    for record in watchdog.get("timeouts") or []:
        if record.get("rank") is not None:
            view(int(record["rank"])).timeouts.append(record)
    for record in watchdog.get("last_seen") or []:
        if record.get("rank") is not None and int(record["rank"]) in views:
            views[int(record["rank"])].last_seen = record
    return views


# ---- helpers ------------------------------------------------------------------------------


def _signature(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        str(entry.get("op")),
        str(entry.get("input_sizes")),
        str(entry.get("dtypes")),
    )


def _by_seq(group: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    return {int(e["seq"]): e for e in group.get("entries") or [] if isinstance(e.get("seq"), int)}


def _ranks_text(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks)


def _who(view: RankView) -> str:
    return f"rank {view.rank} ({view.node})" if view.node else f"rank {view.rank}"


def duration_text(seconds: float) -> str:
    """`3 s`, `31 min`, `2 h 5 min`."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours} h {rest // 60} min"


def _stamp(time: Any) -> str:
    moment = parse_time(time)
    if moment is None:
        return ""
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _since(time: Any, now: Any) -> str:
    """` since 2026-…Z` (and how long before the evidence was read), or nothing."""
    start, end = parse_time(time), parse_time(now)
    if start is None:
        return ""
    if end is None:
        return f" since {_stamp(time)}"
    took = duration_text((end - start).total_seconds())
    return f" since {_stamp(time)}, {took} before the evidence was read"


def _before(time: Any, now: Any) -> str:
    """`, 31 min before the evidence was read`, or nothing when either time is unknown."""
    start, end = parse_time(time), parse_time(now)
    if start is None or end is None:
        return ""
    return f", {duration_text((end - start).total_seconds())} before the evidence was read"


def _pg_text(pg: str, desc: str) -> str:
    return f"pg {pg} ({desc})" if desc and desc != pg else f"pg {pg}"


def _fr_evidence(view: RankView, entry: Mapping[str, Any], what: str) -> dict[str, Any]:
    return {
        "source": view.fr_source,
        "line": 1,
        "time": entry.get("created"),
        "text": f"{_who(view)}: {what}",
        "rank": view.rank,
    }


def _stack_evidence(view: RankView) -> dict[str, Any] | None:
    if not view.stack_source:
        return None
    return {
        "source": view.stack_source,
        "line": view.stack_line or 1,
        "time": None,
        "text": f"{_who(view)} main thread: " + " → ".join(view.stack),
        "rank": view.rank,
    }


def _where(view: RankView) -> str:
    if view.stack:
        return f"its main thread is in {' → '.join(view.stack)}"
    if view.stack_source:
        return "its stack was read but shows no Python frame"
    return "no stack of it was read (no live process, or no py-spy)"


# ---- the flight recorder ------------------------------------------------------------------


def _pending_groups(views: Mapping[int, RankView]) -> list[tuple[Any, str, int]]:
    """(when its first rank entered it, process group, seq) of each group's lowest collective
    some rank entered and did not complete; earliest first."""
    found: dict[str, tuple[Any, int]] = {}
    for view in views.values():
        for pg, group in view.groups.items():
            for seq, entry in sorted(_by_seq(group).items()):
                if entry.get("completed"):
                    continue
                when = parse_time(entry.get("created"))
                best = found.get(pg)
                if (
                    best is None
                    or seq < best[1]
                    or (seq == best[1] and when and (best[0] is None or when < best[0]))
                ):
                    found[pg] = (when, seq)
                break
    far = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    return sorted(((w, pg, s) for pg, (w, s) in found.items()), key=lambda x: (x[0] or far, x[1]))


def _members(views: Mapping[int, RankView], pg: str) -> list[int]:
    for view in views.values():
        ranks = (view.groups.get(pg) or {}).get("ranks")
        if ranks:
            return sorted({int(r) for r in ranks})
    return sorted(r for r, v in views.items() if pg in v.groups)


def _from_flight_recorder(views: Mapping[int, RankView], now: Any) -> dict[str, Any] | None:
    pending = _pending_groups(views)
    if not pending:
        return None
    _, pg, seq = pending[0]
    members = _members(views, pg)
    dumped = {r: v for r, v in views.items() if v.fr_source}
    desc = next(
        (str(v.groups[pg].get("desc") or "") for v in dumped.values() if pg in v.groups), ""
    )
    at_seq = {
        r: _by_seq(v.groups[pg])[seq]
        for r, v in dumped.items()
        if pg in v.groups and seq in _by_seq(v.groups[pg])
    }
    waiting = sorted(r for r, e in at_seq.items() if not e.get("completed"))
    behind = sorted(
        r
        for r in members
        if r in dumped
        and r not in at_seq
        and ((dumped[r].groups.get(pg) or {}).get("entered") or 0) < seq
    )
    unseen = sorted(r for r in members if r not in dumped)
    where = _pg_text(pg, desc)
    base: dict[str, Any] = {
        "basis": "flight-recorder",
        "pg": pg,
        "pg_desc": desc,
        "seq": seq,
        "members": members,
        "waiting": waiting,
        "behind": behind,
        "unseen": unseen,
    }
    some = at_seq[waiting[0]] if waiting else next(iter(at_seq.values()))
    op = str(some.get("op"))
    base["op"] = op
    waiting_since = min(
        (t for t in (parse_time(at_seq[r].get("created")) for r in waiting) if t), default=None
    )
    base["waiting_since"] = (
        waiting_since.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")
        if waiting_since
        else None
    )
    wait_text = (
        f"{_ranks_text(waiting)} wait{'s' if len(waiting) == 1 else ''} in {op} #{seq:,} of "
        f"{where}" + (f" since {_stamp(base['waiting_since'])}" if base["waiting_since"] else "")
        if waiting
        else ""
    )
    signatures: dict[tuple[str, str, str], list[int]] = {}
    for rank, entry in sorted(at_seq.items()):
        signatures.setdefault(_signature(entry), []).append(rank)
    if len(signatures) > 1:
        kind = "op" if len({s[0] for s in signatures}) > 1 else "size"
        show_dtypes = len({s[2] for s in signatures}) > 1
        ordered = sorted(signatures.items(), key=lambda kv: kv[1][0])
        if kind == "op":
            head = f"the ranks called different collectives as #{seq:,} of {where}: "
            calls = [f"{_ranks_text(r)} called {sig[0]} with sizes {sig[1]}" for sig, r in ordered]
        else:
            head = f"the ranks called {op} #{seq:,} of {where} with different sizes: "
            calls = [
                f"{_ranks_text(r)} called {sig[0]} with sizes {sig[1]}"
                + (f" of {sig[2]}" if show_dtypes else "")
                for sig, r in ordered
            ]
        pending_by_op: dict[str, list[int]] = {}
        for rank in waiting:
            pending_by_op.setdefault(str(at_seq[rank].get("op")), []).append(rank)
        waits = [
            f"{_ranks_text(r)} wait{'s' if len(r) == 1 else ''} in {o}"
            for o, r in pending_by_op.items()
        ]
        if waits and base["waiting_since"]:
            waits[-1] += f" since {_stamp(base['waiting_since'])}"
        evidence = [
            _fr_evidence(
                dumped[r],
                e,
                f"#{seq} of {where}: {e.get('op')} {e.get('input_sizes')}"
                + (" (completed)" if e.get("completed") else " (not completed)"),
            )
            for r, e in sorted(at_seq.items())
        ]
        return {
            **base,
            "cause": "collective-desync",
            "mismatch": kind,
            "calls": [
                {"ranks": ranks, "op": sig[0], "sizes": sig[1], "dtypes": sig[2]}
                for sig, ranks in signatures.items()
            ],
            "statement": head + "; ".join(calls) + ("; " + ", ".join(waits) if waits else ""),
            "evidence": evidence,
        }
    if behind:
        stalled = []
        evidence = []
        parts = []
        for rank in behind:
            view = dumped[rank]
            entries = _by_seq(view.groups.get(pg) or {})
            last = entries[max(entries)] if entries else None
            since = last.get("created") if last else None
            stalled.append(
                {
                    "rank": rank,
                    "node": view.node,
                    "since": since,
                    "stack": view.stack,
                    "last_collective": (
                        {"op": last.get("op"), "seq": last.get("seq")} if last else None
                    ),
                }
            )
            if last is not None:
                evidence.append(
                    _fr_evidence(
                        view,
                        last,
                        f"last collective {last.get('op')} #{last.get('seq')} of {where}"
                        + (", completed" if last.get("completed") else ", not completed"),
                    )
                )
            elif view.fr_source:
                evidence.append(
                    {"source": view.fr_source, "line": 1, "time": None, "rank": rank,
                     "text": f"{_who(view)}: no collective of {where} in its dump"}
                )  # fmt: skip
            stack = _stack_evidence(view)
            if stack:
                evidence.append(stack)
            last_text = (
                f"; stalled since its {last.get('op')} #{last.get('seq'):,}"
                + (f" at {_stamp(since)}" if since else "")
                + _before(since, now)
                if last
                else "; no collective of that group in its dump"
            )
            parts.append(
                f"{_who(view)} never entered {op} #{seq:,} of {where}; {_where(view)}{last_text}"
            )
        for rank in waiting:
            entry = at_seq[rank]
            evidence.append(_fr_evidence(dumped[rank], entry, f"waits in {op} #{seq} of {where}"))
        return {
            **base,
            "cause": "rank-stalled",
            "stalled_ranks": stalled,
            "statement": "; ".join(parts) + (f"; {wait_text}" if wait_text else ""),
            "evidence": evidence,
        }
    evidence = [
        _fr_evidence(dumped[r], at_seq[r], f"waits in {op} #{seq} of {where}") for r in waiting
    ]
    if unseen:
        return {
            **base,
            "cause": None,
            "statement": f"{wait_text}; {_ranks_text(unseen)} of that group left no evidence "
            "here (their nodes were not read, or they wrote no dump)",
            "evidence": evidence,
        }
    return {
        **base,
        "cause": "collective-hung",
        "statement": f"every rank of {where} ({len(members)}) entered {op} #{seq:,} with the "
        f"same sizes and none completed{_since(base['waiting_since'], now)}: the collective "
        "itself hung (transport or fabric), not a rank",
        "evidence": evidence,
    }


# ---- watchdog lines -----------------------------------------------------------------------


def _from_watchdog(
    views: Mapping[int, RankView], watchdog: Mapping[str, Any], now: Any
) -> dict[str, Any] | None:
    for record in watchdog.get("mismatches") or []:
        prints = record.get("ranks") or []
        if len({(p.get("op"), p.get("shape")) for p in prints}) > 1:
            calls = "; ".join(
                f"rank {p['rank']} called {p['op']} #{p['seq']} with shape {p.get('shape')}"
                for p in prints
            )
            return {
                "basis": "watchdog",
                "cause": "collective-desync",
                "statement": f"PyTorch's collective check found a mismatch: {calls}",
                "evidence": [record],
            }
    lagging = [r for r in watchdog.get("lagging") or [] if r.get("ranks")]
    if lagging:
        record = lagging[0]
        ranks = sorted(set(record["ranks"]))
        what = (
            f"finished collective #{record['finished']} but never joined #{record['missing']}"
            if "finished" in record
            else f"joined collective #{record.get('unfinished')} and never finished it"
        )
        return {
            "basis": "watchdog",
            "cause": "rank-stalled",
            "statement": f"PyTorch's desync report names {_ranks_text(ranks)}: {what}",
            "stalled_ranks": [
                {
                    "rank": r,
                    "node": views[r].node if r in views else None,
                    "since": None,
                    "stack": views[r].stack if r in views else [],
                }
                for r in ranks
            ],
            "evidence": [record],
        }
    timeouts = [t for t in watchdog.get("timeouts") or [] if t.get("rank") is not None]
    if not timeouts:
        return None
    first: dict[int, dict[str, Any]] = {}
    for record in timeouts:
        first.setdefault(int(record["rank"]), record)
    by_seq: dict[tuple[Any, int], dict[tuple[Any, Any], list[int]]] = {}
    for rank, record in first.items():
        key = (record.get("pg"), int(record["seq"]))
        sig = (record.get("op"), record.get("numel_in"))
        by_seq.setdefault(key, {}).setdefault(sig, []).append(rank)
    for (_pg, seq), sigs in sorted(by_seq.items(), key=lambda kv: kv[0][1]):
        if len(sigs) > 1:
            calls = "; ".join(
                f"{_ranks_text(ranks)} timed out in {op}"
                + (f" of {numel} elements" if numel is not None else "")
                for (op, numel), ranks in sorted(sigs.items(), key=lambda kv: kv[1][0])
            )
            evidence = [first[ranks[0]] for ranks in sigs.values()]
            return {
                "basis": "watchdog",
                "cause": "collective-desync",
                "seq": seq,
                "statement": f"the ranks' watchdogs timed out in different collectives as "
                f"#{seq:,}: {calls}",
                "evidence": evidence,
            }
    # a rank whose watchdog reported its group's status timed out too
    detected = {
        int(r["rank"])
        for r in watchdog.get("statuses") or []
        if r.get("rank") is not None and r.get("at") is not None
    }
    # ranks that timed out in different ops at different numbers: one rank went on to other
    # collectives while the others still wait in theirs (their order differs)
    ops: dict[tuple[Any, int], list[int]] = {
        (r.get("op"), int(r["seq"])): [] for r in first.values()
    }
    for rank, record in first.items():
        ops[(record.get("op"), int(record["seq"]))].append(rank)
    if len({op for op, _ in ops}) > 1 and len({seq for _, seq in ops}) > 1:
        calls = "; ".join(
            f"{_ranks_text(ranks)} timed out in {op} #{seq:,}"
            for (op, seq), ranks in sorted(ops.items(), key=lambda kv: kv[0][1])
        )
        return {
            "basis": "watchdog",
            "cause": "collective-desync",
            "statement": f"the ranks' watchdogs timed out in different collectives: {calls}",
            "evidence": [first[ranks[0]] for ranks in ops.values()],
            "confidence": "medium",
        }
    timed_out = sorted(set(first) | detected)
    logged = {int(r["rank"]) for r in watchdog.get("last_seen") or [] if r.get("rank") is not None}
    silent = sorted(logged - set(timed_out))
    (_pg, seq), sigs = min(by_seq.items(), key=lambda kv: kv[0][1])
    (op, _numel), _ = next(iter(sigs.items()))
    if silent:
        seen = {
            int(r["rank"]): r for r in watchdog.get("last_seen") or [] if r.get("rank") is not None
        }
        return {
            "basis": "watchdog",
            "cause": "rank-stalled",
            "seq": seq,
            "statement": f"{_ranks_text(timed_out)} timed out in {op} #{seq:,}; "
            f"{_ranks_text(silent)} logged no timeout (never entered it, or its watchdog did "
            "not fire): look at "
            + ", ".join(f"rank {r}'s last line{_since(seen[r].get('time'), now)}" for r in silent),
            "stalled_ranks": [
                {
                    "rank": r,
                    "node": views[r].node if r in views else None,
                    "since": seen[r].get("time"),
                    "stack": views[r].stack if r in views else [],
                }
                for r in silent
            ],
            "evidence": [seen[r] for r in silent] + [first[timed_out[0]]],
            "confidence": "medium",
        }
    if len(timed_out) < 2:
        # one rank's own timeout says it waited, not that the others were in it too
        return None
    return {
        "basis": "watchdog",
        "cause": "collective-hung",
        "seq": seq,
        "statement": f"every rank that logged ({_ranks_text(timed_out)}) timed out in {op} "
        f"#{seq:,} with the same sizes: they all entered it and none completed (transport or "
        "fabric, unless a rank's log is missing)",
        "evidence": [first[r] for r in timed_out[:1]],
        "confidence": "medium",
    }


# ---- stacks alone -------------------------------------------------------------------------


def _from_stacks(views: Mapping[int, RankView], now: Any) -> dict[str, Any] | None:
    stacked = {r: v for r, v in views.items() if v.stack_source}
    if len(stacked) < 2:
        return None
    inside = sorted(r for r, v in stacked.items() if v.in_collective)
    outside = sorted(r for r, v in stacked.items() if not v.in_collective)
    if not inside:
        return None
    ops = sorted({str(stacked[r].in_collective) for r in inside})
    if outside:
        return {
            "basis": "stacks",
            "cause": "rank-stalled",
            "statement": "; ".join(
                f"{_who(stacked[r])} is in no collective: {_where(stacked[r])}" for r in outside
            )
            + f"; {_ranks_text(inside)} wait in {', '.join(ops)}",
            "stalled_ranks": [
                {"rank": r, "node": stacked[r].node, "since": None, "stack": stacked[r].stack}
                for r in outside
            ],
            "evidence": [e for r in outside if (e := _stack_evidence(stacked[r]))],
            "confidence": "medium",
        }
    if len(ops) > 1:
        return {
            "basis": "stacks",
            "cause": "collective-desync",
            "statement": "the ranks wait in different collectives: "
            + "; ".join(
                f"{_ranks_text([r for r in inside if stacked[r].in_collective == op])} in {op}"
                for op in ops
            ),
            "evidence": [e for r in inside if (e := _stack_evidence(stacked[r]))],
            "confidence": "medium",
        }
    return None


def _from_ras(ras: Mapping[str, Any]) -> dict[str, Any] | None:
    """NCCL RAS alone: ranks it found missing (unresponsive, dead) or behind the others'
    operation count. One query cannot tell a stuck count from a slow one: medium."""
    if not ras.get("available"):
        return None
    missing = ras.get("missing_ranks") or []
    behind = ras.get("behind") or []
    records = missing or behind
    ranks = sorted({int(r["rank"]) for r in records if isinstance(r.get("rank"), int)})
    if not ranks:
        return None
    what = (
        "missing from the communicator (their process does not answer NCCL RAS)"
        if missing
        else f"behind the others' operation count (launched up to {behind[0].get('launched')})"
    )
    return {
        "basis": "ncclras",
        "cause": "rank-stalled",
        "statement": f"NCCL RAS: {_ranks_text(ranks)} {what}",
        "stalled_ranks": [
            {"rank": r.get("rank"), "node": r.get("node"), "since": None, "stack": []}
            for r in records
        ],
        "evidence": records[:5],
        "confidence": "medium",
    }


def _from_fr_report(
    views: Mapping[int, RankView], reports: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """PyTorch's own analyser of the dumps (`fr_trace`), when its report is all there is: the
    first collective it names with ranks missing (stalled) or culprits that called it
    differently (desync). A state mismatch alone names no cause."""
    for report in reports:
        where = _pg_text(str(report.get("pg", "?")), str(report.get("pg_desc") or ""))
        what = f"{report.get('op', '?')} #{report.get('seq')} of {where}"
        evidence = [{k: report.get(k) for k in ("source", "line", "text")} | {"time": None}]
        missing = sorted(int(r) for r in report.get("missing_ranks") or [])
        if missing:
            return {
                "basis": "fr_trace",
                "cause": "rank-stalled",
                "seq": report.get("seq"),
                "statement": "PyTorch's flight recorder analyser (fr_trace): "
                f"{_ranks_text(missing)} never joined {what}",
                "stalled_ranks": [
                    {
                        "rank": r,
                        "node": views[r].node if r in views else None,
                        "since": None,
                        "stack": views[r].stack if r in views else [],
                    }
                    for r in missing
                ],
                "evidence": evidence,
            }
        culprits = [c for c in report.get("culprits") or [] if c.get("error") in DESYNC_ERRORS]
        if culprits:
            calls = "; ".join(
                f"rank {c['rank']}: {c['error']}" + (f" ({c['detail']})" if c.get("detail") else "")
                for c in culprits
            )
            return {
                "basis": "fr_trace",
                "cause": "collective-desync",
                "seq": report.get("seq"),
                "statement": f"PyTorch's flight recorder analyser (fr_trace) found {what} "
                f"(input sizes {report.get('input_sizes')}, {report.get('state')}) called "
                f"differently by {_ranks_text([int(c['rank']) for c in culprits])}: {calls}",
                "evidence": evidence,
            }
    return None


def analyse(
    views: Mapping[int, RankView],
    watchdog: Mapping[str, Any] | None = None,
    *,
    now: Any = None,
    ras: Mapping[str, Any] | None = None,
    fr_reports: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The hang's cause from every rank's view (see the module docstring): a mapping with
    `cause` (one of CAUSES, or None), `statement`, `evidence` (the earliest of the culprit's
    first) and, for a stalled rank, `stalled_ranks`. `now` is when the evidence was read;
    `fr_reports` are fr_trace's reports found beside the dumps."""
    result = (
        _from_flight_recorder(views, now)
        or _from_fr_report(views, fr_reports)
        or _from_watchdog(views, watchdog or {}, now)
        or _from_stacks(views, now)
        or _from_ras(ras or {})
    )
    if result is None:
        return {"cause": None, "basis": None, "statement": "", "evidence": []}
    result.setdefault("confidence", "high")
    result["ranks_read"] = sorted(views)
    return result


def merge_views(groups: Iterable[Mapping[int, RankView]]) -> dict[int, RankView]:
    """Several nodes' views as one job's: a rank seen twice keeps the one with more evidence."""
    merged: dict[int, RankView] = {}
    for views in groups:
        for rank, view in views.items():
            old = merged.get(rank)
            if old is None or _weight(view) > _weight(old):
                merged[rank] = view
    return merged


def _weight(view: RankView) -> int:
    return (4 if view.fr_source else 0) + (2 if view.stack_source else 0) + len(view.timeouts)


def verdict_fields(stage_facts: Iterable[Mapping[str, Any]], root_cause: str) -> dict[str, Any]:
    """The verdict's hang fields (DESIGN §5, optional): `stalled_ranks` — rank, node, since and
    stack of each rank that never entered the collective — when the root cause is
    rank-stalled and a stage read them."""
    if root_cause != "rank-stalled":
        return {}
    for facts in stage_facts:
        found = (
            (facts.get("hang") or {}).get("stalled_ranks") if isinstance(facts, Mapping) else None
        )
        if found:
            return {
                "stalled_ranks": [
                    {k: r.get(k) for k in ("rank", "node", "since", "stack")} for r in found
                ]
            }
    return {}
