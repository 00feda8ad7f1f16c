"""The recovery check's pass criteria over repeated `all_reduce_perf` runs (pure).

Criteria, in the order a failure is blamed:

=============  ===========================================================================
completed      every run printed its footer and exited 0, every rank is listed (and, with
               INFO lines, finished communicator init), no `Test failure` line, and the
               ranks shared one communicator (not a copy per process built without MPI=1:
               runbook.parsers.nccl_tests `unmeasured`)
correct        `#wrong` 0 in every row of every run and `# Out of bounds values : 0 OK`
bandwidth      the average bus bandwidth of every run (nccl-tests' `# Avg bus bandwidth`, the
               lowest of the runs) is at least the threshold for the node's GPU model,
               topology and GPU count (runbook/data/busbw-thresholds.yaml); each run's peak
               (its best row) is reported beside it
stable         the spread of the runs' average bus bandwidth, (max − min) / mean, is at most
               `max_spread_pct` (not judged with a single run)
transport      the NCCL INFO lines name the transport NCCL chose (P2P, SHM, NET/Socket,
               NET/IB …)
fixed-set      multi-node only: the runs spanned the fixed nodes, NICs and NCCL version
=============  ===========================================================================

The cause named when a criterion fails (DESIGN §5 root causes):

- completed: from the failing run's NCCL WARN lines: IB verbs → `rdma-misconfigured`, /dev/shm
  → `shm-exhausted`, sockets → `network-socket`, GPU memory → `gpu-memory-oom`, pinned host
  memory → `host-memory-oom`, peer access → `p2p-unavailable`; a hang (killed by the run
  timeout) or anything else → `inconclusive`;
- correct: `gpu-hardware` (the collective returned corrupted data: GPU memory or NVLink);
- bandwidth: `p2p-unavailable` when every GPU pair has NVLink but NCCL connected them through
  SHM or the network; `rdma-misconfigured` when a multi-node run went over NET/Socket; else
  `inconclusive` (a slow node whose cause this check cannot see: PCIe link width, clocks);
- stable, transport, fixed-set, no known threshold: `inconclusive`.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbook.parsers._common import to_jsonable
from runbook.parsers.busbw_thresholds import Threshold
from runbook.parsers.ibv_devinfo import HcaPort, fixed_set_report
from runbook.parsers.nccl_log import merge, parse_nccl_log
from runbook.parsers.nccl_tests import NcclTestsFacts, parse_nccl_tests

ORDER = ("completed", "correct", "bandwidth", "stable", "transport", "fixed-set")
#: the trailer the runbook's loop writes after each run (nccl-tests prints no exit status)
_TRAILER = re.compile(r"^# runbook: exit status (\d+)")
#: coreutils `timeout` exits 124 when it killed the command
TIMEOUT_STATUS = 124
_WARN_CAUSES = (
    ("ib", "rdma-misconfigured"),
    ("shm", "shm-exhausted"),
    ("socket", "network-socket"),
    ("cuda-oom", "gpu-memory-oom"),
    ("host-alloc", "host-memory-oom"),
)
_P2P_WARN = re.compile(r"(?i)peer access|peer mapping|P2P|cudaIpc|IPC handle")


@dataclass(frozen=True)
class RunInput:
    name: str
    lines: Sequence[str]
    #: the exit status the transport reported (a replayed file's `.rc`), used when the run's
    #: own trailer is absent
    exited: int | None = None


@dataclass(frozen=True)
class Expectation:
    """What the runs are judged against."""

    threshold: Threshold
    ranks: int | None
    nodes: int = 1
    max_spread_pct: float = 10.0
    topology: str | None = None
    hosts: list[str] = field(default_factory=list)
    nics: list[str] = field(default_factory=list)
    nccl_version: str | None = None
    gid_index: str | None = None
    ports: tuple[HcaPort, ...] = ()


@dataclass(frozen=True)
class Criterion:
    id: str
    passed: bool | None  # None: not judged
    detail: str


def exit_status(run: RunInput) -> int | None:
    for line in reversed(run.lines):
        m = _TRAILER.match(line.strip())
        if m:
            return int(m.group(1))
    return run.exited


def run_facts(run: RunInput) -> dict[str, Any]:
    facts: NcclTestsFacts = parse_nccl_tests(run.lines, source=run.name)
    nccl = merge([parse_nccl_log(run.lines, source=run.name)])
    status = exit_status(run)
    ranks = facts.nranks or (
        int(facts.params["nGpus"]) if facts.params.get("nGpus", "").isdigit() else None
    )
    busbws = [b for r in facts.rows for b in (r.oop_busbw, r.ip_busbw) if b is not None]
    return {
        "source": run.name,
        "exit_status": status,
        "timed_out": status == TIMEOUT_STATUS,
        "finished": facts.finished,
        "ranks": ranks,
        "init_complete_ranks": nccl["init_complete_ranks"],
        "rows": len(facts.rows),
        "wrong_total": facts.wrong_total,
        "wrong_rows": [r.line for r in facts.rows
                       if (isinstance(r.oop_wrong, int) and r.oop_wrong)
                       or (isinstance(r.ip_wrong, int) and r.ip_wrong)],
        "oob_values": facts.oob_values,
        "oob_ok": facts.oob_ok,
        "avg_busbw": facts.avg_busbw,
        "peak_busbw": max(busbws) if busbws else None,
        "largest_bytes": max((r.size for r in facts.rows), default=None),
        "failures": [to_jsonable(f) for f in facts.failures],
        "unmeasured": facts.unmeasured,
        "unmeasured_line": facts.unmeasured_line,
        "devices": sorted(set(facts.devices)),
        "nccl": {k: nccl[k] for k in ("version", "versions", "network", "transports",
                                      "transport_kinds", "ib_devices", "socket_interfaces",
                                      "hosts", "nnodes", "warn_categories", "warns")},
    }  # fmt: skip


def _incomplete(run: Mapping[str, Any], expected_ranks: int | None) -> str | None:
    """Why a run did not complete, or None."""
    if run["timed_out"]:
        return "killed by the run timeout (a hang)"
    if run["failures"]:
        return f"failed: {run['failures'][0]['text']}"
    if run.get("unmeasured"):
        return f"measured nothing about the fabric: {run['unmeasured']}"
    if not run["finished"]:
        return "no footer (`# Out of bounds values`, `# Avg bus bandwidth`): the run did not finish"
    # nccl-tests exits 1 after its footer for wrong values or a missed NCCL_TESTS_MIN_BW:
    # the run completed, and the other criteria judge what it found
    if run["exit_status"] not in (0, 1, None):
        return f"exited {run['exit_status']}"
    if expected_ranks and (run["ranks"] or 0) < expected_ranks:
        return f"{run['ranks'] or 0} of {expected_ranks} ranks"
    done = run["init_complete_ranks"]
    if done and expected_ranks and len(done) < expected_ranks:
        return f"communicator init completed on {len(done)} of {expected_ranks} ranks"
    return None


def _spread(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return round((max(values) - min(values)) / mean * 100, 2) if mean else None


def _cause_of_incomplete(runs: Iterable[Mapping[str, Any]]) -> str:
    for run in runs:
        cats = run["nccl"]["warn_categories"]
        for category, cause in _WARN_CAUSES:
            if cats.get(category):
                return cause
        if any(_P2P_WARN.search(str(w.get("message"))) for w in run["nccl"]["warns"]):
            return "p2p-unavailable"
    return "inconclusive"


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def evaluate(runs: Sequence[RunInput], expect: Expectation) -> dict[str, Any]:
    """Every criterion, the first failed one's cause and a one-line summary."""
    facts = [run_facts(r) for r in runs]
    ranks = expect.ranks or max((f["ranks"] or 0 for f in facts), default=0) or None
    finished = [f for f in facts if f["finished"]]
    # bandwidth is judged on the runs that finished (a partial table says nothing of it), on
    # nccl-tests' own `# Avg bus bandwidth` line; the peaks are reported, not judged
    avgs = [f["avg_busbw"] for f in finished if f["avg_busbw"] is not None]
    peaks = [f["peak_busbw"] for f in finished if f["peak_busbw"] is not None]
    spread = _spread(avgs)
    kinds = sorted({k for f in facts for k in f["nccl"]["transport_kinds"]})
    networks = sorted({f["nccl"]["network"] for f in facts if f["nccl"]["network"]})
    criteria = [
        _completed(facts, ranks),
        _correct(facts, finished),
        _bandwidth(finished, avgs, peaks, expect.threshold),
        _stable(avgs, spread, expect.max_spread_pct),
        _transport(facts, kinds, networks),
    ]
    fixed: dict[str, Any] | None = None
    if expect.nodes > 1:
        fixed, fixed_set = _fixed_set(facts, expect)
        criteria.append(fixed_set)

    failed = [c for c in criteria if c.passed is False]
    first_failed = failed[0].id if failed else None
    return {
        "collected": bool(facts),
        "runs": facts,
        "ranks": ranks,
        "threshold": expect.threshold.as_dict(),
        "criteria": {c.id: {"passed": c.passed, "detail": c.detail} for c in criteria},
        "failed": [c.id for c in failed],
        "passed": bool(facts) and not failed,
        "cause": _cause(first_failed, facts, expect, kinds, ranks),
        "summary": (
            "; ".join(f"{c.id} failed: {c.detail}" for c in failed) if failed
            else "; ".join(c.detail for c in criteria if c.passed)
        ),
        "transport": {"kinds": kinds, "networks": networks,
                      "ib_devices": sorted({d for f in facts for d in f["nccl"]["ib_devices"]})},
        "bandwidth": {"avg": avgs, "lowest_avg": min(avgs) if avgs else None,
                      "spread_pct": spread, "peaks": peaks,
                      "lowest_peak": min(peaks) if peaks else None,
                      "peak_spread_pct": _spread(peaks)},
        "fixed_set": fixed,
        "single_node": expect.nodes <= 1,
        "evidence": _evidence(first_failed, facts),
    }  # fmt: skip


