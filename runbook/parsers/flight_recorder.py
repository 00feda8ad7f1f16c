"""PyTorch's flight recorder dumps (`fr/*`): every collective each rank entered, with its
process group, sequence number, op, sizes, state, times and (pickle form) Python stack.

A rank writes its dump to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` (``TORCH_FR_DUMP_TEMP_FILE``
since 2.7) followed by its global rank, on a watchdog timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``)
or when the job asks (``torch._C._distributed_c10d._dump_fr_trace[_json]``), as a pickle
(the default) or JSON. The runbook brings a pickle over as base64 (`<name>.b64`: evidence is
text); JSON comes as it is.

The formats read (the ``version`` key): 2.0-2.1 (PyTorch 2.3-2.4: ``seq_id``, ``pg_config``
a mapping of name to rank list), 2.2-2.4 (2.5: ``collective_seq_id``/``p2p_seq_id``,
``pg_status``, ``pg_config`` entries ``{name, desc, ranks}`` with ranks as text), 2.5-2.10
(2.6 to today: ``is_p2p``, ``comm_lib_version``, ``thread_name``, ``time_discovered_*``).
A key a version lacks is simply absent from the facts.

A file of ``fr/`` may also be the report of PyTorch's own analyser of those dumps (``fr_trace``,
``torchfrtrace``), as an operator ran it: ``Collective 39 at entry 38 errors`` (2.5-2.6) or
``Collective sequence number: 39 has errors``, ``Not all ranks joining collective, sequence
number: 5`` (later), then ``group info: 0:default_pg``, ``collective: nccl:all_reduce``, ``missing
ranks: {1}``, ``input sizes: [[8]]``, ``expected ranks: {…}``, ``collective state: scheduled`` and
``error msg: Culprit rank 22; Error type: SIZE_OR_SYNTAX_MISMATCH, …``. Each such report is
read into `analyses` (the collective, its group, the ranks missing and the culprits with their
error types); it is no dump, and not unreadable.

A pickle is never loaded with `pickle.load`: the bytes are first checked opcode by opcode
against the plain-container set (dict, list, tuple, str, bytes, int, float, bool, None; no
GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, PERSID, sets or buffers), and the unpickler that then
reads them refuses every class lookup besides. A dump that does not pass is reported as
unreadable, never executed. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
import json
import pickle
import pickletools
import re
from collections.abc import Mapping
from typing import Any

from runbook.parsers._common import is_collected
from runbook.parsers.registry import Files, register

PREFIX = "fr/"
#: the largest dump read (NCCL's default buffer of 2000 entries with stacks is a few MiB)
MAX_DUMP_BYTES = 64 * 1024 * 1024
#: entries kept per process group and rank in the facts (the last ones)
KEEP_ENTRIES = 6
#: frames kept per entry (innermost first)
KEEP_FRAMES = 12
#: collectives kept from fr_trace's reports
MAX_REPORTS = 50
#: containers and scalars visited when a dump is turned into plain data (a pickle's memo can
#: make a small file stand for a huge shared graph)
MAX_NODES = 2_000_000

#: the pickle opcodes that build plain containers and scalars, and nothing else
_PLAIN_OPCODES = frozenset(
    {
        "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
        "NONE", "NEWTRUE", "NEWFALSE",
        "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
        "FLOAT", "BINFLOAT",
        "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE",
        "BINUNICODE", "BINUNICODE8",
        "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
        "EMPTY_LIST", "APPEND", "APPENDS", "LIST",
        "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
        "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
        "GET", "BINGET", "LONG_BINGET", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE",
    }
)  # fmt: skip


class UnsafePickle(ValueError):
    """A pickle that would build something other than plain containers and scalars."""


class _PlainUnpickler(pickle.Unpickler):
    """Reads only what the opcode check let through; any class lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise UnsafePickle(f"the dump names {module}.{name}: not read")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickle("the dump holds a persistent reference: not read")


