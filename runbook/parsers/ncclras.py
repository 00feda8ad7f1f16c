"""NCCL's RAS view of the job (`ncclras.txt`: the `ncclras` client, NCCL 2.24+): which ranks
of a communicator are missing, unresponsive or dead, and which launched fewer collectives.

Both outputs: the text report (``Job summary``, ``Communicators``, then ``Errors`` and
``Warnings`` sections: ``INCOMPLETE`` / ``Missing communicator data from 1 job process`` /
``Process 3487984 on node 172.16.64.213 managing GPU 5``, ``DEAD``, ``#0-0 (cf264af53edbe986)
INCOMPLETE`` / ``The missing rank: 21``, ``MISMATCH`` / ``26 ranks have launched up to
operation 6650`` / ``Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210``, the
listed ranks being the group of the count line above them, behind or ahead) and the
JSON one of 2.28.7+ (``ncclras -f json``: communicators with ``ranks`` and ``missing_ranks``).
Samples: NCCL's user guide, troubleshooting/ras. No client (exit 127) or no NCCL process
listening on the node is "not available", never a finding. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from runbook.parsers._common import clip
from runbook.parsers.registry import Files, register

FILE = "ncclras.txt"

_COMM = re.compile(r"^#(?P<group>\d+)-(?P<comm>\d+) \((?P<hash>[0-9a-fA-F]+)\) (?P<what>[A-Z]+)")
_SECTION = re.compile(r"^(?P<what>INCOMPLETE|DEAD|TIMEOUT|MISMATCH|ERROR)\s*$")
_PROCESS = re.compile(
    r"Process (?P<pid>\d+) on node (?P<node>\S+) managing GPUs? (?P<gpus>[\d, ]+)"
)
_MISSING = re.compile(r"The missing ranks?: (?P<ranks>[\d, -]+)")
_RANK = re.compile(
    r"Rank (?P<rank>\d+)(?: has launched up to operation (?P<op>\d+)| has not launched any "
    r"operations| has status (?P<status>\w+)| reported (?P<reported>[^-]+?))? -- "
    r"(?:GPU (?P<gpu>\S+) managed by process (?P<pid>\d+) on node (?P<node>\S+)|\[process)"
)
_LAUNCHED = re.compile(r"(?P<n>\d+) ranks? ha(?:ve|s) launched up to operation (?P<op>\d+)")
_VERSION = re.compile(r"^NCCL version (?P<v>[\d.]+)")


def _range(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            low, _, high = part.partition("-")
            if low.isdigit() and high.isdigit() and int(high) - int(low) < 100_000:
                out += list(range(int(low), int(high) + 1))
        elif part.isdigit():
            out.append(int(part))
    return out


def parse_text(text: str, source: str = FILE) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "missing_ranks": [],
        "dead_processes": [],
        "unresponsive_processes": [],
        "behind": [],
        "ahead": [],
        "problems": [],
    }
    section: str | None = None
    comm: dict[str, Any] | None = None
    counts: list[dict[str, Any]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if m := _VERSION.match(line):
            facts["nccl_version"] = m.group("v")
        if m := _COMM.match(line):
            comm = {"id": f"#{m.group('group')}-{m.group('comm')}", "hash": m.group("hash")}
            section = m.group("what")
            counts = []
            facts["problems"].append(
                {"source": source, "line": number, "text": clip(raw), "kind": section, **comm}
            )
            continue
        if m := _SECTION.match(line):
            section, comm = m.group("what"), None
            continue
        where = {"source": source, "line": number, "text": clip(raw)}
        if m := _MISSING.search(line):
            for rank in _range(m.group("ranks")):
                facts["missing_ranks"].append({**where, "rank": rank, **(comm or {})})
        elif m := _LAUNCHED.search(line):
            counts.append({"ranks": int(m.group("n")), "op": int(m.group("op"))})
        elif m := _RANK.search(line):
            record = {
                **where,
                "rank": int(m.group("rank")),
                "pid": int(m.group("pid")) if m.group("pid") else None,
                "node": m.group("node"),
                **(comm or {}),
            }
            if section == "MISMATCH" and (m.group("op") or len(counts) > 1):
                # a listed rank belongs to the count line printed just above it (RAS lists the
                # smaller group, which may be ahead of the others as well as behind them)
                launched = int(m.group("op")) if m.group("op") else counts[-1]["op"]
                record["launched"] = launched
                top = max([c["op"] for c in counts] + [launched])
                facts["behind" if launched < top else "ahead"].append(record)
        elif m := _PROCESS.search(line):
            record = {
                **where,
                "pid": int(m.group("pid")),
                "node": m.group("node"),
                "gpus": m.group("gpus").strip(),
            }
            if section == "DEAD":
                facts["dead_processes"].append(record)
            elif section == "INCOMPLETE":
                facts["unresponsive_processes"].append(record)
    facts["format"] = "text"
    return facts


def parse_json(text: str, source: str = FILE) -> dict[str, Any]:
    data = json.loads(text)
    facts: dict[str, Any] = {
        "missing_ranks": [],
        "dead_processes": [],
        "unresponsive_processes": [],
        "behind": [],
        "problems": [],
        "format": "json",
    }
    if not isinstance(data, Mapping):
        raise ValueError("not an ncclras JSON report")
    version = data.get("nccl_version")
    facts["nccl_version"] = version if isinstance(version, str) else None
    for comm in data.get("communicators") or []:
        if not isinstance(comm, Mapping):
            continue
        ident = {"hash": str(comm.get("hash") or "")}
        for missing in comm.get("missing_ranks") or []:
            if not isinstance(missing, Mapping):
                continue
            status: Mapping[str, Any] = (
                missing["status"] if isinstance(missing.get("status"), Mapping) else {}
            )
            record = {
                "source": source,
                "line": None,
                "text": f"missing rank {missing.get('rank')} on {missing.get('host')} "
                f"(pid {missing.get('pid')})",
                "rank": missing.get("rank"),
                "pid": missing.get("pid"),
                "node": missing.get("host"),
                "unresponsive": bool(status.get("unresponsive")),
                "dead": bool(status.get("considered_dead")),
                **ident,
            }
            facts["missing_ranks"].append(record)
            if record["dead"]:
                facts["dead_processes"].append(record)
        # the collective counts: a rank that launched fewer of an op than its peers is behind
        per_op: dict[str, dict[int, int]] = {}
        where: dict[int, Mapping[str, Any]] = {}
        for rank in comm.get("ranks") or []:
            if isinstance(rank, Mapping) and isinstance(rank.get("collective_counts"), Mapping):
                where[rank.get("rank")] = rank  # type: ignore[index]
                for op, count in rank["collective_counts"].items():
                    if isinstance(count, int):
                        per_op.setdefault(str(op), {})[rank.get("rank")] = count  # type: ignore[index]
        for op, by_rank in per_op.items():
            top = max(by_rank.values(), default=0)
            for rank_no, count in by_rank.items():
                if count < top:
                    info = where[rank_no]
                    facts["behind"].append(
                        {
                            "source": source,
                            "line": None,
                            "text": f"rank {rank_no} launched {count} {op}, its peers up to {top}",
                            "rank": rank_no,
                            "pid": info.get("pid"),
                            "node": info.get("host"),
                            "launched": count,
                            "op": op,
                            **ident,
                        }
                    )
    return facts


@register("ncclras", "NCCL RAS client output (ncclras.txt; text or -f json, NCCL 2.24+)")
def ncclras_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    result = files.get(FILE)
    if result is None or not result.collected:
        return {"collected": False, "available": False}
    text = result.text()
    if result.exited not in (0, None) or not text.strip():
        why = (result.stderr.strip().splitlines() or [f"exit {result.exited}"])[-1][:200]
        return {"collected": True, "available": False, "why": why}
    try:
        facts = parse_json(text) if text.lstrip().startswith("{") else parse_text(text)
    except (ValueError, RecursionError) as err:  # RecursionError: JSON nested too deep
        return {"collected": True, "available": False, "why": f"not ncclras output: {err}"}
    if "Job summary" not in text and facts["format"] == "text" and not facts["problems"]:
        return {"collected": True, "available": False, "why": clip(text.splitlines()[0])}
    return {"collected": True, "available": True, **facts}
