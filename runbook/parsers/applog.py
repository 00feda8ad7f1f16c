"""Training application logs (`app/*.log`, one per rank where possible) and NCCL's own files
(`nccl/*.log`): every error line wherever it sits, classified by the signature catalog
(`runbook/data/signatures.yaml`), so the runbook can tell the rank that failed *first* — and
why — from the ranks that only reported the consequence (`ncclCommInitRank failed: unhandled
cuda error`).

Lines are read behind any stack of launcher prefixes (`runbook.parsers.lines`); the rank comes
from a prefix (`[rank3]:`, `[default3]:`, `[1,3]<stderr>:`, `3: `) or from the file name
(`rank-3.log`), never from a host or pod name. Untimed lines are kept (their time is None, or
the time of an earlier line of the file, marked `time_inferred`): the causal ranking
(`runbook.causal`) orders them by role.

Each error carries its `signature`, `role` and `cause` from the catalog and a legacy
`category` (``nccl-init``, ``peer-connection``, ``store-timeout``, ``collective-timeout``,
``cuda-oom``, ``host-oom``, ``killed``, ``shm``, ``socket``, ``ib``, ``p2p``, ``gpu-hardware``,
``launcher``, ``cuda``, ``application-exception``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from runbook import signatures
from runbook.causal import causal_order
from runbook.parsers import lines as prefixes
from runbook.parsers._common import (
    Evidence,
    TimeRef,
    clip,
    context_ref,
    files_under,
    find_time,
    is_collected,
    parse_syslog_prefix,
    to_jsonable,
)
from runbook.parsers.registry import Files, register

PREFIXES = ("app/", "nccl/", "nccl-tests/")
#: each cause keeps at most this many records in `by_cause` (the first ones in causal order)
BY_CAUSE_MAX = 20
#: records kept per file for ranking (the first ones; totals are still counted)
RECORDS_MAX = 2000

#: signature id -> the legacy error class rules and reports used before the catalog
CATEGORY = {
    "slurm-cgroup-oom": "host-oom",
    "host-alloc-failed": "host-oom",
    "cuda-uncorrectable-ecc": "gpu-hardware",
    "cuda-gpu-lost": "gpu-hardware",
    "nccl-ib-verbs-failure": "ib",
    "cuda-oom": "cuda-oom",
    "shm-exhausted": "shm",
    "p2p-unsupported": "p2p",
    "socket-no-interface": "socket",
    "socket-connect-failed": "socket",
    "peer-closed": "peer-connection",
    "store-timeout": "store-timeout",
    "collective-timeout": "collective-timeout",
    "rank-killed": "killed",
    "launcher-failed": "launcher",
    "nccl-surfaced": "nccl-init",
    "nccl-warn": "nccl-init",
    "cuda-error": "cuda",
    "python-exception": "application-exception",
    "generic-error": "application-exception",
}
#: roles that make a line an error of the job (context and benign lines are not)
ERROR_ROLES = ("cause", "local-error", "peer-consequence", "surfaced")


@dataclass(frozen=True, kw_only=True)
class AppError(Evidence):
    rank: int | None
    category: str
    #: the catalog entry, its role and the root cause it implies (None: no cause by itself)
    signature: str = "generic-error"
    role: str = "local-error"
    cause: str | None = None
    #: the exception type (`UnknownError`, `DistStoreError`) when the line names one
    exception: str | None = None
    #: `time` came from an earlier line of the log (a traceback line carries none)
    time_inferred: bool = False
    #: who logged it, for findings: `rank 3`, `pid 4711 on host-3`, `app/train.log`
    who: str = ""
    host: str | None = None
    pid: int | None = None


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
    #: every error of this rank in this file, in line order (at most RECORDS_MAX)
    errors: tuple[AppError, ...] = ()
    #: context lines (e.g. `NET/IB : No device found`): reported, not errors
    context: tuple[AppError, ...] = ()
    pids: tuple[int, ...] = ()
    #: lines of this file that could not be read (a parser bug on hostile input): counted and
    #: skipped so the rest of the file is still read
    unreadable_lines: int = 0


_PID = re.compile(r"\bpid[\s=:]+(\d{1,9})\b", re.IGNORECASE)
#: pids a log names: `pid 4711`, `(pid=4711)`, `subprocess 4711`, NCCL's `host:4711:4790 [0]`
_ANY_PID = re.compile(
    r"\b(?:pid[\s=:]+|[Ss]ubprocess |PID )(\d{1,9})\b|^[\w.-]{1,253}:(\d{1,9}):\d{1,9} \["
)
#: at most this many distinct pids are kept
PIDS_MAX = 2000


@dataclass(frozen=True)
class AppLogFacts:
    ranks: tuple[RankLog, ...]
    #: the rank of the first error in causal order
    first_failed_rank: int | None
    #: the first error in causal order (timed: earliest; untimed: by role, then file and line)
    first_error: AppError | None
    #: the error the job finally reported: the latest surfaced error
    surfaced: AppError | None
    #: ranks whose log has no error at all (a rank killed outright often logs nothing)
    silent_ranks: tuple[int, ...] = ()
    #: root cause -> its errors, in causal order (at most BY_CAUSE_MAX each)
    by_cause: dict[str, tuple[AppError, ...]] = field(default_factory=dict)
    #: the launcher said a rank was SIGKILLed (exit -9/137): what a cgroup OOM kill looks like
    killed: tuple[AppError, ...] = ()
    #: the first error of a rank that lost a peer (no cause of its own), in causal order
    peer_consequences: tuple[AppError, ...] = ()
    context: tuple[AppError, ...] = ()
    #: every pid the logs name (ties a kernel OOM kill's `Killed process PID` to the job)
    pids: tuple[int, ...] = ()


_EXC = re.compile(
    r"^(?:[A-Za-z_][\w.]{0,200}\.)?(?P<name>[A-Z]\w{0,100}(?:Error|Exception|Exit|Interrupt)|"
    r"KeyboardInterrupt|StopIteration)(?::|$)"
)
_TRACEBACK = "Traceback (most recent call last):"
_FILE_RANK = re.compile(r"(?:rank|worker|proc|process|local_rank)[-_.]?(\d{1,6})", re.IGNORECASE)
#: a line that says it is an error without naming one the catalog knows: a log level
#: (`ERROR`, glog `E0304`), or a tool's own `error:` (`slurmstepd: error: …`, `fatal error: …`)
_ERRORISH = re.compile(
    r"(?:^|[\s\]])(?:E\d{4} |\[E\d{3,4} |ERROR\b|FATAL\b|CRITICAL\b|: E |\bF\d{4} )"
    r"|\b(?:error|Error|fatal error):\s"
)
#: INFO/DEBUG levels of the logging module, glog (`I0304 …`), TensorFlow (`…: I tensorflow/`)
_INFO_LEVEL = re.compile(
    r"(?:^|[\s\[|:])(?:INFO|DEBUG|TRACE)(?:[\s\]|:-]|$)"
    r"|^\[?[ID]\d{4} "
    r"|\.\d+: [ID] \S+\.(?:cc|py|h)\b"
)
_NOT_ERROR = re.compile(r"\bno error\b|error_count=0|errors?: 0\b", re.IGNORECASE)


def rank_from_name(name: str) -> int | None:
    m = _FILE_RANK.search(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def signature_of(message: str) -> signatures.Signature | None:
    """The catalog entry of a line (prefixes removed), or None when it is no error. A line
    logged at INFO or DEBUG level is no error whatever words it holds (`INFO writing to
    /dev/shm`), unless its signature counts at INFO level (`NET/IB : No device found`)."""
    sig = signatures.catalog().classify(message)
    if sig is not None and (sig.info or "NCCL WARN" in message):
        return sig
    if _NOT_ERROR.search(message) or _INFO_LEVEL.search(message):
        return None
    return sig


#: what a line is: (signature id, role, root cause or None, legacy category)
LineKind = tuple[str, str, str | None, str]
GENERIC: LineKind = ("generic-error", "local-error", None, "application-exception")


def line_kind(text: str, sig: signatures.Signature | None) -> LineKind | None:
    """What a line (prefixes removed) is, given its catalog entry: that entry's kind, or a
    generic error of the rank for a line that only says it is one (`ERROR`, `error: `), or
    None. The one classification both the reader and `classify` use."""
    if sig is not None:
        return (sig.id, sig.role, sig.cause, CATEGORY.get(sig.id, sig.id))
    if (
        _ERRORISH.search(text[:400])
        and not _NOT_ERROR.search(text)
        and not _INFO_LEVEL.search(text)
    ):
        return GENERIC
    return None


def classify(message: str) -> str | None:
    """The legacy error class of a line (see the module docstring), or None."""
    text = prefixes.strip(message).text
    kind = line_kind(text, signature_of(text))
    return kind[3] if kind is not None and kind[1] in ERROR_ROLES else None


class _Rank:
    """One rank's lines of a file, read so far."""

    def __init__(self, rank: int | None) -> None:
        self.rank = rank
        self.errors: list[AppError] = []
        self.context: list[AppError] = []
        self.count = 0
        self.categories: dict[str, int] = {}
        self.nccl_seen = False
        self.nccl_before = False
        self.first_time: str | None = None
        self.last_time: str | None = None
        self.pid: int | None = None
        #: reading a traceback's frames (the exception line after them is what counts)
        self.traceback_open = False
        self.lines = 0
        self.last: AppError | None = None
        self.pids: set[int] = set()

    def add(self, err: AppError) -> None:
        if not self.errors:
            self.nccl_before = self.nccl_seen
        prev = self.errors[-1] if self.errors else None
        if (
            prev is not None
            and prev.signature == "generic-error"
            and err.signature != "generic-error"
            and err.line == prev.line + 1
            and len(self.errors) == 1
        ):
            # "ERROR: ..." then the specific line right after: keep the specific one first
            self.errors[-1] = err
        elif len(self.errors) < RECORDS_MAX:
            self.errors.append(err)
        self.last = err
        self.count += 1
        self.categories[err.category] = self.categories.get(err.category, 0) + 1

    def note_time(self, time: str) -> None:
        self.last_time = time
        if self.first_time is None:
            self.first_time = time

    def note_pids(self, line: str, pid: int | None) -> None:
        """The pids the line names (at most PIDS_MAX kept), and the rank's own: its prefix's,
        or the first `pid N` it logs."""
        if len(self.pids) < PIDS_MAX:
            if pid is not None:
                self.pids.add(pid)
            for named in _ANY_PID.finditer(line[:400]):
                self.pids.add(int(named.group(1) or named.group(2)))
        if self.pid is None:
            if pid is not None:
                self.pid = pid
            elif "pid" in line[:400].lower():
                own = _PID.search(line[:400])
                if own:
                    self.pid = int(own.group(1))

    def skips_traceback(self, line: str, stripped: str) -> bool:
        """The line opens a traceback or is one of its frames: not read as an error."""
        if (
            stripped.startswith(_TRACEBACK)
            or stripped.startswith("During handling of")
            or stripped.startswith("The above exception was the direct cause")
        ):
            self.traceback_open = True
            return True
        if self.traceback_open:
            if line[:1].isspace() or stripped.startswith("File ") or stripped.startswith("^"):
                return True  # a frame or the source line of one
            self.traceback_open = False
        return False

    def log(self, source: str, unreadable_lines: int) -> RankLog:
        return RankLog(
            rank=self.rank,
            source=source,
            lines=self.lines,
            first_error=self.errors[0] if self.errors else None,
            last_error=self.last,
            error_count=self.count,
            categories=self.categories,
            nccl_started_before_error=self.nccl_before,
            first_time=self.first_time,
            last_time=self.last_time,
            pid=self.pid,
            errors=tuple(self.errors),
            context=tuple(self.context),
            pids=tuple(sorted(self.pids)),
            unreadable_lines=unreadable_lines,
        )


