"""The job merge, pure: clock offsets, the corrected first anomaly, shared causes, outliers,
the rank table and the job's host memory, on node verdicts in the DESIGN §5 shape."""

from __future__ import annotations

import datetime as dt
from typing import Any

from runbook.job.clock import ClockSample, best_offset, parse_epoch
from runbook.job.merge import merge_job, outliers, shared_cause
from runbook.job.models import JobNode, JobSpec, RankSpec
from runbook.render.job_markdown import job_markdown
from runbook.sweep.inventory import HostEntry
from runbook.sweep.results import HostResult, HostStatus
from runbook.verdict import Verdict

T0 = dt.datetime(2026, 11, 30, 3, 0, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat()


def node_verdict(
    node: str,
    *,
    cause: str | None = None,
    cause_at: float | None = None,
    errors: dict[int, float] | None = None,
    silent: tuple[int, ...] = (),
    stages: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A node verdict: one cause finding at `cause_at` (node clock) in dmesg, and each rank's
    first error at its time in app/rank-N.log."""
    chain, timeline = [], []
    if cause is not None and cause_at is not None:
        ev = {"source": "dmesg.txt", "line": 7, "time": at(cause_at)}
        chain.append(
            {"stage": "kernel-logs", "finding": f"{cause} here", "cause": cause, "evidence": [ev]}
        )
        timeline.append({**ev, "text": f"{cause} line", "anomaly": True, "stage": "kernel-logs"})
    ranks = []
    for rank, when in (errors or {}).items():
        err = {
            "source": f"app/rank-{rank}.log",
            "line": 3,
            "time": at(when),
            "rank": rank,
            "text": "ncclCommInitRank failed: unhandled cuda error",
            "category": "nccl-init",
        }
        ranks.append(
            {"rank": rank, "source": err["source"], "first_error": err, "first_time": at(when - 20)}
        )
        timeline.append(
            {
                **{k: err[k] for k in ("source", "line", "time", "text")},
                "anomaly": False,
                "stage": "app-error",
            }
        )
    for rank in silent:
        ranks.append(
            {
                "rank": rank,
                "source": f"app/rank-{rank}.log",
                "first_error": None,
                "first_time": at(-30),
            }
        )
    surfaced = max(
        (r["first_error"] for r in ranks if r["first_error"]), key=lambda e: e["time"], default=None
    )
    facts: dict[str, dict[str, Any]] = {
        "applog": {
            "collected": True,
            "ranks": ranks,
            "silent_ranks": list(silent),
            "surfaced": surfaced,
        },
        **(stages or {}),
    }
    if cause == "host-memory-oom" and cause_at is not None:
        facts["dmesg"] = {
            "collected": True,
            "memcg_ooms": [
                {
                    "source": "dmesg.txt",
                    "line": 7,
                    "time": at(cause_at),
                    "killed_pid": 4242,
                    "kill_line": 19,
                }
            ],
        }
    return {
        "format": 1,
        "node": node,
        "root_cause": cause or "inconclusive",
        "confidence": "high",
        "chain": chain,
        "timeline": timeline,
        "ruled_out": [],
        "proposals": [],
        "stages": [
            {"id": name, "status": "ok", "facts": {name: value}} for name, value in facts.items()
        ],
    }


def result(
    node: str, verdict: dict[str, Any] | None, offset: float = 0.0, uncertainty: float = 0.002
) -> HostResult:
    return HostResult(
        node,
        f"ssh://root@{node}",
        HostStatus.FINDING if verdict else HostStatus.UNREACHABLE,
        verdict=Verdict.from_json(verdict) if verdict else None,
        error=None if verdict else "connection refused",
        clock={
            "offset_s": offset,
            "uncertainty_s": uncertainty,
            "samples": 5,
            "rtt_s": 2 * uncertainty,
        },
    )


def spec_of(*nodes: tuple[str, tuple[int, ...]]) -> JobSpec:
    return JobSpec(
        "hosts",
        "test",
        nodes=tuple(
            JobNode(name, HostEntry(name, f"ssh://root@{name}"), ranks) for name, ranks in nodes
        ),
        ranks=tuple(RankSpec(r, name) for name, ranks in nodes for r in ranks),
    )


def test_the_offset_is_taken_from_the_shortest_round_trip_and_bounded_by_half_of_it() -> None:
    samples = [
        ClockSample(100.0, 160.05, 100.1),
        ClockSample(200.0, 260.002, 200.004),
        ClockSample(300.0, 359.0, 302.0),
    ]
    best = best_offset(samples)
    assert best is not None
    assert round(best.offset_s, 6) == 60.0 and round(best.uncertainty_s, 6) == 0.002
    assert best.samples == 3 and best_offset([]) is None
    assert parse_epoch("1764471600.123456789\n") == 1764471600.123456789
    assert parse_epoch("1764471600.N\n") == 1764471600.0  # a date without %N
    assert parse_epoch("date: invalid option") is None


def test_the_earliest_anomaly_is_found_on_the_corrected_axis_not_the_raw_one() -> None:
    """node-3's clock runs 300 s fast: its OOM reads latest by its own clock and is the first
    event of the job once corrected; node-2's clock runs 30 s slow, so its socket error reads
    earliest raw."""
    spec = spec_of(("node-1", (0, 1)), ("node-2", (2, 3)), ("node-3", (4, 5)))
    results = [
        result("node-1", node_verdict("node-1", errors={0: 41.0, 1: 40.0})),
        result(
            "node-2",
            node_verdict("node-2", cause="network-socket", cause_at=8.0, errors={2: 8.0}),
            offset=-30.0,
        ),
        result(
            "node-3",
            node_verdict(
                "node-3", cause="host-memory-oom", cause_at=300.0, errors={4: 338.0}, silent=(5,)
            ),
            offset=300.0,
        ),
    ]
    verdict = merge_job(spec, results)
    assert verdict["root_cause"] == "host-memory-oom" and verdict["scope"] == "node"
    first = verdict["first_anomaly"]
    assert first["node"] == "node-3" and first["time"].startswith("2026-11-30T03:00:00.000")
    assert first["node_time"].startswith("2026-11-30T03:05:00") and first["offset_s"] == 300.0
    assert [c["node"] for c in verdict["chain"]] == ["node-3", "node-2"]
    # rank 5 logged nothing on the node whose own cgroup OOM-killed: inferred, and named
    rank5 = next(r for r in verdict["ranks"] if r["rank"] == 5)
    assert rank5["exit"]["oom_killed"] and rank5["exit"]["inferred"]
    assert verdict["statement"].startswith("rank 5 on node-3 was OOM-killed at 2026-11-30T03")
    assert "41 s before rank 0 on node-1 reported ncclCommInitRank failed" in verdict["statement"]
    # the timeline is on the collector's clock, each entry keeping its node's own time
    times = [e["time"] for e in verdict["timeline"]]
    assert times == sorted(times) and verdict["timeline"][0]["node"] == "node-3"
    # uncorrected, node-2's socket error would have come first
    raw = merge_job(
        spec, [HostResult(r.host, r.target, r.status, verdict=r.verdict) for r in results]
    )
    assert raw["first_anomaly"]["node"] == "node-2" and raw["root_cause"] == "network-socket"
    assert raw["confidence"] != "high"  # clocks not measured
    md = job_markdown(verdict)
    assert "| 5 | node-3 |" in md and "+300.000 s ± 2.0 ms" in md


def test_many_nodes_failing_the_same_way_at_one_instant_is_one_shared_cause() -> None:
    spec = spec_of(*((f"node-{i}", (i,)) for i in range(4)))
    results = [
        result(
            f"node-{i}",
            node_verdict(
                f"node-{i}", cause="network-socket", cause_at=10.0 + 0.3 * i + off, errors={i: 11.0}
            ),
            offset=off,
        )
        for i, off in enumerate((0.0, 120.0, -45.0, 7.5))
    ]
    verdict = merge_job(spec, results)
    assert verdict["scope"] == "shared" and verdict["root_cause"] == "network-socket"
    assert verdict["shared_cause"]["nodes"] == [f"node-{i}" for i in range(4)]
    assert verdict["shared_cause"]["span_s"] == 0.9
    assert "rather than a fault on each node" in verdict["statement"]
    # spread over minutes, the same failures are separate node faults
    apart = [
        result(
            f"node-{i}",
            node_verdict(f"node-{i}", cause="network-socket", cause_at=60.0 * i, errors={i: 300.0}),
        )
        for i in range(4)
    ]
    assert merge_job(spec, apart)["scope"] == "node"
    assert shared_cause({}, 4, 0.0) is None


def test_a_node_that_differs_from_its_peers_is_an_outlier() -> None:
    def gpu(driver: str, xids: int, kinds: list[str], busbw: float) -> dict[str, Any]:
        return {
            "nvidia_smi": {"collected": True, "driver_version": driver},
            "dmesg": {"collected": True, "xids": [{}] * xids, "aer": []},
            "nccl_log": {"collected": True, "transport_kinds": kinds},
            "nccl_tests": {"collected": True, "runs": {"a.txt": {"avg_busbw": busbw}}},
        }

    results = [
        result(f"n{i}", node_verdict(f"n{i}", stages=gpu(*args)))
        for i, args in enumerate(
            [
                ("575.57.08", 0, ["P2P"], 180.0),
                ("575.57.08", 0, ["P2P"], 182.0),
                ("570.86.15", 0, ["P2P"], 181.0),
                ("575.57.08", 12, ["SHM"], 60.0),
            ]
        )
    ]
    found = {(o["node"], o["measure"]) for o in outliers(results)}
    assert found == {("n2", "driver"), ("n3", "xid"), ("n3", "transport"), ("n3", "busbw")}


def test_the_job_memory_puts_per_rank_cost_times_ranks_against_each_limit() -> None:
    cg = {
        "cgroup": {
            "collected": True,
            "peak_bytes": 4 << 30,
            "limit_bytes": 4 << 30,
            "usage_at_limit": True,
            "oom_kills": 1,
        }
    }
    ok = {
        "cgroup": {
            "collected": True,
            "peak_bytes": 3 << 30,
            "limit_bytes": 8 << 30,
            "usage_at_limit": False,
            "oom_kills": 0,
        }
    }
    spec = spec_of(("a", (0, 1)), ("b", (2, 3)))
    memory = merge_job(
        spec, [result("a", node_verdict("a", stages=ok)), result("b", node_verdict("b", stages=cg))]
    )["memory"]
    assert memory["at_limit"] == ["b"] and memory["ranks"] == 4
    assert memory["per_rank_max_bytes"] == 2 << 30 and memory["estimate_bytes"] == 8 << 30
    assert memory["job_peak_bytes"] == 7 << 30


def test_an_unreached_node_is_reported_and_lowers_the_confidence() -> None:
    spec = spec_of(("a", (0,)), ("b", (1,)))
    verdict = merge_job(
        spec,
        [
            result("a", node_verdict("a", cause="host-memory-oom", cause_at=1.0, errors={0: 5})),
            result("b", None),
        ],
    )
    assert verdict["root_cause"] == "host-memory-oom" and verdict["confidence"] == "medium"
    assert [n["status"] for n in verdict["nodes"]] == ["finding", "unreachable"]


def test_live_processes_give_the_per_rank_cost_with_its_workers() -> None:
    """When the node still had the ranks, a rank costs its own anon plus its workers'."""
    live = {
        "cgroup": {"collected": True, "peak_bytes": 6 << 30, "limit_bytes": 8 << 30},
        "procmem": {
            "collected": True,
            "ranks": 2,
            "per_rank": {
                "group_anon_bytes": {"max": 3 << 30},
                "pss_anon_bytes": {"max": 1 << 30},
                "workers": {"max": 4},
            },
            "per_worker": {"own_anon_bytes": {"max": 512 << 20}},
        },
    }
    spec = spec_of(("a", (0, 1)), ("b", (2, 3)))
    memory = merge_job(spec, [result("a", node_verdict("a", stages=live))])["memory"]
    (row,) = memory["nodes"]
    assert row["per_rank_bytes"] == 3 << 30 and row["workers_per_rank"] == 4
    assert row["worker_bytes"] == 512 << 20 and row["method"].startswith("processes")
    assert memory["estimate_bytes"] == (3 << 30) * 2


def _with_link(verdict: dict[str, Any], link: dict[str, Any]) -> dict[str, Any]:
    verdict["chain"].append(link)
    return verdict


def test_the_job_merge_ranks_untimed_node_evidence_with_the_node_verdicts_own_order() -> None:
    """node-1's only blame is an untimed CUDA OOM a rank printed (no timestamps in its log);
    node-2 lost its peer at a known time, which blames nothing: the job's first anomaly is
    node-1's OOM, not dropped for want of a time (the same causal order as a node verdict)."""
    spec = spec_of(("node-1", (0,)), ("node-2", (1,)))
    oom = {
        "stage": "app-error", "finding": "rank 0 ran out of GPU memory", "cause": "gpu-memory-oom",
        "role": "local-error", "evidence": [{"source": "app/rank-0.log", "line": 12}],
    }  # fmt: skip
    lost = {
        "stage": "app-error", "finding": "rank 1 lost its peer", "role": "peer-consequence",
        "cause": "network-socket",
        "evidence": [{"source": "app/rank-1.log", "line": 3, "time": at(5.0)}],
    }  # fmt: skip
    results = [
        result("node-1", _with_link(node_verdict("node-1"), oom)),
        result("node-2", _with_link(node_verdict("node-2"), lost)),
    ]
    verdict = merge_job(spec, results)
    assert verdict["root_cause"] == "gpu-memory-oom", verdict["chain"]
    assert verdict["first_anomaly"]["node"] == "node-1"
    assert verdict["first_anomaly"]["time"] is None


def test_a_timed_cause_on_one_node_goes_before_an_untimed_one_on_another() -> None:
    spec = spec_of(("node-1", (0,)), ("node-2", (1,)))
    untimed = {
        "stage": "app-error", "finding": "rank 0 could not get /dev/shm", "cause": "shm-exhausted",
        "role": "local-error", "evidence": [{"source": "app/rank-0.log", "line": 2}],
    }  # fmt: skip
    results = [
        result("node-1", _with_link(node_verdict("node-1"), untimed)),
        result("node-2", node_verdict("node-2", cause="gpu-hardware", cause_at=9.0)),
    ]
    assert merge_job(spec, results)["root_cause"] == "gpu-hardware"


def _unrecognized_node(node: str, when: float) -> dict[str, Any]:
    """A node verdict whose first anomaly is a NCCL WARN no signature names (as
    runbook.diagnosis writes it: the chain's first link, and the `unrecognized` field)."""
    text = f"{node}:4242:4260 [0] misc/nvmlwrap.cc:71 NCCL WARN nvmlFoo() failed: Mystery"
    ev = {"source": "nccl/nccl.log", "line": 9, "time": at(when)}
    verdict = node_verdict(node)
    verdict["chain"].append({
        "stage": "app-error", "finding": f"unrecognized: {text}", "role": "local-error",
        "evidence": [ev],
    })  # fmt: skip
    verdict["unrecognized"] = {"source": "nccl/nccl.log", "line": 9, "text": text}
    return verdict


def _consequence_node(node: str, when: float) -> dict[str, Any]:
    lost = {
        "stage": "app-error", "finding": "rank 1 lost its peer", "role": "peer-consequence",
        "cause": "network-socket",
        "evidence": [{"source": "app/rank-1.log", "line": 3, "time": at(when)}],
    }  # fmt: skip
    return _with_link(node_verdict(node, errors={1: when}), lost)


def test_a_line_no_signature_names_before_a_peers_consequence_is_the_jobs_first_anomaly() -> None:
    """node-1 logged a WARN nobody catalogued at 3 s; node-2 then lost its peer at 5 s
    (a consequence, which blames nothing): the job names node-1's line as its first anomaly
    and says `unrecognized`, as the node verdict does, instead of 'no node named a cause'."""
    spec = spec_of(("node-1", (0,)), ("node-2", (1,)))
    results = [
        result("node-1", _unrecognized_node("node-1", 3.0)),
        result("node-2", _consequence_node("node-2", 5.0)),
    ]
    verdict = merge_job(spec, results)
    assert verdict["root_cause"] == "inconclusive"
    assert verdict["node"] == "node-1"
    first = verdict["first_anomaly"]
    assert (first["node"], first["source"], first["line"]) == ("node-1", "nccl/nccl.log", 9)
    assert "NCCL WARN nvmlFoo() failed: Mystery" in first["text"]
    assert verdict["unrecognized"]["node"] == "node-1"
    assert verdict["unrecognized"]["text"].endswith("NCCL WARN nvmlFoo() failed: Mystery")
    assert verdict["statement"].startswith("node-1 logged a line no signature names"), verdict
    assert "2 s later rank 1 on node-2 reported the failure" in verdict["statement"]
    assert [c["node"] for c in verdict["chain"]] == ["node-1"]
    md = job_markdown(verdict)
    assert "First anomaly across the job: node-1" in md and "[no cause] unrecognized:" in md


def test_a_line_no_signature_names_after_a_peers_consequence_is_not_the_first() -> None:
    """Corrected clocks decide: node-1's line reads 3 s on a clock 4 s slow (7 s corrected),
    after node-2's consequence at 5 s: no `unrecognized` for the job (it did not come
    first), the statement as before. By the raw clocks it would have been first."""
    spec = spec_of(("node-1", (0,)), ("node-2", (1,)))
    results = [
        result("node-1", _unrecognized_node("node-1", 3.0), offset=-4.0),
        result("node-2", _consequence_node("node-2", 5.0)),
    ]
    verdict = merge_job(spec, results)
    assert verdict["root_cause"] == "inconclusive"
    assert "unrecognized" not in verdict and verdict["first_anomaly"] is None
    assert verdict["statement"] == "no node named a cause"
    raw = merge_job(
        spec, [HostResult(r.host, r.target, r.status, verdict=r.verdict) for r in results]
    )
    assert raw["unrecognized"]["node"] == "node-1"
