"""runbook.prom: the sweep in the Prometheus text exposition format, for node_exporter's
textfile collector (write it into `--collector.textfile.directory`; reports.py replaces it
atomically, as the collector requires). Pure.

    runbook_sweep_hosts{status="…"}                    hosts per outcome (every status, 0s too)
    runbook_root_cause{node="…",cause="…"} 1           one series per swept node (healthy too:
                                                       alert on cause!="healthy")
    runbook_sweep_duration_seconds                     wall time of the sweep
    runbook_sweep_last_success_timestamp_seconds       unix time it finished (alert when stale)
"""

from __future__ import annotations

from runbook.sweep.results import Status, SweepResult


def label_value(text: str) -> str:
    """Escaped as the exposition format requires: backslash, double quote, newline."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def render(sweep: SweepResult) -> str:
    counts = sweep.counts()
    lines = [
        "# HELP runbook_sweep_hosts Hosts of the last runbook sweep, by outcome.",
        "# TYPE runbook_sweep_hosts gauge",
        *(f'runbook_sweep_hosts{{status="{s.value}"}} {counts[s.value]}' for s in Status),
        "# HELP runbook_root_cause Root cause the last sweep found on a node (1 per swept node).",
        "# TYPE runbook_root_cause gauge",
    ]
    for host in sorted(sweep.hosts, key=lambda h: h.host):
        if host.verdict is None:
            continue
        lines.append(
            f'runbook_root_cause{{node="{label_value(host.host)}",'
            f'cause="{label_value(host.root_cause or "inconclusive")}"}} 1'
        )
    lines += [
        "# HELP runbook_sweep_duration_seconds Wall time of the last runbook sweep.",
        "# TYPE runbook_sweep_duration_seconds gauge",
        f"runbook_sweep_duration_seconds {_number(round(sweep.duration_s, 3))}",
        "# HELP runbook_sweep_last_success_timestamp_seconds Unix time the last runbook sweep "
        "finished.",
        "# TYPE runbook_sweep_last_success_timestamp_seconds gauge",
        f"runbook_sweep_last_success_timestamp_seconds {_number(round(sweep.finished_ts, 3))}",
    ]
    return "\n".join(lines) + "\n"
