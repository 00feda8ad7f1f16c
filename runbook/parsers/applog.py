"""Training application logs (`app/*.log`, one per rank where possible): per rank, the earliest
error and the last one, classified, so the runbook can tell the rank that failed *first* from
the ranks that only reported the consequence (`ncclCommInitRank failed: unhandled cuda error`).

The rank comes from the file name (`rank-3.log`, `rank3.log`, `worker-3.log`) or from a line
prefix (`[rank3]:`, torchrun's `[default3]:`, mpirun's `[1,3]<stderr>:`).

Error classes: ``nccl-init`` (communicator init / NCCL error surfaced by the framework),
``peer-connection`` (a peer went away), ``store-timeout`` (rendezvous store timed out),
``collective-timeout`` (a collective hung past the watchdog), ``cuda-oom`` (GPU memory),
``host-oom`` (host memory: MemoryError, bad_alloc), ``killed`` (the process died of SIGKILL,
which is what a cgroup OOM kill looks like from the launcher), ``shm``, ``socket``,
``cuda`` (another CUDA error), ``application-exception`` (a plain exception of the program).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runbook.parsers._common import (
    Evidence,
    TimeRef,
    clip,
    context_ref,
    files_under,
    find_time,
    is_collected,
    to_jsonable,
)
from runbook.parsers.registry import Files, register

PREFIX = "app/"


@dataclass(frozen=True, kw_only=True)
class AppError(Evidence):
    rank: int | None
    category: str
    #: the exception type (`UnknownError`, `DistStoreError`) when the line names one
    exception: str | None = None
    #: `time` came from an earlier line of the log (a traceback line carries none)
    time_inferred: bool = False


@dataclass(frozen=True)
class RankLog:
    rank: int | None
    source: str
    lines: int
    first_error: AppError | None
    last_error: AppError | None
    error_count: int
    categories: dict[str, int] = field(default_factory=dict)
    #: NCCL had started (an `NCCL INFO` line) before the first error
    nccl_started_before_error: bool = False
    first_time: str | None = None
    last_time: str | None = None
    #: the process id the rank logged of itself (`pid 4711`, `(pid=4711)`), if it did: ties
    #: an OOM kill's `Killed process PID` to the rank (host PIDs; a container's differ)
    pid: int | None = None


_PID = re.compile(r"\bpid[\s=:]+(\d{1,9})\b", re.IGNORECASE)


@dataclass(frozen=True)
class AppLogFacts:
    ranks: tuple[RankLog, ...]
    #: the rank whose first error is the earliest in time (None without times)
    first_failed_rank: int | None
    first_error: AppError | None
    #: the error the job finally reported: the latest last-error
    surfaced: AppError | None
    #: ranks whose log has no error at all (a rank killed outright often logs nothing)
    silent_ranks: tuple[int, ...] = ()


# Ordered: the first matching pattern classifies the line.
_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        (
            "cuda-oom",
            r"CUDA out of memory|OutOfMemoryError|Cuda failure '?out of memory|"
            r"CUDA_ERROR_OUT_OF_MEMORY|CUDA error: out of memory|Failed to CUDA calloc|"
            r"ResourceExhaustedError|OOM when allocating tensor",
        ),
        (
            "shm",
            r"/dev/shm|posix_fallocate|shared memory segment|insufficient shared memory|"
            r"bus error",
        ),
        (
            # c10d's client could not reach the store's address at all: a socket failure,
            # before the store-timeout words below catch it
            "socket",
            r"TCP client failed to connect|failed to connect/validate to host|"
            r"client socket has timed out after \d+ ?ms while trying to connect",
        ),
        (
            "store-timeout",
            r"DistStoreError|waiting for clients|TCPStore|store.*timed? ?out|"
            r"Socket Timeout|rendezvous.*time",
        ),
        (
            "collective-timeout",
            r"Watchdog caught collective operation timeout|"
            r"collective operation timeout|NCCL.*timed? ?out",
        ),
        (
            "peer-connection",
            r"DistNetworkError|Connection reset by peer|Connection closed by peer|"
            r"Failed to recv|remote process exited|ncclRemoteError|"
            r"Broken pipe|peer.*(?:closed|exited|disconnect)",
        ),
        (
            "nccl-init",
            r"ncclCommInitRank|ncclUnhandledCudaError|ncclInternalError|"
            r"ncclSystemError|ncclInvalidUsage|NCCL error|NCCL WARN|"
            r"unhandled (?:cuda|system) error|ProcessGroupNCCL",
        ),
        (
            "socket",
            r"Connection refused|Connection timed out|Address already in use|"
            r"No route to host|Network is unreachable|gloo.*connect",
        ),
        (
            "killed",
            r"SIGKILL|signal 9\b|Signals\.SIGKILL|exitcode\s*:\s*-9\b|^Killed$|"
            r"exit code 137|exited with code 137",
        ),
        ("host-oom", r"\bMemoryError\b|std::bad_alloc|Cannot allocate memory"),
        ("cuda", r"CUDA error|CUDA_ERROR|cudaError|Cuda failure|CUDA driver"),
    )
)

_EXC = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?(?P<name>[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)|"
    r"KeyboardInterrupt|StopIteration)(?::|$)"
)
_TRACEBACK = "Traceback (most recent call last):"
_PREFIXES = (
    re.compile(r"^\[rank(?P<r>\d+)\]:\s?"),
    re.compile(r"^\[default(?P<r>\d+)\]:\s?"),
    re.compile(r"^\[\d+,(?P<r>\d+)\]<(?:stdout|stderr)>:\s?"),
    re.compile(r"^(?P<r>\d+): "),
)
_FILE_RANK = re.compile(r"(?:rank|worker|proc|process|local_rank)[-_.]?(\d+)", re.IGNORECASE)
_ERRORISH = re.compile(
    r"(?:^|[\s\]])(?:E\d{4} |\[E\d{4} |ERROR\b|FATAL\b|CRITICAL\b|: E |\bF\d{4} )|"
    r"\berror\b|\bfailed\b|\bfailure\b",
    re.IGNORECASE,
)
#: INFO/DEBUG levels of the logging module, glog (`I0304 …`), TensorFlow (`…: I tensorflow/`)
_INFO_LEVEL = re.compile(
    r"(?:^|[\s\[|:])(?:INFO|DEBUG|TRACE)(?:[\s\]|:-]|$)"
    r"|^\[?[ID]\d{4} "
    r"|\.\d+: [ID] \S+\.(?:cc|py|h)\b"
)
_NOT_ERROR = re.compile(r"NCCL INFO|\bno error\b|error_count=0|errors?: 0\b", re.IGNORECASE)


def rank_from_name(name: str) -> int | None:
    m = _FILE_RANK.search(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def classify(message: str) -> str | None:
    """The error class of a line, or None when the line is not an error. A line logged at
    INFO or DEBUG level is not an error whatever words it holds (`INFO writing to /dev/shm`)."""
    if _NOT_ERROR.search(message) and "NCCL WARN" not in message:
        return None
    if _INFO_LEVEL.search(message):
        return None
    for name, pattern in _CLASSES:
        if pattern.search(message):
            return name
    if _EXC.match(message.strip()) or _ERRORISH.search(message):
        return "application-exception"
    return None


class _Rank:
    def __init__(self, rank: int | None) -> None:
        self.rank = rank
        self.first: AppError | None = None
        self.last: AppError | None = None
        self.count = 0
        self.cats: dict[str, int] = {}
        self.nccl_seen = False
        self.nccl_before = False
        self.first_time: str | None = None
        self.last_time: str | None = None
        self.pid: int | None = None
        self.in_traceback = False
        self.lines = 0

    def add(self, err: AppError) -> None:
        if self.first is None:
            self.first = err
            self.nccl_before = self.nccl_seen
        elif (
            self.first.category == "application-exception"
            and err.category not in ("application-exception",)
            and err.line == self.first.line + 1
            and self.first.exception is None
        ):
            # "ERROR: ..." then the specific line right after: keep the specific class
            self.first = err
        self.last = err
        self.count += 1
        self.cats[err.category] = self.cats.get(err.category, 0) + 1


def parse_applog(
    lines: Iterable[str],
    *,
    source: str,
    rank: int | None = None,
    collected_at: str | None = None,
) -> tuple[RankLog, ...]:
    """One log file: a RankLog per rank seen in it (the file's rank, or per line prefix)."""
    ref = TimeRef(collected_at)
    ranks: dict[int | None, _Rank] = {}
    last_time: str | None = None
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip()
        r = rank
        for pat in _PREFIXES:
            m = pat.match(line)
            if m:
                r = int(m.group("r"))
                line = line[m.end() :]
                break
        state = ranks.get(r)
        if state is None:
            state = ranks[r] = _Rank(r)
        state.lines += 1
        stripped = line.strip()
        if not stripped:
            continue
        t = find_time(line, ref)
        if t is not None:
            last_time = t
            state.last_time = t
            if state.first_time is None:
                state.first_time = t
        if state.pid is None and "pid" in line.lower():
            pm = _PID.search(line)
            if pm:
                state.pid = int(pm.group(1))
        if "NCCL INFO" in line:
            state.nccl_seen = True
            continue
        if (
            stripped.startswith(_TRACEBACK)
            or stripped.startswith("During handling of")
            or stripped.startswith("The above exception was the direct cause")
        ):
            state.in_traceback = True
            continue
        if state.in_traceback:
            if raw[:1].isspace() or stripped.startswith("File ") or stripped.startswith("^"):
                continue  # a frame or the source line of one
            state.in_traceback = False
        cat = classify(line)
        if cat is None:
            continue
        em = _EXC.match(stripped)
        state.add(
            AppError(
                source=source,
                line=n,
                time=t if t is not None else last_time,
                text=clip(raw),
                rank=r,
                category=cat,
                exception=em.group("name") if em else _inline_exc(stripped),
                time_inferred=t is None and last_time is not None,
            )
        )
    return tuple(
        RankLog(
            rank=s.rank,
            source=source,
            lines=s.lines,
            first_error=s.first,
            last_error=s.last,
            error_count=s.count,
            categories=s.cats,
            nccl_started_before_error=s.nccl_before,
            first_time=s.first_time,
            last_time=s.last_time,
            pid=s.pid,
        )
        for s in ranks.values()
        if s.lines
    )


_INLINE_EXC = re.compile(r"\b(?:[a-z_][\w]*\.)*([A-Z]\w*(?:Error|Exception)): ")


def _inline_exc(text: str) -> str | None:
    m = _INLINE_EXC.search(text)
    return m.group(1) if m else None


def _first_key(r: RankLog) -> tuple[str, str, int]:
    # an inferred time is "not later than": ties are broken by position in the file
    e = r.first_error
    return (e.time or "", e.source, e.line) if e else ("", "", 0)


def summarise(ranks: Iterable[RankLog]) -> AppLogFacts:
    all_ranks = tuple(sorted(ranks, key=lambda r: (r.rank is None, r.rank or 0, r.source)))
    timed = [r for r in all_ranks if r.first_error and r.first_error.time]
    # launcher lines (no rank) only count when no rank logged a timed error
    ranked = [r for r in timed if r.rank is not None] or timed
    first_rank: RankLog | None = None
    if ranked:
        first_rank = min(ranked, key=_first_key)
    surfaced: AppError | None = None
    lasts = [r.last_error for r in all_ranks if r.last_error is not None]
    if lasts:
        with_time = [e for e in lasts if e.time]
        surfaced = max(with_time, key=lambda e: e.time or "") if with_time else lasts[0]
    silent = tuple(r.rank for r in all_ranks if r.first_error is None and r.rank is not None)
    return AppLogFacts(
        ranks=all_ranks,
        first_failed_rank=first_rank.rank if first_rank else None,
        first_error=first_rank.first_error if first_rank else None,
        surfaced=surfaced,
        silent_ranks=silent,
    )


@register("applog", "app/*.log: per-rank first and last error, classified; the first rank")
def applog_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    logs = [(k, v) for k, v in files_under(files, PREFIX) if is_collected(v)]
    if not logs:
        return {"collected": False}
    raw = context.get("collected_at")
    collected_at = raw if isinstance(raw, str) and context_ref(context).year else None
    ranks: list[RankLog] = []
    for name, res in logs:
        ranks.extend(
            parse_applog(
                res.lines(), source=name, rank=rank_from_name(name), collected_at=collected_at
            )
        )
    facts = summarise(ranks)
    out: dict[str, Any] = to_jsonable(facts)
    out["collected"] = True
    out["errors_by_category"] = _merge(r.categories for r in facts.ranks)
    return out


def _merge(dicts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out