def _who(rank: int | None, host: str | None, pid: int | None, source: str) -> str:
    if rank is not None:
        return f"rank {rank}" + (f" on {host}" if host else "")
    if pid is not None:
        return f"pid {pid}" + (f" on {host}" if host else "")
    if host:
        return f"a process on {host}"
    return f"a process logging to {source}"


def _unprefixed(head: str, ref: TimeRef) -> prefixes.Stripped:
    """The line behind its launcher prefixes, and what they said."""
    # a job run as a systemd unit logs through journald: `journalctl -u UNIT` lines
    # (short, short-iso, short-precise) carry the time and the pid in their prefix
    journal = parse_syslog_prefix(head[:8192], ref) if head[:1].isalnum() else None
    stripped = prefixes.strip(journal.message if journal else head[:8192])
    if journal is None:
        return stripped
    return replace(
        stripped,
        time=stripped.time or journal.time,
        pid=stripped.pid or journal.pid,
        host=stripped.host or journal.host,
        layers=("journal", *stripped.layers),
    )


@dataclass
class _Reader:
    """One log file being read: a _Rank per rank seen in it."""

    source: str
    #: the file's rank (from its name), for lines whose prefix names none
    rank: int | None
    ref: TimeRef
    ranks: dict[int | None, _Rank] = field(default_factory=dict)
    #: the time of the file's last timed line: an untimed error's (inferred) time
    last_time: str | None = None

    def read(self, number: int, raw: str) -> None:
        """One line: its rank's times and pids, then, unless it is a traceback's frame or
        NCCL INFO, the error or context line it is."""
        head = raw.rstrip()
        unprefixed = _unprefixed(head, self.ref)
        line = unprefixed.text
        rank = unprefixed.rank if unprefixed.rank is not None else self.rank
        state = self.ranks.get(rank)
        if state is None:
            state = self.ranks[rank] = _Rank(rank)
        state.lines += 1
        stripped = line.strip()
        if not stripped:
            return
        when = find_time(line, self.ref) or unprefixed.time
        if when is not None:
            self.last_time = when
            state.note_time(when)
        state.note_pids(line, unprefixed.pid)
        if state.skips_traceback(line, stripped):
            return
        sig = signature_of(stripped)
        if "NCCL INFO" in line:
            state.nccl_seen = True
            if sig is None or not sig.info:
                return
        kind = line_kind(stripped, sig)
        if kind is None or kind[1] == "benign":
            return
        err = self._error(number, head, stripped, unprefixed, rank, when, kind)
        if err.role in ERROR_ROLES:
            state.add(err)
        elif len(state.context) < 50:
            state.context.append(err)

    def _error(
        self,
        number: int,
        head: str,
        stripped: str,
        unprefixed: prefixes.Stripped,
        rank: int | None,
        when: str | None,
        kind: LineKind,
    ) -> AppError:
        signature, role, cause, category = kind
        exception = _EXC.match(stripped)
        return AppError(
            source=self.source,
            line=number,
            time=when if when is not None else self.last_time,
            text=clip(head),
            rank=rank,
            category=category,
            signature=signature,
            role=role,
            cause=cause,
            exception=exception.group("name") if exception else _inline_exc(stripped),
            time_inferred=when is None and self.last_time is not None,
            who=_who(rank, unprefixed.host, unprefixed.pid, self.source),
            host=unprefixed.host,
            pid=unprefixed.pid,
        )


