"""The shipped monitoring holds together: Prometheus' own promtool accepts the rules file and
passes its unit tests (monitoring/prometheus/runbook-rules.test.yml: a sweep going stale, a
fleet never reached, hosts not swept, findings, a proposal waiting and expiring), and every
metric the rules and the Grafana dashboard query is one runbook writes (rendered here from
real results by the product's own renderers), so they cannot drift apart."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from runbook import metrics
from runbook.render import sweep_prometheus as report_prom
from runbook.sweep.results import NOT_SWEPT, HostResult, HostStatus, SweepResult
from runbook.verdict import Verdict

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "monitoring" / "prometheus" / "runbook-rules.yml"
RULES_TEST = REPO / "monitoring" / "prometheus" / "runbook-rules.test.yml"
DASHBOARD = REPO / "monitoring" / "grafana" / "runbook.json"
#: a metric name in a PromQL expression: runbook_… or a recording rule's runbook:…
_NAME = re.compile(r"(?<![\w:\"'])(runbook[_:][A-Za-z0-9_:]*)")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: tests/run.sh installs it (Debian's prometheus package)")
    return path


def test_promtool_accepts_the_rules_file() -> None:
    proc = subprocess.run([promtool(), "check", "rules", str(RULES)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_rules_pass_their_promtool_unit_tests() -> None:
    proc = subprocess.run([promtool(), "test", "rules", str(RULES_TEST)],
                          capture_output=True, text=True, timeout=120, cwd=RULES_TEST.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@dataclass
class _Pending:
    kind: str
    root_cause: str | None
    created_at: float
    expires_at: float


def written_names() -> set[str]:
    """Every metric name runbook writes: a sweep with a host of every status (and an earlier
    success to carry), and a queue with a pending proposal, through the real renderers."""
    hosts = [
        HostResult(f"h-{s.value}", "ssh://root@h:22", s, 1.0,
                   verdict=Verdict(f"h-{s.value}", "healthy", "high")
                   if s not in NOT_SWEPT
                   else None)
        for s in HostStatus
    ]
    sweep = SweepResult("nccl-init-failure", "inv", hosts, "a", "b", 1.0, finished_ts=100.0)
    pending = [_Pending("memory-limit", "host-memory-oom", 10.0, 50.0)]
    return metrics.metric_names(report_prom.render(sweep, previous=50.0)) | metrics.metric_names(
        metrics.render_approvals(pending, now=60.0)
    )


def rule_expressions() -> tuple[list[str], set[str]]:
    """The rules file's expressions and the names its recording rules define."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    return [str(r["expr"]) for r in rules], {str(r["record"]) for r in rules if "record" in r}


def dashboard_expressions() -> list[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in data["panels"] for t in p.get("targets", [])]
    for variable in data["templating"]["list"]:
        if variable.get("type") == "query":
            exprs.append(variable["definition"])
    return exprs


def test_every_metric_the_rules_and_the_dashboard_query_is_one_runbook_writes() -> None:
    written = written_names()
    exprs, recorded = rule_expressions()
    dash = dashboard_expressions()
    assert len(exprs) >= 10 and len(dash) >= 10  # the files were read, not skipped
    used_by_rules = {n for e in exprs for n in _NAME.findall(e)}
    used_by_dashboard = {n for e in dash for n in _NAME.findall(e)}
    assert used_by_rules - written - recorded == set()
    assert used_by_dashboard - written == set()  # the dashboard needs no recording rule
    # what on-call needs is in both: staleness, hosts not swept, findings, the queue
    for name in ("runbook_sweep_last_success_timestamp_seconds", "runbook_sweep_host_not_swept",
                 "runbook_root_cause", "runbook_approvals_oldest_pending_created_timestamp_seconds",
                 "runbook_approvals_next_expiry_timestamp_seconds"):
        assert name in used_by_rules, name
        assert name in used_by_dashboard, name
    assert "runbook_approvals_pending" in used_by_dashboard


def test_the_name_reader_sees_names_in_selectors_and_arithmetic() -> None:
    found = _NAME.findall('time() - runbook_x_seconds{instance=~"$i"} > 3 unless on(a) runbook:y')
    assert found == ["runbook_x_seconds", "runbook:y"]


def test_every_alert_reads_a_recorded_age_from_earlier_in_its_own_group() -> None:
    # rules of one group are evaluated in order; separate groups in either order, and an alert
    # could then read an age one evaluation old or none (promtool failed 1 run in 10 that way)
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        recorded: set[str] = set()
        for rule in group["rules"]:
            if "record" in rule:
                recorded.add(rule["record"])
                continue
            for name in _NAME.findall(str(rule["expr"])):
                assert ":" not in name or name in recorded, (rule["alert"], name)
