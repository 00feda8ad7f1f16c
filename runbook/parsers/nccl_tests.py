"""`nccl-tests` output (`nccl-tests/*.txt`, e.g. `all_reduce_perf -b 8M -e 1G -f 2 -g 8`).

Both tables: the modern one (`size count type redop root time algbw busbw #wrong` twice, for
out-of-place and in-place) and the old one (no `root`, an `error` float instead of `#wrong`);
the header line decides the columns, so other collectives' tables parse too. Footer:
`# Out of bounds values : N OK|FAILED`, `# Avg bus bandwidth    : X`, printed once every size
ran; a run without the footer did not finish (one whose copy ends at the first footer line
did). mpirun's `[1,0]<stdout>:` prefixes are stripped. NCCL INFO lines in the same output
are summarised with the nccl_log parser (which transport the test used).

A run can finish, pass and still measure nothing about the fabric: nccl-tests built without
`MPI=1` and started by mpirun/srun runs one independent copy per process, each with a
communicator of its own GPUs only (`unmeasured` says why):

- the device list names the same rank for several processes (`# Rank 0 … Pid 1320 on a` and
  `# Rank 0 … Pid 2066 on b` before any result is printed);
- NCCL's own lines show the same rank of a communicator on two hosts (`a … comm 0x… rank 0
  nranks 2`, `b … comm 0x… rank 0 nranks 2`): one node-local communicator per host;
- every row's bus bandwidth is 0.00 while data moved (algbw > 0): busbw = algbw × 2(n−1)/n
  is zero only for a one-rank communicator (`nranks 1`).

A table whose header was not captured is read by its width (13 columns: the modern layout
with `root`, 12: the old one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runbook.parsers._common import (
    Evidence,
    clip,
    files_under,
    is_collected,
    to_jsonable,
)
from runbook.parsers.nccl_log import merge, parse_nccl_log
from runbook.parsers.registry import Files, register

PREFIX = "nccl-tests/"


@dataclass(frozen=True)
class PerfRow:
    size: int
    count: int
    type: str
    redop: str | None
    root: int | None
    oop_time_us: float | None
    oop_algbw: float | None
    oop_busbw: float | None
    #: `#wrong` (an int) or, in old tables, the max `error` (a float)
    oop_wrong: float | int | None
    ip_time_us: float | None
    ip_algbw: float | None
    ip_busbw: float | None
    ip_wrong: float | int | None
    line: int


@dataclass(frozen=True)
class NcclTestsFacts:
    table: str | None
    rows: tuple[PerfRow, ...]
    finished: bool
    oob_values: int | None
    oob_ok: bool | None
    avg_busbw: float | None
    peak_busbw: float | None
    wrong_total: int
    max_error: float | None
    nranks: int | None
    devices: tuple[str, ...]
    params: dict[str, str] = field(default_factory=dict)
    failures: tuple[Evidence, ...] = ()
    lines: int = 0
    #: why the run measured nothing about the fabric (each process its own communicator, a
    #: one-rank communicator), or None; and the line that shows it
    unmeasured: str | None = None
    unmeasured_line: int | None = None

    @property
    def passed(self) -> bool:
        return (
            self.finished
            and self.oob_ok is not False
            and self.wrong_total == 0
            and not self.failures
            and self.unmeasured is None
        )


_MPI = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.eE+-]+|nan|inf)")
_DEVICE = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+"
    r"(\d+)\s+\[[^\]]*\]\s+(.*)$"
)
#: NCCL's communicator line: `host:pid:tid [dev] NCCL INFO [ncclCommInitRank ]comm 0x… rank R
#: nranks N …` (init and destroy alike)
_COMM = re.compile(
    r"^(?P<host>[^\s:]+):\d+:\d+ \[\d+\] NCCL INFO (?:\w+ )?comm 0x[0-9a-fA-F]+ "
    r"rank (?P<rank>\d+) nranks (?P<n>\d+)\b"
)
#: the columns of a table whose header was not captured, by the number of fields of a row
_LAYOUT = {
    13: "size count type redop root time algbw busbw wrong time algbw busbw wrong".split(),
    12: "size count type redop time algbw busbw error time algbw busbw error".split(),
}
_PARAMS = re.compile(r"(\w[\w ]*?):?\s+(\S+)")
_FAILURE = re.compile(r"Test (?:NCCL |CUDA )?failure|Test failure|NCCL failure|CUDA failure")


def _float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _wrong(s: str) -> float | int | None:
    if re.fullmatch(r"\d+", s):
        return int(s)
    return _float(s)


def parse_nccl_tests(lines: Iterable[str], *, source: str = "nccl-tests/run.txt") -> NcclTestsFacts:
    cols: list[str] = []
    table: str | None = None
    rows: list[PerfRow] = []
    oob: int | None = None
    oob_ok: bool | None = None
    avg: float | None = None
    ranks: set[int] = set()
    devices: list[str] = []
    params: dict[str, str] = {}
    failures: list[Evidence] = []
    #: rank -> {(host, pid): first line} from the device lists printed before any result
    owners: dict[int, dict[tuple[str, str], int]] = {}
    #: (rank, nranks) -> {host: first line} from NCCL's communicator lines
    comms: dict[tuple[int, int], dict[str, int]] = {}
    n = 0
    for n, raw in enumerate(lines, 1):
        line = _MPI.sub("", raw).rstrip()
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            body = s.lstrip("#").strip()
            if body.startswith("size") and "count" in body:
                cols = body.replace("#wrong", "wrong").split()
                table = "modern" if "wrong" in cols else "old"
                continue
            m = _OOB.match(s)
            if m:
                oob, oob_ok = int(m.group(1)), m.group(2) == "OK"
                continue
            m = _AVG.match(s)
            if m:
                avg = _float(m.group(1))
                continue
            m = _DEVICE.match(s)
            if m:
                rank, owner = int(m.group(1)), (m.group(3), m.group(2))
                ranks.add(rank)
                if avg is None and not rows:
                    owners.setdefault(rank, {}).setdefault(owner, n)
                if len(devices) < 1024:
                    devices.append(m.group(5).strip())
                continue
            if body.startswith("nThread") and not params:
                params = {k.strip(): v for k, v in _PARAMS.findall(body)}
            continue
        if _FAILURE.search(s) and "NCCL INFO" not in s:
            failures.append(Evidence(source=source, line=n, time=None, text=clip(raw)))
            continue
        m = _COMM.match(s)
        if m:
            comms.setdefault((int(m.group("rank")), int(m.group("n"))), {}).setdefault(
                m.group("host"), n
            )
            continue
        tokens = s.split()
        if len(tokens) < 4 or not tokens[0].isdecimal():
            continue
        row = _row(cols or _LAYOUT.get(len(tokens), []), tokens, n)
        if row is not None:
            rows.append(row)
    wrongs = [w for r in rows for w in (r.oop_wrong, r.ip_wrong) if isinstance(w, int)]
    errors = [w for r in rows for w in (r.oop_wrong, r.ip_wrong) if isinstance(w, float)]
    busbws = [b for r in rows for b in (r.oop_busbw, r.ip_busbw) if b is not None]
    unmeasured, unmeasured_line = _unmeasured(owners, comms, rows)
    return NcclTestsFacts(
        table=table,
        rows=tuple(rows),
        # the footer (out-of-bounds count, then the average) is printed once every size ran
        finished=avg is not None or oob is not None,
        oob_values=oob,
        oob_ok=oob_ok,
        avg_busbw=avg,
        peak_busbw=max(busbws) if busbws else None,
        wrong_total=sum(wrongs),
        max_error=max(errors) if errors else None,
        nranks=len(ranks) or None,
        devices=tuple(devices),
        params=params,
        failures=tuple(failures),
        lines=n,
        unmeasured=unmeasured,
        unmeasured_line=unmeasured_line,
    )


def _unmeasured(
    owners: Mapping[int, Mapping[tuple[str, str], int]],
    comms: Mapping[tuple[int, int], Mapping[str, int]],
    rows: list[PerfRow],
) -> tuple[str | None, int | None]:
    """Why the run measured nothing about the fabric, and the line that shows it (see the
    module docstring), or (None, None)."""
    for rank, seen in sorted(owners.items()):
        if len(seen) > 1:
            who = ", ".join(f"pid {pid} on {host}" for host, pid in seen)
            return (
                f"rank {rank} is listed by {len(seen)} processes ({who}): each process ran its "
                "own communicator (nccl-tests built without MPI=1)",
                sorted(seen.values())[1],
            )
    for (rank, nranks), hosts in sorted(comms.items()):
        if len(hosts) > 1:
            return (
                f"rank {rank} of a {nranks}-rank communicator is on {len(hosts)} hosts "
                f"({', '.join(hosts)}): each host ran a communicator of its own GPUs, the "
                "network between them was never used (nccl-tests built without MPI=1)",
                sorted(hosts.values())[1],
            )
    moved = any((r.oop_algbw or 0) >= 0.01 or (r.ip_algbw or 0) >= 0.01 for r in rows)
    if moved and all(not r.oop_busbw and not r.ip_busbw for r in rows):
        return (
            f"bus bandwidth is 0.00 on all {len(rows)} rows while data moved: a one-rank "
            "communicator (nranks 1) on every process, nothing crossed a link "
            "(nccl-tests built without MPI=1)",
            rows[0].line,
        )
    return None, None


def _row(cols: list[str], tokens: list[str], line: int) -> PerfRow | None:
    """Map a data row onto the header: leading columns by name, then 4 + 4 measurements."""
    if not cols:
        return None
    lead = cols[: cols.index("time")] if "time" in cols else cols[:3]
    if len(tokens) < len(lead) + 4:
        return None
    head = dict(zip(lead, tokens[: len(lead)], strict=False))
    rest = tokens[len(lead) :]
    try:
        size, count = int(head.get("size", "")), int(head.get("count", ""))
    except ValueError:
        return None
    vals = (rest + ["N/A"] * 8)[:8]
    root = head.get("root")
    return PerfRow(
        size=size,
        count=count,
        type=head.get("type", ""),
        redop=head.get("redop"),
        root=int(root) if root is not None and re.fullmatch(r"-?\d+", root) else None,
        oop_time_us=_float(vals[0]),
        oop_algbw=_float(vals[1]),
        oop_busbw=_float(vals[2]),
        oop_wrong=_wrong(vals[3]),
        ip_time_us=_float(vals[4]),
        ip_algbw=_float(vals[5]),
        ip_busbw=_float(vals[6]),
        ip_wrong=_wrong(vals[7]),
        line=line,
    )


@register("nccl_tests", "nccl-tests/*.txt: rows, #wrong, bus bandwidth, finished, transports")
def nccl_tests_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    for name, res in files_under(files, PREFIX):
        if not is_collected(res):
            continue
        facts = parse_nccl_tests(res.lines(), source=name)
        nccl = merge([parse_nccl_log(res.lines(), source=name)])
        key = name[len(PREFIX) :].rsplit(".", 1)[0]
        runs[key] = {
            "source": name,
            "rc": res.exited,
            **to_jsonable(facts),
            "passed": facts.passed and res.exited in (0, None),
            "nccl": {
                k: nccl[k]
                for k in (
                    "version",
                    "network",
                    "transports",
                    "transport_kinds",
                    "ib_disabled",
                    "warn_categories",
                )
            },
        }
    evidence: list[dict[str, Any]] = []
    unmeasured = [
        {"source": run["source"], "line": run["unmeasured_line"] or 1, "time": None,
         "text": clip(f"the benchmark measured nothing about the fabric: {run['unmeasured']}")}
        for run in runs.values()
        if run.get("unmeasured")
    ]  # fmt: skip
    for run in runs.values():
        if run.get("unmeasured"):
            continue
        if not run["passed"]:
            evidence.extend(run.get("failures") or [])
            if not run.get("failures"):
                # a run that stopped or failed without a failure line: where its output ends
                evidence.append(
                    {"source": run["source"], "line": max(1, run.get("lines") or 1), "time": None,
                     "text": "the run's output ends here"}
                )  # fmt: skip
    return {
        "collected": bool(runs),
        "runs": runs,
        "all_passed": bool(runs) and all(r["passed"] for r in runs.values()),
        "wrong_total": sum(r["wrong_total"] for r in runs.values()),
        "evidence": evidence[:20],
        "unmeasured": unmeasured[:20],
    }