def parse_applog(
    lines: Iterable[str],
    *,
    source: str,
    rank: int | None = None,
    collected_at: str | None = None,
) -> tuple[RankLog, ...]:
    """One log file: a RankLog per rank seen in it (the file's rank, or per line prefix)."""
    reader = _Reader(source, rank, TimeRef(collected_at))
    bad_lines = 0
    for number, raw in enumerate(lines, 1):
        try:
            reader.read(number, raw)
        except Exception:
            # a parser bug on hostile input: the line is counted and skipped, the rest read
            bad_lines += 1
            continue
    return tuple(state.log(source, bad_lines) for state in reader.ranks.values() if state.lines)


_INLINE_EXC = re.compile(r"\b(?:[a-z_]\w{0,100}\.){0,20}([A-Z]\w{0,100}(?:Error|Exception)): ")


def _inline_exc(text: str) -> str | None:
    m = _INLINE_EXC.search(text[:1000])
    return m.group(1) if m else None


def summarise(ranks: Iterable[RankLog]) -> AppLogFacts:
    all_ranks = tuple(sorted(ranks, key=lambda r: (r.rank is None, r.rank or 0, r.source)))
    errors = [e for r in all_ranks for e in r.errors]
    ordered = causal_order(errors)
    first = ordered[0] if ordered else None
    by_cause: dict[str, list[AppError]] = {}
    for e in ordered:
        if e.cause and len(by_cause.setdefault(e.cause, [])) < BY_CAUSE_MAX:
            by_cause[e.cause].append(e)
    surfaced_all = [e for e in errors if e.role == "surfaced"]
    nccl_like = [e for e in surfaced_all if e.signature != "launcher-failed"]
    pool = nccl_like or surfaced_all or [r.last_error for r in all_ranks if r.last_error]
    surfaced: AppError | None = None
    if pool:
        timed = [e for e in pool if e.time]
        surfaced = max(timed, key=lambda e: (e.time or "", e.source, e.line)) if timed else pool[-1]
    # a rank's own first error that names no cause of its own, after a peer went away
    peer = [e for e in ordered if e.role == "peer-consequence"]
    # a rank is silent only if none of its files logged an error
    with_errors = {r.rank for r in all_ranks if r.first_error is not None}
    silent = tuple(sorted({r.rank for r in all_ranks if r.rank is not None} - with_errors))
    return AppLogFacts(
        ranks=all_ranks,
        first_failed_rank=first.rank if first else None,
        first_error=first,
        surfaced=surfaced,
        silent_ranks=silent,
        by_cause={k: tuple(v) for k, v in by_cause.items()},
        killed=tuple(e for e in errors if e.signature == "rank-killed")[:BY_CAUSE_MAX],
        peer_consequences=tuple(peer[:BY_CAUSE_MAX]),
        context=tuple(e for r in all_ranks for e in r.context)[:BY_CAUSE_MAX],
        pids=tuple(sorted({p for r in all_ranks for p in r.pids}))[:PIDS_MAX],
    )