def _completed(facts: list[dict[str, Any]], ranks: int | None) -> Criterion:
    """Every run finished, with every rank (see _incomplete)."""
    bad = [(f, why) for f in facts if (why := _incomplete(f, ranks)) is not None]
    return Criterion(
        "completed", bool(facts) and not bad,
        "no run" if not facts else (
            "; ".join(f"{f['source']}: {why}" for f, why in bad) if bad
            else f"{len(facts)} run(s), {ranks or '?'} ranks each, all finished"),
    )  # fmt: skip


def _correct(facts: list[dict[str, Any]], finished: list[dict[str, Any]]) -> Criterion:
    """`#wrong` 0 everywhere and `Out of bounds values : 0 OK` in every finished run."""
    wrong = [f for f in facts if f["wrong_total"] or f["oob_ok"] is False]
    no_oob = [f for f in finished if f["oob_ok"] is None]
    return Criterion(
        "correct", False if wrong or no_oob else (True if finished else None),
        "; ".join([*(f"{f['source']}: #wrong {f['wrong_total']}, out of bounds values "
                     f"{f['oob_values']} {'OK' if f['oob_ok'] else 'FAILED'}" for f in wrong),
                   *(f"{f['source']}: no `Out of bounds values` line" for f in no_oob)])
        or ("no finished run" if not finished else
            f"#wrong 0 and out of bounds values 0 OK in {len(finished)} run(s)"),
    )  # fmt: skip