def load_plain_pickle(data: bytes) -> Any:
    """The object a pickle holds, when it is made only of dict, list, tuple, str, bytes, int,
    float, bool and None; UnsafePickle (naming the first other opcode) otherwise."""
    try:
        for opcode, _arg, pos in pickletools.genops(data):
            if opcode.name not in _PLAIN_OPCODES:
                raise UnsafePickle(f"opcode {opcode.name} at byte {pos}: not a plain container")
    except UnsafePickle:
        raise
    except Exception as err:  # a truncated or corrupt pickle
        raise UnsafePickle(f"not a complete pickle: {err}") from None
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except UnsafePickle:
        raise
    except Exception as err:
        raise UnsafePickle(f"not a readable pickle: {err}") from None


def _plain(value: Any, budget: list[int]) -> Any:
    """`value` as JSON-able data (tuples as lists, bytes as text), within a node budget."""
    budget[0] -= 1
    if budget[0] < 0:
        raise UnsafePickle("the dump is larger than a flight recorder dump can be")
    if isinstance(value, Mapping):
        return {str(k): _plain(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, budget) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def decode_dump(name: str, text: str) -> tuple[dict[str, Any] | None, str | None, str]:
    """(the dump as plain data, why it could not be read, its form: json or pickle)."""
    body = text.strip()
    if name.endswith(".b64"):
        try:
            raw = base64.b64decode("".join(body.split()), validate=True)
        except (binascii.Error, ValueError):
            return None, "not base64", "pickle"
        if len(raw) > MAX_DUMP_BYTES:
            return None, f"larger than {MAX_DUMP_BYTES} bytes", "pickle"
        if raw[:1] == b"{":
            body = raw.decode("utf-8", errors="replace")
        else:
            try:
                data = _plain(load_plain_pickle(raw), [MAX_NODES])
            except UnsafePickle as err:
                return None, str(err), "pickle"
            if not isinstance(data, dict):
                return None, "not a flight recorder dump (no mapping at its top)", "pickle"
            return data, None, "pickle"
    if not body.startswith("{"):
        return None, "neither JSON nor a base64 pickle", "json"
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as err:  # nested deeper than json recurses: unreadable
        return None, f"not JSON: {err}", "json"
    if not isinstance(data, dict):
        return None, "not a flight recorder dump (no object at its top)", "json"
    return data, None, "json"


_RANK_AT_END = re.compile(r"(\d{1,7})(?:\.(?:json|pickle|pkl))?(?:\.b64)?$")


def rank_of(name: str) -> int | None:
    """The global rank a dump's file name ends in (`nccl_trace_rank_5`, `…_5.json`)."""
    match = _RANK_AT_END.search(name.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def ns_to_iso(value: Any) -> str | None:
    """Nanoseconds since the epoch as ISO 8601 UTC (ms); None for 0, None or nonsense."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    try:
        moment = dt.datetime.fromtimestamp(value / 1e9, tz=dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value.strip()):
        return int(value)
    return None


def _ranks(value: Any) -> list[int] | None:
    """A group's ranks: a list, or the text of one (`"[0, 1]"`, as 2.5+ writes it)."""
    if isinstance(value, Mapping):
        value = value.get("ranks")
    if isinstance(value, str):
        found = re.findall(r"-?\d+", value[:100_000])
        return [int(x) for x in found] if found or value.strip() == "[]" else None
    if isinstance(value, list):
        out = [_int(x) for x in value]
        return [x for x in out if x is not None]
    return None


def op_name(profiling_name: Any) -> str:
    """`nccl:all_reduce` -> `all_reduce` (the backend prefix dropped)."""
    text = str(profiling_name or "?")
    return text.split(":", 1)[1] if ":" in text else text


def _frames(value: Any) -> list[dict[str, Any]]:
    out = []
    for frame in value if isinstance(value, list) else []:
        if isinstance(frame, Mapping):
            out.append(
                {
                    "name": str(frame.get("name") or "?"),
                    "file": str(frame.get("filename") or "?"),
                    "line": _int(frame.get("line")),
                }
            )
    return out[:KEEP_FRAMES]


def _entry(raw: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    group = raw.get("process_group")
    pg_name = str(group[0]) if isinstance(group, list) and group else str(raw.get("pg_id", "?"))
    pg_desc = str(group[1]) if isinstance(group, list) and len(group) > 1 else ""
    seq = _int(raw.get("collective_seq_id"))
    if seq is None:
        seq = _int(raw.get("seq_id"))
    state = str(raw.get("state") or "")
    last_completed = _int((status or {}).get("last_completed_collective"))
    p2p = bool(raw.get("is_p2p")) or (
        _int(raw.get("collective_seq_id")) == 0 and (_int(raw.get("p2p_seq_id")) or 0) > 0
    )
    completed = state == "completed" or (
        not p2p and seq is not None and last_completed is not None and seq <= last_completed
    )
    return {
        "pg": pg_name,
        "pg_desc": pg_desc,
        "pg_id": _int(raw.get("pg_id")),
        "seq": seq,
        "p2p_seq": _int(raw.get("p2p_seq_id")),
        "p2p": p2p,
        "op": op_name(raw.get("profiling_name")),
        "input_sizes": raw.get("input_sizes"),
        "output_sizes": raw.get("output_sizes"),
        "dtypes": raw.get("input_dtypes"),
        "state": state,
        "completed": completed,
        "created": ns_to_iso(raw.get("time_created_ns")),
        "started": ns_to_iso(raw.get("time_discovered_started_ns")),
        "completed_at": ns_to_iso(raw.get("time_discovered_completed_ns")),
        "timeout_ms": _int(raw.get("timeout_ms")),
        "record_id": _int(raw.get("record_id")),
        "frames": _frames(raw.get("frames")),
    }


def parse_dump(name: str, text: str) -> dict[str, Any]:
    """One rank's dump as facts: its rank (from the file name), format, version, groups (their
    ranks and status) and its last entries per group, oldest first."""
    data, problem, form = decode_dump(name, text)
    facts: dict[str, Any] = {"source": name, "rank": rank_of(name), "format": form}
    if data is None:
        facts["error"] = problem
        return facts
    statuses: Mapping[str, Any] = (
        data["pg_status"] if isinstance(data.get("pg_status"), Mapping) else {}
    )
    config: Mapping[str, Any] = (
        data["pg_config"] if isinstance(data.get("pg_config"), Mapping) else {}
    )
    raw_entries: list[Any] = data["entries"] if isinstance(data.get("entries"), list) else []
    entries = []
    for raw in raw_entries:
        if isinstance(raw, Mapping):
            status = statuses.get(str(raw.get("pg_id"))) if isinstance(statuses, Mapping) else None
            entries.append(_entry(raw, status if isinstance(status, Mapping) else {}))
    groups: dict[str, dict[str, Any]] = {}
    for key, value in config.items():
        name_ = str(value.get("name")) if isinstance(value, Mapping) and value.get("name") else key
        groups[name_ or "0"] = {
            "desc": str(value.get("desc") or "") if isinstance(value, Mapping) else "",
            "ranks": _ranks(value),
        }
    by_pg: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_pg.setdefault(entry["pg"], []).append(entry)
    for pg, items in by_pg.items():
        group = groups.setdefault(pg, {"desc": items[-1]["pg_desc"], "ranks": None})
        group["desc"] = group["desc"] or items[-1]["pg_desc"]
        pg_id = items[-1]["pg_id"]
        status = statuses.get(str(pg_id)) if pg_id is not None else None
        if isinstance(status, Mapping):
            group["status"] = {
                k: _int(status.get(f"last_{k}_collective"))
                for k in ("enqueued", "started", "completed")
            }
        collectives = [e for e in items if not e["p2p"] and e["seq"] is not None]
        group["entries"] = collectives[-KEEP_ENTRIES:]
        group["entered"] = max((e["seq"] for e in collectives), default=None)
    facts.update(
        version=str(data.get("version") or "?"),
        entries_total=len(entries),
        groups=groups,
    )
    return facts


# ---- fr_trace's report ---------------------------------------------------------------------

_REPORT_HEAD = re.compile(
    r"^(?:Collective (?P<a>\d+) at entry \d+ errors?"
    r"|Not all ranks joining collective(?:,? sequence number:)? (?P<b>\d+)"
    r"(?: at entry \d+)?"
    r"|Collective sequence number: (?P<c>\d+) has errors"
    r"|Input/output mismatch in the collective(?: sequence number:)? (?P<d>\d+)(?: at entry \d+)?)"
)
_REPORT_FIELD = re.compile(r"^(?P<key>[a-z][a-z ]{2,30}): (?P<value>.*)$")
_CULPRIT = re.compile(
    r"Culprit rank (?P<rank>\d{1,7}); Error type: (?P<type>[A-Z_]+)(?:, (?P<detail>.*?))?"
    r"(?=, Culprit rank \d+;|$)"
)
#: the analyser's error types that mean the ranks called the collective differently
DESYNC_ERRORS = frozenset(
    {"COLLECTIVE_TYPE_MISMATCH", "SIZE_OR_SYNTAX_MISMATCH", "COLLECTIVE_DTYPE_MISMATCH"}
)


def parse_report(name: str, text: str) -> list[dict[str, Any]]:
    """The collectives an `fr_trace` report names, each with its line, sequence number, group,
    op, sizes, state, the ranks missing from it and the culprits the analyser blames."""
    reports: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if m := _REPORT_HEAD.match(line):
            seq = next(
                int(g) for g in (m.group("a"), m.group("b"), m.group("c"), m.group("d")) if g
            )
            kind = "missing" if m.group("b") else "io-mismatch" if m.group("d") else "errors"
            current = {"source": name, "line": number, "text": line[:300], "seq": seq,
                       "kind": kind, "missing_ranks": [], "culprits": []}  # fmt: skip
            if len(reports) < MAX_REPORTS:
                reports.append(current)
            continue
        if current is None or not (m := _REPORT_FIELD.match(line)):
            continue
        key, value = m.group("key"), m.group("value").strip()
        if key == "group info":
            pg, _, desc = value.partition(":")
            current["pg"], current["pg_desc"] = pg.strip(), desc.strip()
        elif key == "collective":
            current["op"] = op_name(value)
        elif key in ("input sizes", "output sizes"):
            current[key.replace(" ", "_")] = value[:300]
        elif key == "missing ranks":
            current["missing_ranks"] = _ranks(value) or []
        elif key == "expected ranks":
            current["expected_ranks"] = len(_ranks(value) or [])
        elif key == "collective state":
            current["state"] = value[:40]
        elif key == "error msg":
            current["culprits"] = [
                {"rank": int(c.group("rank")), "error": c.group("type"),
                 "detail": (c.group("detail") or "")[:300]}
                for c in _CULPRIT.finditer(value)
            ][:100]  # fmt: skip
    return reports


def is_report(text: str) -> bool:
    """Whether a file of fr/ is fr_trace's report (its first lines name a collective)."""
    return any(_REPORT_HEAD.match(line.strip()) for line in text.splitlines()[:50])


@register("flight_recorder", "PyTorch flight recorder dumps (fr/*, JSON or base64 pickle)")
def flight_recorder_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    dumps = []
    analyses: list[dict[str, Any]] = []
    for name, result in sorted(files.items()):
        if name.startswith(PREFIX) and is_collected(result) and result.text().strip():
            text = result.text()
            if not text.lstrip().startswith("{") and is_report(text):
                analyses.extend(parse_report(name, text))
            else:
                dumps.append(parse_dump(name, text))
    return {
        "collected": bool(dumps or analyses),
        "dumps": dumps,
        "analyses": analyses[:MAX_REPORTS],
        "ranks": sorted({d["rank"] for d in dumps if d.get("rank") is not None}),
        "unreadable": [{"source": d["source"], "why": d["error"]} for d in dumps if "error" in d],
    }