@register(
    "applog", "app/*.log and nccl/*.log: every error line classified; the first in causal order"
)
def applog_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    logs = [(k, v) for prefix in PREFIXES for k, v in files_under(files, prefix) if is_collected(v)]
    if not logs:
        return {"collected": False, "app_collected": False}
    raw = context.get("collected_at")
    collected_at = raw if isinstance(raw, str) and context_ref(context).year else None
    ranks: list[RankLog] = []
    for name, res in logs:
        ranks.extend(
            parse_applog(
                res.lines(),
                source=name,
                rank=rank_from_name(name) if name.startswith("app/") else None,
                collected_at=collected_at,
            )
        )
    facts = summarise(ranks)
    out: dict[str, Any] = to_jsonable(facts)
    # the per-file error lists feed the ranking above; the facts keep each rank's first and last
    for r in out["ranks"]:
        r.pop("errors", None)
        r.pop("context", None)
        r.pop("pids", None)
        r.pop("unreadable_lines", None)
    out["collected"] = True
    out["app_collected"] = any(k.startswith("app/") for k, _ in logs)
    out["errors_by_category"] = _merge(r.categories for r in facts.ranks)
    out["causes"] = sorted(facts.by_cause)
    # a silent rank's evidence: its log, at the last line it wrote (untimed: when it died is
    # not known, only that it wrote nothing after this line)
    out["silent_evidence"] = [
        {"source": r.source, "line": max(1, r.lines), "time": None,
         "text": f"rank {r.rank} logged no error; its log ends here"}
        for r in facts.ranks
        if r.rank in facts.silent_ranks
    ][:20]  # fmt: skip
    unreadable = {r.source: r.unreadable_lines for r in facts.ranks if r.unreadable_lines}
    if unreadable:
        # reported as the stage's errors in every output format (executor._parse)
        out["parse_errors"] = [
            f"{source}: {n} line(s) could not be read and were skipped"
            for source, n in sorted(unreadable.items())
        ]
    return out


def _merge(dicts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out