def _bandwidth(
    finished: list[dict[str, Any]], avgs: list[float], peaks: list[float], threshold: Threshold
) -> Criterion:
    """The lowest average bus bandwidth of the finished runs against the threshold."""
    gbps = threshold.busbw_gbps
    low = min(avgs) if avgs else None
    peak_note = f"; peak {', '.join(_fmt(p) for p in peaks)} GB/s" if peaks else ""
    if not finished:
        return Criterion("bandwidth", None, "not judged: no run finished")
    if gbps is None:
        return Criterion("bandwidth", False, f"{threshold.source} (give --var min_busbw=GBPS)")
    if low is None:
        return Criterion("bandwidth", False, "no `# Avg bus bandwidth` line in a finished run")
    return Criterion("bandwidth", low >= gbps,
                     f"lowest average busbw {low:.1f} GB/s {'≥' if low >= gbps else '<'} "
                     f"{gbps:g} GB/s ({threshold.source}){peak_note}")  # fmt: skip


def _stable(avgs: list[float], spread: float | None, max_spread_pct: float) -> Criterion:
    """The spread of the runs' average bus bandwidth (not judged with fewer than two)."""
    return Criterion(
        "stable", None if spread is None else spread <= max_spread_pct,
        f"not judged: {len(avgs)} run(s) with a bandwidth" if spread is None else
        f"average busbw {', '.join(_fmt(a) for a in avgs)} GB/s: spread {spread:.1f} % "
        f"({'≤' if spread <= max_spread_pct else '>'} {max_spread_pct:g} %)",
    )  # fmt: skip


