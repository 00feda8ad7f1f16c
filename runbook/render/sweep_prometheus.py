"""runbook.prom: the sweep in the Prometheus text exposition format, for node_exporter's
textfile collector (written into `--textfile-dir` and the report directory; reports.py replaces
it atomically, as the collector requires). Pure: what the previous file said comes in as an
argument.

    runbook_sweep_hosts{status="…"}                    hosts per outcome (every status, 0s too)
    runbook_root_cause{node="…",cause="…"} 1           one series per swept node (healthy too:
                                                       alert on cause!="healthy")
    runbook_sweep_host_not_swept{node="…",status="…"} 1
                                                       one series per host the sweep did not
                                                       analyse (unreachable, refused, timeout,
                                                       error)
    runbook_sweep_missing_shards                       shards a merge lacked (0 for a sweep)
    runbook_sweep_duration_seconds                     wall time of the sweep
    runbook_sweep_last_run_timestamp_seconds           unix time it finished, whatever it found
    runbook_sweep_last_run_reached_hosts               1 if this run reached its hosts, else 0
    runbook_sweep_last_success_timestamp_seconds       unix time the last sweep that reached its
                                                       hosts finished (alert when stale)

A sweep *reached its hosts* when at least one host was reached and analysed — it has a
verdict (healthy, finding or inconclusive). A sweep in which every host was unreachable,
refused, timed out or errored, or that had no host at all, did not: it moves the last-run
timestamp and leaves the last-success one where the last sweep that did put it (carried over
from the file it replaces; absent when no earlier success is known), so a staleness alert
fires for a fleet that cannot be reached.
"""

from __future__ import annotations

from collections.abc import Iterable

from runbook.metrics import label_value, number, sample
from runbook.sweep.results import NOT_SWEPT, HostStatus, SweepResult

__all__ = ["LAST_SUCCESS", "label_value", "previous_success", "reached_hosts", "render"]

LAST_SUCCESS = "runbook_sweep_last_success_timestamp_seconds"


def reached_hosts(sweep: SweepResult) -> bool:
    """At least one host analysed (a verdict); see the module docstring."""
    return any(h.status not in NOT_SWEPT for h in sweep.hosts)


def previous_success(texts: Iterable[str]) -> float | None:
    """The latest last-success timestamp the earlier metrics files hold, if any."""
    values = [v for v in (sample(t, LAST_SUCCESS) for t in texts) if v is not None]
    return max(values) if values else None


def render(sweep: SweepResult, *, previous: float | None = None) -> str:
    """The sweep's metrics; `previous`: the last success an earlier file recorded (kept when
    this sweep did not reach its hosts, and never moved backwards)."""
    counts = sweep.counts()
    lines = [
        "# HELP runbook_sweep_hosts Hosts of the last runbook sweep, by outcome.",
        "# TYPE runbook_sweep_hosts gauge",
        *(f'runbook_sweep_hosts{{status="{s.value}"}} {counts[s.value]}' for s in HostStatus),
        "# HELP runbook_root_cause Root cause the last sweep found on a node (1 per swept node).",
        "# TYPE runbook_root_cause gauge",
    ]
    ordered = sorted(sweep.hosts, key=lambda h: h.host)
    for host in ordered:
        if host.verdict is None:
            continue
        lines.append(
            f'runbook_root_cause{{node="{label_value(host.host)}",'
            f'cause="{label_value(host.root_cause or "inconclusive")}"}} 1'
        )
    lines += [
        "# HELP runbook_sweep_host_not_swept A host the last sweep did not analyse, by why "
        "(1 per host).",
        "# TYPE runbook_sweep_host_not_swept gauge",
        *(
            f'runbook_sweep_host_not_swept{{node="{label_value(h.host)}",'
            f'status="{h.status.value}"}} 1'
            for h in ordered
            if h.status in NOT_SWEPT
        ),
        "# HELP runbook_sweep_missing_shards Shards a merged sweep lacked.",
        "# TYPE runbook_sweep_missing_shards gauge",
        f"runbook_sweep_missing_shards {len(sweep.missing_shards)}",
        "# HELP runbook_sweep_duration_seconds Wall time of the last runbook sweep.",
        "# TYPE runbook_sweep_duration_seconds gauge",
        f"runbook_sweep_duration_seconds {number(round(sweep.duration_s, 3))}",
        "# HELP runbook_sweep_last_run_timestamp_seconds Unix time the last runbook sweep "
        "finished, whatever it reached.",
        "# TYPE runbook_sweep_last_run_timestamp_seconds gauge",
        f"runbook_sweep_last_run_timestamp_seconds {number(round(sweep.finished_ts, 3))}",
        "# HELP runbook_sweep_last_run_reached_hosts 1 if the last runbook sweep analysed at "
        "least one host, else 0.",
        "# TYPE runbook_sweep_last_run_reached_hosts gauge",
        f"runbook_sweep_last_run_reached_hosts {int(reached_hosts(sweep))}",
    ]
    success = sweep.finished_ts if reached_hosts(sweep) else None
    if previous is not None:
        success = max(previous, success) if success is not None else previous
    if success is not None:
        lines += [
            f"# HELP {LAST_SUCCESS} Unix time the last runbook sweep that reached its hosts "
            "finished.",
            f"# TYPE {LAST_SUCCESS} gauge",
            f"{LAST_SUCCESS} {number(round(success, 3))}",
        ]
    return "\n".join(lines) + "\n"
