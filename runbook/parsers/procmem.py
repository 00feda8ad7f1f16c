"""The memory of each process in the pod's memory cgroup (`procmem/*`), and who is who:
ranks, their DataLoader workers, and the rest (launchers, shells, sidecars, `pause`).

The probe lists the cgroup's processes (`cgroup.procs` of the pod directory and every container
directory below it; v1 `tasks` when no `cgroup.procs` is readable) into `procmem/pids`, and
for each pid prints `/proc/PID/status` as `procmem/PID.status` and `/proc/PID/smaps_rollup` as
`procmem/PID.smaps_rollup` (never `cmdline` or `environ`: they can carry tokens).

What each kernel gives:

- `status`: `Name`, `PPid`, `Tgid`, `VmRSS`, `VmSwap`; `RssAnon`/`RssFile`/`RssShmem` since
  Linux 4.5 (before that only `VmRSS`, used as the anonymous size, and said so in `method`).
- `smaps_rollup` (Linux 4.14+): `Rss`, `Pss`, `Anonymous`, `Swap`, `Private_*`/`Shared_*`;
  `Pss_Anon`/`Pss_File`/`Pss_Shmem` since 5.3 (commit ee2ad71b0756, "mm: smaps: split PSS
  into components"); `Pss_Dirty` since 6.0. Absent on older kernels, and unreadable without
  ptrace access to the process: then `status` alone is used.

Roles (`role`, with the reason in `why`):

- `worker`: named `pt_data_worker` (PyTorch names its DataLoader workers so), or any process
  below a rank (a forked worker keeps its rank's name: `python3` under `python3`) when none of
  the rank's children is named so; `rank_pid` says whose.
- `other`: infrastructure (`pause`, shells, init shims, `sleep`), launchers (`torchrun`,
  `mpirun`, `orted`, ...; and a process whose children have children of their own and are
  not named workers: `python -m torch.distributed.run`), a rank's unnamed children beside
  named workers (multiprocessing's `resource_tracker`, compile workers), and top-level
  processes that look like no training process (sidecars). The children of a launcher or
  shell are considered in its place.
- `rank`: a top-level process (after launchers and shells) that is a Python interpreter
  (`python*`, `pt_main_thread`), has named workers, is a launcher's child, or matches the
  `rank_comm` variable (a regular expression; `--var rank_comm=train_process` for a renamed
  binary). When nothing qualifies, every top-level process that is neither infrastructure nor
  a known sidecar counts as a rank (`why` says so).

What a rank and a worker cost (`own_anon_bytes`): a forked worker maps its rank's anonymous
pages copy-on-write, so its `RssAnon` counts them again. With `Pss_Anon` (5.3+), for a rank
with anonymous size A_r, proportional size P_r and k workers, each worker's own anonymous
memory is `P_w - (A_r - P_r) / k` (exact when the shared pages are shared by the rank and all
its workers; the sum over the workers is exact regardless: total PSS of the group minus A_r;
a rank's helpers are forked copies too and count among the k, costed the same way).
Without it, `RssAnon_w - RssAnon_r` (the worker maps what its rank had at fork time). A rank's
own cost is its whole `RssAnon`; an `other` process's its `Pss_Anon` when known (a launcher
shares pages with what it forked). `method` says which was used. `total_anon_bytes` is the sum
of `Pss_Anon` (every page once: what the cgroup's `anon`/`rss` counts) when every process has
it, else the sum of the own costs.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from runbook.parsers._common import is_collected, iter_lines, to_jsonable
from runbook.parsers.registry import Files, register

PREFIX = "procmem/"
PIDS = PREFIX + "pids"
_FILE = re.compile(r"^procmem/(\d+)\.(status|smaps_rollup)$")
_KB = re.compile(r"^(\w+):\s+([0-9]{1,20})\s*kB$")
#: a pid or count as the kernel prints it (at most 2**64: 20 digits)
_COUNT = re.compile(r"[0-9]{1,20}")

#: PyTorch's DataLoader worker processes (torch.utils.data._utils.worker sets the name)
WORKER_NAMES = frozenset({"pt_data_worker"})
#: processes that start the ranks; their children are the ranks
LAUNCHER_NAMES = frozenset(
    {"torchrun", "mpirun", "mpiexec", "mpiexec.hydra", "orted", "prted", "prterun",
     "hydra_pmi_proxy", "deepspeed", "accelerate", "srun", "horovodrun", "launcher"}
)  # fmt: skip
#: container plumbing: never a rank; its children are considered in its place
INFRA_NAMES = frozenset(
    {"pause", "sh", "bash", "dash", "ash", "zsh", "tini", "tini-static", "dumb-init",
     "catatonit", "s6-svscan", "s6-supervise", "runsv", "runsvdir", "sleep", "conmon",
     "containerd-shim", "timeout", "su", "sudo", "gosu", "su-exec", "setpriv", "nsenter"}
)  # fmt: skip
#: common sidecars, never taken as ranks by the fallback
SIDECAR_NAMES = frozenset(
    {"envoy", "pilot-agent", "fluent-bit", "fluentd", "otelcol", "otelcol-contrib",
     "node_exporter", "dcgm-exporter", "nv-hostengine", "istio-agent", "linkerd2-proxy",
     "vector", "promtail", "telegraf", "nginx", "sshd", "cloud_sql_proxy"}
)  # fmt: skip
_PYTHON = re.compile(r"^(python[0-9.]*|pt_main_thread|pt_elastic)$")


@dataclass(frozen=True)
class ProcStatus:
    """The lines of `/proc/PID/status` this parser reads (kB values in bytes)."""

    pid: int
    tgid: int | None
    ppid: int | None
    name: str
    state: str | None
    rss_bytes: int | None
    anon_bytes: int | None
    file_bytes: int | None
    shmem_bytes: int | None
    swap_bytes: int | None
    threads: int | None


@dataclass(frozen=True)
class SmapsRollup:
    """`/proc/PID/smaps_rollup` fields in bytes; None where the kernel does not print one."""

    rss_bytes: int | None
    pss_bytes: int | None
    pss_anon_bytes: int | None
    pss_file_bytes: int | None
    pss_shmem_bytes: int | None
    anonymous_bytes: int | None
    private_dirty_bytes: int | None
    shared_dirty_bytes: int | None
    swap_bytes: int | None
    swap_pss_bytes: int | None


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int | None
    name: str
    state: str | None
    rss_bytes: int | None
    anon_bytes: int | None
    file_bytes: int | None
    shmem_bytes: int | None
    pss_bytes: int | None
    pss_anon_bytes: int | None
    pss_shmem_bytes: int | None
    swap_bytes: int | None
    role: str = "other"
    why: str = ""
    rank_pid: int | None = None
    #: what this process costs on its own (see the module docstring)
    own_anon_bytes: int | None = None
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spread:
    count: int
    max: int | None
    median: int | None
    min: int | None
    total: int | None


@dataclass(frozen=True)
class ProcMemFacts:
    processes: tuple[Process, ...]
    ranks: int
    workers: int
    workers_per_rank: dict[str, int]
    per_rank: dict[str, Spread]
    per_worker: dict[str, Spread]
    total_rss_bytes: int | None
    total_anon_bytes: int | None
    total_pss_bytes: int | None
    total_pss_anon_bytes: int | None
    total_shmem_bytes: int | None
    total_pss_shmem_bytes: int | None
    total_swap_bytes: int | None
    #: anonymous memory of the `other` processes (sidecars, launchers, shells)
    other_anon_bytes: int | None
    #: `pss` (Pss_Anon, 5.3+), `rss-difference` (RssAnon, 4.5+), or `rss` (VmRSS only)
    method: str
    listed: int
    vanished: tuple[int, ...] = ()
    #: for the estimate's "measured:" notes
    rank_pids: tuple[int, ...] = ()
    worker_pids: tuple[int, ...] = ()
    features: dict[str, bool] = field(default_factory=dict)


def _kb_fields(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in iter_lines(text):
        m = _KB.match(line.strip())
        if m:
            out[m.group(1)] = int(m.group(2)) * 1024
    return out


def _int_field(value: str | None) -> int | None:
    if value is None:
        return None
    head = value.split()[0] if value.split() else ""
    return int(head) if _COUNT.fullmatch(head) else None


def parse_status(text: str, pid: int) -> ProcStatus:
    """`/proc/PID/status` (any kernel since 2.6: fields missing on old ones are None)."""
    raw: dict[str, str] = {}
    for line in iter_lines(text):
        key, sep, value = line.partition(":")
        if sep:
            raw[key.strip()] = value.strip()
    kb = _kb_fields(text)
    state = raw.get("State")
    return ProcStatus(
        pid=_int_field(raw.get("Pid")) or pid,
        tgid=_int_field(raw.get("Tgid")),
        ppid=_int_field(raw.get("PPid")),
        name=raw.get("Name", "?"),
        state=state.split()[0] if state else None,
        rss_bytes=kb.get("VmRSS"),
        anon_bytes=kb.get("RssAnon"),
        file_bytes=kb.get("RssFile"),
        shmem_bytes=kb.get("RssShmem"),
        swap_bytes=kb.get("VmSwap"),
        threads=_int_field(raw.get("Threads")),
    )


def parse_smaps_rollup(text: str) -> SmapsRollup | None:
    """`/proc/PID/smaps_rollup` (4.14+; the Pss_* split 5.3+); None when it holds nothing."""
    kb = _kb_fields(text)
    if "Rss" not in kb:
        return None
    return SmapsRollup(
        rss_bytes=kb.get("Rss"),
        pss_bytes=kb.get("Pss"),
        pss_anon_bytes=kb.get("Pss_Anon"),
        pss_file_bytes=kb.get("Pss_File"),
        pss_shmem_bytes=kb.get("Pss_Shmem"),
        anonymous_bytes=kb.get("Anonymous"),
        private_dirty_bytes=kb.get("Private_Dirty"),
        shared_dirty_bytes=kb.get("Shared_Dirty"),
        swap_bytes=kb.get("Swap"),
        swap_pss_bytes=kb.get("SwapPss"),
    )


def parse_pids(text: str) -> list[int]:
    return sorted({int(t) for t in text.split() if _COUNT.fullmatch(t)})


def _process(status: ProcStatus, rollup: SmapsRollup | None) -> Process:
    sources = [f"/proc/{status.pid}/status"]
    if rollup is not None:
        sources.append(f"/proc/{status.pid}/smaps_rollup")
    anon = status.anon_bytes
    if anon is None and rollup is not None:
        anon = rollup.anonymous_bytes
    return Process(
        pid=status.pid,
        ppid=status.ppid,
        name=status.name,
        state=status.state,
        rss_bytes=status.rss_bytes if status.rss_bytes is not None else (
            rollup.rss_bytes if rollup else None),
        anon_bytes=anon,
        file_bytes=status.file_bytes,
        shmem_bytes=status.shmem_bytes,
        pss_bytes=rollup.pss_bytes if rollup else None,
        pss_anon_bytes=rollup.pss_anon_bytes if rollup else None,
        pss_shmem_bytes=rollup.pss_shmem_bytes if rollup else None,
        swap_bytes=status.swap_bytes if status.swap_bytes is not None else (
            rollup.swap_bytes if rollup else None),
        sources=tuple(sources),
    )  # fmt: skip


# --- roles -------------------------------------------------------------------------------------


class _Tree:
    """The cgroup's processes as a tree, and each one's role as it is decided (`out`)."""

    def __init__(self, procs: Mapping[int, Process], rank_comm: re.Pattern[str] | None) -> None:
        self.procs = procs
        self.rank_comm = rank_comm
        self.children: dict[int, list[int]] = {pid: [] for pid in procs}
        #: processes whose parent is not in the cgroup
        self.roots: list[int] = []
        for pid, p in sorted(procs.items()):
            if p.ppid is not None and p.ppid in procs and p.ppid != pid:
                self.children[p.ppid].append(pid)
            else:
                self.roots.append(pid)
        self.out: dict[int, Process] = {}
        #: top-level processes nothing marked as a rank (ranks if no process is one)
        self.undecided: list[int] = []

    def is_named_worker(self, pid: int) -> bool:
        return self.procs[pid].name in WORKER_NAMES

    def structural_launcher(self, pid: int) -> bool:
        """Its children have children and none is a named worker: a launcher of ranks."""
        kids = self.children[pid]
        return bool(kids) and not any(self.is_named_worker(k) for k in kids) and any(
            self.children[k] and not self.is_named_worker(k) for k in kids)  # fmt: skip

    def mark(self, pid: int, role: str, why: str, rank_pid: int | None = None) -> None:
        """`pid`'s role and why (and the rank it belongs to, for a rank's workers/helpers)."""
        process = replace(self.procs[pid], role=role, why=why)
        self.out[pid] = process if rank_pid is None else replace(process, rank_pid=rank_pid)

    def visit(self, pid: int, parent_launcher: bool) -> None:
        """Decide `pid` and, below it, its children."""
        name = self.procs[pid].name
        if self.is_named_worker(pid):
            # a worker whose rank is not in the cgroup (or was not read)
            self.mark(pid, "worker", "DataLoader worker (pt_data_worker)")
            below = False
        elif name in INFRA_NAMES or name.startswith("containerd-shim"):
            self.mark(pid, "other", "infrastructure")
            below = parent_launcher
        elif name in LAUNCHER_NAMES:
            self.mark(pid, "other", f"launcher ({name})")
            below = True
        elif self.structural_launcher(pid):
            self.mark(pid, "other", "launcher (its children have children)")
            below = True
        else:
            self.rank_or_other(pid, parent_launcher)
            return
        for kid in self.children[pid]:
            self.visit(kid, below)

    def rank_or_other(self, pid: int, parent_launcher: bool) -> None:
        """A process that is neither worker, infrastructure nor launcher: a rank (with its
        workers) when something says so, else left undecided."""
        name = self.procs[pid].name
        reason = None
        if parent_launcher:
            reason = "started by a launcher"
        elif any(self.is_named_worker(k) for k in self.children[pid]):
            reason = "has DataLoader workers"
        elif _PYTHON.match(name):
            reason = "top-level Python process"
        elif self.rank_comm is not None and self.rank_comm.search(name):
            reason = "matches rank_comm"
        if reason is None:
            self.undecided.append(pid)
            self.mark(pid, "other", "sidecar or other top-level process")
            return
        self.mark(pid, "rank", reason)
        self.mark_workers(pid)

    def mark_workers(self, rank: int) -> None:
        """Everything forked below a rank: its workers, or its helpers."""
        children = self.children
        # with named workers, a rank's other children are helpers (multiprocessing's
        # resource_tracker, compile workers), not loader workers
        named = any(self.is_named_worker(k) for k in children[rank])
        stack = [(k, False) for k in children[rank]]
        while stack:
            pid, helper = stack.pop()
            worker_name = self.is_named_worker(pid)
            if helper or (named and not worker_name):
                self.mark(pid, "other", f"helper process of rank {rank}", rank)
                stack.extend((k, True) for k in children[pid])
                continue
            why = "DataLoader worker (pt_data_worker)" if worker_name else f"child of rank {rank}"
            self.mark(pid, "worker", why, rank)
            stack.extend((k, False) for k in children[pid])


def _classify(
    procs: Mapping[int, Process], rank_comm: re.Pattern[str] | None
) -> dict[int, Process]:
    """Each process's role (rank, worker or other) and why, from the process tree; when no
    process is recognisably a rank, the top-level ones that are no known sidecar are."""
    tree = _Tree(procs, rank_comm)
    for pid in tree.roots:
        tree.visit(pid, False)
    if not any(p.role == "rank" for p in tree.out.values()):
        for pid in tree.undecided:
            if procs[pid].name in SIDECAR_NAMES:
                continue
            tree.mark(pid, "rank", "no recognisable rank: a top-level process")
            tree.mark_workers(pid)
    return tree.out


def _attribute(procs: dict[int, Process]) -> tuple[dict[int, Process], str]:
    """Each process's own anonymous cost (the module docstring's arithmetic)."""
    # everything forked below a rank shares its pages: its workers and its helpers
    by_rank: dict[int, list[int]] = {}
    for pid, p in procs.items():
        if p.rank_pid is not None and p.rank_pid in procs:
            by_rank.setdefault(p.rank_pid, []).append(pid)
    methods: set[str] = set()
    out = dict(procs)
    for pid, p in procs.items():
        if p.role == "other" and p.pss_anon_bytes is not None:
            # a launcher shares its pages with what it forked: its proportional share
            out[pid] = replace(p, own_anon_bytes=p.pss_anon_bytes)
        else:
            out[pid] = replace(p, own_anon_bytes=_anon(p))
    for rank, workers in by_rank.items():
        rank_process = procs[rank]
        rank_anon = _anon(rank_process)
        group = [rank_process, *(procs[w] for w in workers)]
        if rank_anon is not None and all(g.pss_anon_bytes is not None for g in group):
            assert rank_process.pss_anon_bytes is not None
            shared_share = max(0, rank_anon - rank_process.pss_anon_bytes) / len(workers)
            for w in workers:
                worker_pss_anon = procs[w].pss_anon_bytes
                assert worker_pss_anon is not None
                share = max(0, round(worker_pss_anon - shared_share))
                out[w] = replace(procs[w], own_anon_bytes=share)
            methods.add("pss")
            continue
        for w in workers:
            worker_anon = _anon(procs[w])
            own: int | None = None
            if worker_anon is not None and rank_anon is not None:
                own = max(0, worker_anon - rank_anon)
            out[w] = replace(procs[w], own_anon_bytes=own)
        methods.add("rss-difference" if rank_process.anon_bytes is not None else "rss")
    if not methods:
        methods.add("rss" if any(p.anon_bytes is None for p in procs.values()) else "rss-anon")
    order = ("rss", "rss-difference", "pss", "rss-anon")
    return out, next(m for m in order if m in methods)


def _anon(p: Process) -> int | None:
    return p.anon_bytes if p.anon_bytes is not None else p.rss_bytes


def _spread(values: Iterable[int | None]) -> Spread:
    known = sorted(v for v in values if v is not None)
    if not known:
        return Spread(0, None, None, None, None)
    return Spread(len(known), known[-1], int(statistics.median(known)), known[0], sum(known))


def _sum(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _rank_pattern(rank_comm: str | None) -> re.Pattern[str] | None:
    """The `rank_comm` variable as a pattern (a string that is not a valid one, literally)."""
    if not rank_comm:
        return None
    try:
        return re.compile(rank_comm)
    except re.error:
        return re.compile(re.escape(rank_comm))


def parse_procmem(
    statuses: Mapping[int, str],
    rollups: Mapping[int, str],
    listed: Iterable[int] = (),
    rank_comm: str | None = None,
) -> ProcMemFacts:
    """`statuses`/`rollups` map a pid to its `/proc/PID/status`/`smaps_rollup` text; `listed`
    is what the cgroup's `cgroup.procs` said (a pid listed and not read had exited)."""
    procs: dict[int, Process] = {}
    for pid, text in statuses.items():
        status = parse_status(text, pid)
        if status.tgid is not None and status.tgid != status.pid:
            continue  # a thread (v1 `tasks`), not a process
        if status.state == "Z":
            continue  # a zombie holds no memory
        rollup = parse_smaps_rollup(rollups[pid]) if pid in rollups else None
        procs[status.pid] = _process(status, rollup)
    classified, method = _attribute(_classify(procs, _rank_pattern(rank_comm)))
    ordered = tuple(classified[pid] for pid in sorted(classified))
    ranks = [p for p in ordered if p.role == "rank"]
    workers = [p for p in ordered if p.role == "worker"]
    others = [p for p in ordered if p.role == "other"]
    per_rank_workers = {str(r.pid): sum(1 for w in workers if w.rank_pid == r.pid) for r in ranks}
    group = {
        str(r.pid): (r.own_anon_bytes or 0)
        + sum(w.own_anon_bytes or 0 for w in workers if w.rank_pid == r.pid)
        for r in ranks
    }
    listed_set = set(listed)
    rollup_read = [p for p in ordered if len(p.sources) > 1]
    return ProcMemFacts(
        processes=ordered,
        ranks=len(ranks),
        workers=len(workers),
        workers_per_rank=per_rank_workers,
        per_rank={
            "anon_bytes": _spread(r.anon_bytes for r in ranks),
            "rss_bytes": _spread(r.rss_bytes for r in ranks),
            "pss_anon_bytes": _spread(r.pss_anon_bytes for r in ranks),
            "shmem_bytes": _spread(r.shmem_bytes for r in ranks),
            "workers": _spread(per_rank_workers.values()),
            # the rank and its workers together, each counted once
            "group_anon_bytes": _spread(group.values()),
        },
        per_worker={
            "own_anon_bytes": _spread(w.own_anon_bytes for w in workers),
            "anon_bytes": _spread(w.anon_bytes for w in workers),
            "rss_bytes": _spread(w.rss_bytes for w in workers),
        },
        total_rss_bytes=_sum(p.rss_bytes for p in ordered),
        total_anon_bytes=(
            _sum(p.pss_anon_bytes for p in ordered)
            if ordered and all(p.pss_anon_bytes is not None for p in ordered)
            else _sum(p.own_anon_bytes for p in ordered)
        ),
        total_pss_bytes=_sum(p.pss_bytes for p in ordered),
        total_pss_anon_bytes=_sum(p.pss_anon_bytes for p in ordered),
        total_shmem_bytes=_sum(p.shmem_bytes for p in ordered),
        total_pss_shmem_bytes=_sum(p.pss_shmem_bytes for p in ordered),
        total_swap_bytes=_sum(p.swap_bytes for p in ordered),
        other_anon_bytes=_sum(p.own_anon_bytes for p in others),
        method=method,
        listed=len(listed_set),
        vanished=tuple(sorted(listed_set - set(statuses))),
        rank_pids=tuple(r.pid for r in ranks),
        worker_pids=tuple(w.pid for w in workers),
        features={
            "rss_anon": any(p.anon_bytes is not None for p in ordered)
            and all(p.file_bytes is not None for p in ordered),
            "smaps_rollup": bool(rollup_read),
            "pss_anon": bool(rollup_read)
            and all(p.pss_anon_bytes is not None for p in rollup_read),
        },
    )