def _transport(facts: list[dict[str, Any]], kinds: list[str], networks: list[str]) -> Criterion:
    """The NCCL INFO lines name the transports NCCL chose (and whether the runs differ)."""
    per_run = [tuple(f["nccl"]["transport_kinds"]) for f in facts]
    return Criterion(
        "transport", bool(kinds),
        (f"NCCL chose {', '.join(kinds)}" + (f", network {', '.join(networks)}" if networks
                                              else "")
         + ("; runs differ: " + " / ".join(",".join(k) or "-" for k in per_run)
            if len(set(per_run)) > 1 else ""))
        if kinds else "no NCCL INFO transport line (was NCCL_DEBUG=INFO honoured?)",
    )  # fmt: skip


def _fixed_set(
    facts: list[dict[str, Any]], expect: Expectation
) -> tuple[dict[str, Any], Criterion]:
    """Multi-node: the runs spanned the fixed nodes, NICs and NCCL version (the report, and
    the criterion)."""
    fixed, problems = fixed_set_report(
        requested_nodes=expect.nodes,
        requested_hosts=expect.hosts,
        requested_nics=expect.nics,
        requested_version=expect.nccl_version,
        gid_index=expect.gid_index,
        seen_hosts=sorted({h for f in facts for h in f["nccl"]["hosts"]}),
        seen_nnodes=max((f["nccl"]["nnodes"] or 0 for f in facts), default=0) or None,
        ib_devices=sorted({d for f in facts for d in f["nccl"]["ib_devices"]}),
        versions=sorted({v for f in facts for v in f["nccl"]["versions"]}),
        ports=expect.ports,
    )
    return fixed, Criterion(
        "fixed-set",
        not problems,
        "; ".join(problems)
        or (
            f"{len(fixed['hosts'])} nodes ({', '.join(fixed['hosts'])}), NICs "  # type: ignore[arg-type]
            f"{', '.join(fixed['nics']) or '-'}, NCCL {', '.join(fixed['nccl_versions']) or '?'}"  # type: ignore[arg-type]
        ),
    )


def _cause(
    failed: str | None,
    facts: list[dict[str, Any]],
    expect: Expectation,
    kinds: list[str],
    ranks: int | None,
) -> str:
    if failed is None:
        return "healthy"
    if failed == "completed":
        bad = [f for f in facts if _incomplete(f, ranks) and not f["timed_out"]]
        return _cause_of_incomplete(bad)
    if failed == "correct":
        return "gpu-hardware"
    if failed == "bandwidth" and expect.threshold.known:
        if expect.topology == "nvlink" and expect.nodes <= 1 and "P2P" not in kinds and kinds:
            return "p2p-unavailable"
        if expect.nodes > 1 and "NET/Socket" in kinds and "NET/IB" not in kinds:
            return "rdma-misconfigured"
    return "inconclusive"


def _evidence(failed: str | None, facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines a failed criterion rests on (for the verdict's chain)."""
    out: list[dict[str, Any]] = []
    for f in facts:
        if failed == "completed":
            if f.get("unmeasured"):
                out.append(
                    {
                        "source": f["source"],
                        "line": f["unmeasured_line"] or 1,
                        "text": f"measured nothing about the fabric: {f['unmeasured']}",
                    }
                )
            out.extend(
                {k: w[k] for k in ("source", "line", "text") if w.get(k) is not None}
                for w in f["failures"] + f["nccl"]["warns"]
            )
        elif failed == "correct":
            out.extend({"source": f["source"], "line": line} for line in f["wrong_rows"])
    if not out and failed:
        out = [{"source": f["source"], "text": f"{failed} failed"} for f in facts[:1]]
    return out[:20]
