"""Causal ranking (runbook.causal.causal_order), table-driven: which anomaly came first."""

from __future__ import annotations

import itertools

import pytest

from runbook.causal import causal_order


def ev(name: str, role: str, time: str | None = None, source: str = "app/a.log", line: int = 1,
       **extra: object) -> dict[str, object]:  # fmt: skip
    return {"name": name, "role": role, "time": time, "source": source, "line": line, **extra}


T0, T1, T2 = "2025-03-04T10:00:00", "2025-03-04T10:00:05", "2025-03-04T10:00:09"

CASES = [
    # timed evidence: earliest first, whatever the role
    ("timed by time", [ev("oom", "cause", T1), ev("exc", "local-error", T0)], ["exc", "oom"]),
    # untimed: by role, then file and line — a peer's lost connection logged above the local
    # rank's CUDA OOM does not win
    ("untimed by role",
     [ev("peer", "peer-consequence", line=3), ev("oom", "local-error", line=9)], ["oom", "peer"]),
    ("untimed same role by file and line",
     [ev("b", "local-error", source="app/b.log"), ev("a", "local-error", source="app/a.log")],
     ["a", "b"]),
    # an untimed cause goes before timed lost peers, never before a timed cause
    ("untimed cause before timed consequence",
     [ev("lost", "peer-consequence", T0), ev("xid", "cause")], ["xid", "lost"]),
    ("untimed cause after an earlier timed cause",
     [ev("aer", "cause", T0, source="dmesg.txt"), ev("cg", "cause", source="cgroup/x")],
     ["aer", "cg"]),
    ("a weak timed head does not let untimed errors jump a timed cause",
     [ev("ctx", "context", T0), ev("oom", "cause", T1), ev("silent", "surfaced")],
     ["ctx", "oom", "silent"]),
    # an untimed line above a timed line of the same role in the same file came first
    ("same file: position", [ev("late", "surfaced", T2, line=8), ev("early", "surfaced", line=6)],
     ["early", "late"]),
    # a time inferred from an earlier line is no time
    ("inferred time is untimed",
     [ev("a", "cause", T0, line=7, time_inferred=True), ev("b", "cause", line=1)], ["b", "a"]),
]  # fmt: skip


@pytest.mark.parametrize(("why", "items", "want"), CASES, ids=[c[0] for c in CASES])
def test_causal_order(why: str, items: list[dict[str, object]], want: list[str]) -> None:
    assert [i["name"] for i in causal_order(items)] == want


@pytest.mark.parametrize(("why", "items", "want"), CASES, ids=[c[0] for c in CASES])
def test_the_order_does_not_depend_on_the_input_order(
    why: str, items: list[dict[str, object]], want: list[str]
) -> None:
    for perm in itertools.permutations(items):
        assert [i["name"] for i in causal_order(list(perm))] == want


def test_naive_times_take_the_node_zone() -> None:
    import datetime as dt

    plus2 = dt.timezone(dt.timedelta(hours=2))
    items = [
        ev("utc", "cause", "2025-03-04T09:00:01+00:00"),
        ev("local", "cause", "2025-03-04T11:00:00"),
    ]
    assert [i["name"] for i in causal_order(items, local=plus2)] == ["local", "utc"]