#: what the facts hold when nothing was collected, so templates can always dig
_EMPTY_SPREAD = {"count": 0, "max": None, "median": None, "min": None, "total": None}


def empty_facts(collected: bool | None) -> dict[str, Any]:
    return {
        "collected": collected,
        "processes": [],
        "ranks": 0,
        "workers": 0,
        "workers_per_rank": {},
        "per_rank": {k: dict(_EMPTY_SPREAD) for k in (
            "anon_bytes", "rss_bytes", "pss_anon_bytes", "shmem_bytes", "workers",
            "group_anon_bytes")},
        "per_worker": {k: dict(_EMPTY_SPREAD) for k in (
            "own_anon_bytes", "anon_bytes", "rss_bytes")},
        "total_rss_bytes": None,
        "total_anon_bytes": None,
        "total_pss_bytes": None,
        "total_pss_anon_bytes": None,
        "total_shmem_bytes": None,
        "total_pss_shmem_bytes": None,
        "total_swap_bytes": None,
        "other_anon_bytes": None,
        "method": None,
        "listed": 0,
        "vanished": [],
        "rank_pids": [],
        "worker_pids": [],
        "features": {},
    }  # fmt: skip


@register("procmem", "procmem/*: each process of the pod cgroup: RSS, anon, PSS; ranks and workers")
def procmem_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    statuses: dict[int, str] = {}
    rollups: dict[int, str] = {}
    listed: list[int] = []
    pids_seen = False
    for name, res in files.items():
        if not name.startswith(PREFIX) or not is_collected(res):
            continue
        if name == PIDS:
            pids_seen = True
            listed = parse_pids(res.stdout)
            continue
        m = _FILE.match(name)
        if not m or res.exited not in (0, None):
            continue
        (statuses if m.group(2) == "status" else rollups)[int(m.group(1))] = res.stdout
    if not pids_seen and not statuses:
        return empty_facts(False)
    variables = context.get("vars")
    rank_comm = variables.get("rank_comm") if isinstance(variables, Mapping) else None
    facts = parse_procmem(
        statuses, rollups, listed, rank_comm if isinstance(rank_comm, str) else None
    )
    out: dict[str, Any] = to_jsonable(facts)
    out["collected"] = True
    return out
