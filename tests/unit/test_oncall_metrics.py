"""The pure parts of what reaches on-call: runbook.prom's success rule and the queue's metrics
(valid exposition, every kind and severity, expiry), which notices are due, and how a webhook
URL may be shown."""

from __future__ import annotations

from dataclasses import dataclass

from runbook import metrics, notify
from runbook.oncall import due_notices
from runbook.render import sweep_prometheus as report_prom
from runbook.sweep.results import NOT_SWEPT, HostResult, HostStatus, SweepResult
from runbook.verdict import Verdict
from tests.sweep.helpers import parse_prom

LAST_SUCCESS = "runbook_sweep_last_success_timestamp_seconds"


def sweep_of(*statuses: HostStatus, finished: float = 1000.0) -> SweepResult:
    hosts = [
        HostResult(f"h{i}", "ssh://root@h:22", s, 1.0,
                   verdict=None if s in NOT_SWEPT else Verdict(f"h{i}", "healthy", "high"))
        for i, s in enumerate(statuses)
    ]
    return SweepResult("rb", "inv", hosts, "a", "b", 2.0, finished_ts=finished)


def test_a_sweep_that_reached_one_host_is_a_success() -> None:
    samples = parse_prom(report_prom.render(sweep_of(HostStatus.UNREACHABLE, HostStatus.HEALTHY)))
    assert samples[LAST_SUCCESS] == [({}, 1000.0)]
    assert samples["runbook_sweep_last_run_reached_hosts"] == [({}, 1.0)]
    assert samples["runbook_sweep_host_not_swept"] == [
        ({"node": "h0", "status": "unreachable"}, 1.0)
    ]


def test_a_sweep_of_no_host_or_only_failures_keeps_the_previous_success_or_has_none() -> None:
    failures = (HostStatus.UNREACHABLE, HostStatus.ERROR, HostStatus.TIMEOUT)
    for sweep in (sweep_of(), sweep_of(*failures)):
        assert not report_prom.reached_hosts(sweep)
        assert LAST_SUCCESS not in parse_prom(report_prom.render(sweep))
        kept = parse_prom(report_prom.render(sweep, previous=400.0))
        assert kept[LAST_SUCCESS] == [({}, 400.0)]
        assert kept["runbook_sweep_last_run_timestamp_seconds"] == [({}, 1000.0)]


def test_the_last_success_never_moves_backwards_and_is_read_from_earlier_files() -> None:
    earlier = report_prom.render(sweep_of(HostStatus.HEALTHY, finished=5000.0))
    previous = report_prom.previous_success(["garbage\n", earlier])
    assert previous == 5000.0
    later = parse_prom(report_prom.render(sweep_of(HostStatus.HEALTHY), previous=previous))
    assert later[LAST_SUCCESS] == [({}, 5000.0)]  # a merge of older shards moves nothing back


@dataclass
class P:
    id: str
    kind: str
    root_cause: str | None
    created_at: float
    expires_at: float


def test_the_queue_metrics_count_every_kind_and_severity_and_what_expired() -> None:
    pending = [
        P("p1", "node-drain", "gpu-hardware", 100.0, 200.0),
        P("p2", "shm-size-limit", "shm-exhausted", 50.0, 900.0),
        P("p3", "future-kind", None, 300.0, 1300.0),
    ]
    samples = parse_prom(metrics.render_approvals(pending, now=250.0))
    counts = {(lb["kind"], lb["severity"]): v for lb, v in samples["runbook_approvals_pending"]}
    assert len(counts) == 5 * 3  # the four queued kinds and the unknown one, each severity
    assert counts[("node-drain", "critical")] == 1
    assert counts[("shm-size-limit", "warning")] == 1
    assert counts[("future-kind", "info")] == 1
    assert sum(counts.values()) == 3
    expired = {lb["kind"]: v for lb, v in samples["runbook_approvals_pending_expired"]}
    assert expired["node-drain"] == 1 and sum(expired.values()) == 1
    assert samples["runbook_approvals_oldest_pending_created_timestamp_seconds"] == [({}, 50.0)]
    assert samples["runbook_approvals_next_expiry_timestamp_seconds"] == [({}, 200.0)]


def test_notices_due_queued_once_and_expiring_within_the_window() -> None:
    fresh = P("p1", "memory-limit", "host-memory-oom", 0.0, 86400.0)
    closing = P("p2", "memory-limit", "host-memory-oom", 0.0, 5000.0)
    expired = P("p3", "memory-limit", "host-memory-oom", 0.0, 500.0)
    due = due_notices([fresh, closing, expired], {("p2", "queued")}, now=1000.0, window=7200.0)
    assert [(p.id, n) for p, n in due] == [
        ("p1", "queued"), ("p2", "expiring"), ("p3", "expiring")  # expired: no "queued" now
    ]
    assert due_notices([closing], {("p2", "queued"), ("p2", "expiring")},
                       now=1000.0, window=7200.0) == []


def test_a_webhook_url_is_shown_without_its_path_or_query() -> None:
    url = "https://hooks.slack.com:8443/services/T0/B0/s3cr3t?token=abc"
    assert notify.shown_url(url) == "https://hooks.slack.com:8443/…"


def test_an_earlier_file_is_read_but_never_through_a_link(tmp_path) -> None:  # type: ignore[no-untyped-def]
    real = tmp_path / "real.prom"
    real.write_text(f"{LAST_SUCCESS} 77\n")
    (tmp_path / "linked.prom").symlink_to(real)
    texts = metrics.read_previous([tmp_path / "linked.prom", real, tmp_path / "absent.prom"])
    assert texts == [f"{LAST_SUCCESS} 77\n"]
