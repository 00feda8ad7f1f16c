"""PyTorch's watchdog and desync-debug lines in the ranks' logs (`app/*.log`, `nccl/*.log`):
which collective each rank timed out in, and what it had enqueued and completed.

The eras read (behind any launcher prefix, `runbook.parsers.lines`):

    ≤ 2.0  [E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout:
           WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212
           milliseconds before timing out.
    2.1+   … WorkNCCL(SeqNum=80078, OpType=BROADCAST, NumelIn=5056, NumelOut=5056,
           Timeout(ms)=600000) ran for 600026 milliseconds before timing out.
    2.2-4  [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work:
           1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.
           [PG 3 Rank 4] Timeout at NCCL work: 9141, last enqueued NCCL work: 9141, last
           completed NCCL work: 9140.
    2.5+   [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work
           sequence id: 241 PG status: last enqueued work: 315, last completed work: 183
    desync report (TORCH_NCCL_DESYNC_DEBUG):  [7] finished collective #182, but didn't join
           collective #183 (count from 1); `#315 started ranks:` / `[0, 1, 2] started ALLREDUCE`
    ProcessGroupWrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL): Detected mismatch between
           collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(
           SequenceNumber=3, OpType=ALLREDUCE, TensorShape=[8], …), but Rank 1 is running …
    gloo   Timed out waiting 1800000ms for recv operation to complete

Every record keeps its file, line and time. These lines are consequences: the rank that
logged a timeout was waiting; the one to look at is usually the one that did not. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from runbook.parsers import lines as prefixes
from runbook.parsers._common import clip, context_ref, files_under, find_time, is_collected
from runbook.parsers.applog import rank_from_name
from runbook.parsers.registry import Files, register

SOURCES = ("app/", "nccl/")
#: records kept per kind (the first ones)
MAX_RECORDS = 2000

_WHO = re.compile(
    r"\[(?:PG ID (?P<pgid>\d+) PG GUID (?P<guid>[^\s(\]]+)(?:\((?P<desc>[^)\]]*)\))? |"
    r"PG (?P<pg>\d+)(?: \((?P<desc2>[^)\]]*)\))? )?Rank (?P<rank>\d{1,7})\]"
)
_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
    r"OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>-?\d+), NumelOut=(?P<nout>-?\d+))?"
    r"(?:, Timeout\(ms\)=(?P<timeout>\d+))?\) ran for (?P<ran>\d+) milliseconds"
)
_STATUS = re.compile(
    r"(?:detected by watchdog at work(?: sequence id)?|Timeout at NCCL work):? (?P<at>\d+)"
    r"(?:,| PG status:) last enqueued (?:NCCL )?work: (?P<enq>\d+), last completed "
    r"(?:NCCL )?work: (?P<done>\d+)"
)
_DUMP_SIGNAL = re.compile(
    r"Last enqueued NCCL work: (?P<enq>\d+), last completed NCCL work: (?P<done>\d+)"
)
_LAGGING = re.compile(
    r"\[(?P<ranks>[\d, ]+)\] (?P<what>finished collective #(?P<a>\d+), but didn't join "
    r"collective #(?P<b>\d+)|joined but didn't finish collective #(?P<c>\d+))"
)
_DESYNC_TIMEOUT = re.compile(r"- \[(?P<rank>\d+)\] Timeout at collective: (?P<op>\w+), #(?P<n>\d+)")
_STARTED_HEAD = re.compile(r"#(?P<n>\d+) (?P<what>started|finished) ranks:")
_STARTED = re.compile(r"^\s*\[(?P<ranks>[\d, ]+)\] (?P<what>started|finished) (?P<op>\w+)")
_FINGERPRINT = re.compile(
    r"Rank (?P<rank>\d+) is running collective: CollectiveFingerPrint\(SequenceNumber="
    r"(?P<seq>\d+), OpType=(?P<op>\w+)(?:, TensorShape=(?P<shape>\[[^\]]*\]))?"
)
_RANK_TAG = re.compile(r"\[rank(\d{1,7})\]:")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<what>recv|send) operation")


def _ranks(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)][:100_000]


def _int(text: str | None) -> int | None:
    return int(text) if text else None


def parse_lines(name: str, text: Iterable[str], context: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Every watchdog/desync record of one file, and the last timed line of each rank."""
    ref = context_ref(context)
    found: dict[str, list[Any]] = {
        "timeouts": [],
        "statuses": [],
        "lagging": [],
        "desync_states": [],
        "mismatches": [],
        "gloo_timeouts": [],
        "last_seen": [],
    }
    file_rank = rank_from_name(name)
    last: dict[Any, dict[str, Any]] = {}
    state_head: int | None = None
    for number, raw in enumerate(text, 1):
        stripped = prefixes.strip(raw)
        line = stripped.text
        time = stripped.time or find_time(raw, ref)
        who = _WHO.search(line)
        rank = (
            int(who.group("rank"))
            if who
            else (stripped.rank if stripped.rank is not None else file_rank)
        )
        if rank is None and (tag := _RANK_TAG.search(raw[:120])):
            rank = int(tag.group(1))  # `[80746] [rank0]:` — a pid before torchrun's tag
        pg = None
        if who:
            pg = who.group("pgid") or who.group("pg")
        base = {"source": name, "line": number, "time": time, "text": clip(raw), "rank": rank}
        if pg is not None:
            base["pg"] = pg
        if time and (rank is not None or file_rank is not None):
            last[rank] = base
        if m := _TIMEOUT.search(line):
            _keep(found["timeouts"], {
                **base,
                "seq": int(m.group("seq")),
                "op": m.group("op").lower().lstrip("_"),
                "numel_in": _int(m.group("nin")),
                "numel_out": _int(m.group("nout")),
                "timeout_ms": _int(m.group("timeout")),
                "ran_ms": int(m.group("ran")),
            })  # fmt: skip
        elif m := _STATUS.search(line):
            _keep(found["statuses"], {
                **base, "at": int(m.group("at")), "enqueued": int(m.group("enq")),
                "completed": int(m.group("done")),
            })  # fmt: skip
        elif m := _DUMP_SIGNAL.search(line):
            _keep(found["statuses"], {
                **base, "at": None, "enqueued": int(m.group("enq")),
                "completed": int(m.group("done")),
            })  # fmt: skip
        elif m := _LAGGING.search(line):
            if m.group("a"):
                entry = {"finished": int(m.group("a")), "missing": int(m.group("b"))}
            else:
                entry = {"unfinished": int(m.group("c"))}
            _keep(found["lagging"], {**base, "ranks": _ranks(m.group("ranks")), **entry})
        elif m := _DESYNC_TIMEOUT.search(line):
            _keep(found["desync_states"], {
                **base, "ranks": [int(m.group("rank"))], "state": "timeout",
                "op": m.group("op").lower().lstrip("_"), "collective": int(m.group("n")),
            })  # fmt: skip
        elif m := _STARTED_HEAD.search(line):
            state_head = int(m.group("n"))
            continue
        elif (m := _STARTED.match(line)) and state_head is not None:
            _keep(found["desync_states"], {
                **base, "ranks": _ranks(m.group("ranks")), "state": m.group("what"),
                "op": m.group("op").lower().lstrip("_"), "collective": state_head,
            })  # fmt: skip
            continue
        elif "CollectiveFingerPrint(" in line:
            prints = [
                {"rank": int(f.group("rank")), "seq": int(f.group("seq")),
                 "op": f.group("op").lower().lstrip("_"), "shape": f.group("shape")}
                for f in _FINGERPRINT.finditer(line)
            ]  # fmt: skip
            if prints:
                _keep(found["mismatches"], {**base, "ranks": prints})
        elif m := _GLOO_TIMEOUT.search(line):
            _keep(found["gloo_timeouts"], {**base, "timeout_ms": int(m.group("ms"))})
        if not line.startswith((" ", "\t")):
            state_head = None
    found["last_seen"] = [v for _, v in sorted(last.items(), key=lambda kv: str(kv[0]))]
    return found


def _keep(records: list[Any], record: dict[str, Any]) -> None:
    if len(records) < MAX_RECORDS:
        records.append(record)


@register("watchdog", "PyTorch watchdog timeouts, PG status and desync-debug lines per rank")
def watchdog_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, list[Any]] = {}
    read = False
    for prefix in SOURCES:
        for name, result in files_under(files, prefix):
            if not is_collected(result):
                continue
            read = True
            for key, records in parse_lines(name, result.lines(), context).items():
                merged.setdefault(key, []).extend(records)
    facts: dict[str, Any] = {"collected": read, **merged}
    timeouts = merged.get("timeouts") or []
    facts["timed_out_ranks"] = sorted({t["rank"] for t in timeouts if t["rank"] is not None})
    return facts
