"""`nccl-tests` output (`nccl-tests/*.txt`, e.g. `all_reduce_perf -b 8M -e 1G -f 2 -g 8`).

Both tables: the modern one (`size count type redop root time algbw busbw #wrong` twice, for
out-of-place and in-place) and the old one (no `root`, an `error` float instead of `#wrong`);
the header line decides the columns, so other collectives' tables parse too. Footer:
`# Out of bounds values : N OK|FAILED`, `# Avg bus bandwidth    : X`; a run without the footer
did not finish. mpirun's `[1,0]<stdout>:` prefixes are stripped. NCCL INFO lines in the same
output are summarised with the nccl_log parser (which transport the test used).
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

    @property
    def passed(self) -> bool:
        return (
            self.finished
            and self.oob_ok is not False
            and self.wrong_total == 0
            and not self.failures
        )


_MPI = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.eE+-]+|nan|inf)")
_DEVICE = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+"
    r"(\d+)\s+\[[^\]]*\]\s+(.*)$"
)
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
                ranks.add(int(m.group(1)))
                if len(devices) < 1024:
                    devices.append(m.group(4).strip())
                continue
            if body.startswith("nThread") and not params:
                params = {k.strip(): v for k, v in _PARAMS.findall(body)}
            continue
        if _FAILURE.search(s) and "NCCL INFO" not in s:
            failures.append(Evidence(source=source, line=n, time=None, text=clip(raw)))
            continue
        tokens = s.split()
        if not cols or len(tokens) < 4 or not tokens[0].isdecimal():
            continue
        row = _row(cols, tokens, n)
        if row is not None:
            rows.append(row)
    wrongs = [w for r in rows for w in (r.oop_wrong, r.ip_wrong) if isinstance(w, int)]
    errors = [w for r in rows for w in (r.oop_wrong, r.ip_wrong) if isinstance(w, float)]
    busbws = [b for r in rows for b in (r.oop_busbw, r.ip_busbw) if b is not None]
    return NcclTestsFacts(
        table=table,
        rows=tuple(rows),
        finished=avg is not None,
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
    )


def _row(cols: list[str], tokens: list[str], line: int) -> PerfRow | None:
    """Map a data row onto the header: leading columns by name, then 4 + 4 measurements."""
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
    for run in runs.values():
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
    }
