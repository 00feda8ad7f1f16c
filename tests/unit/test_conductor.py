"""The conductor walks, branches, records and serialises; the verdict names the earliest cause."""

from __future__ import annotations

import json

from runbook.conductor import Conductor, StageStatus
from runbook.diagnosis import build_verdict
from runbook.spec.models import END, Collect, Remedy, Rule, RuleOut, Runbook, Stage
from runbook.transports.base import CommandResult


def _result(name: str, stdout: str = "", exited: int | None = 0, **kw: object) -> CommandResult:
    return CommandResult(name, "cmd", stdout=stdout, exited=exited, **kw)  # type: ignore[arg-type]


def _runbook() -> Runbook:
    return Runbook(
        id="t",
        title="t",
        vars={"threshold": 1},
        stages=(
            Stage(
                "gpu",
                "GPU",
                collect=(Collect("gpu.txt", "nvidia-smi"),),
                parse=("keyvalue",),
                decide=(
                    Rule(
                        when="facts.keyvalue.xid > threshold",
                        finding="Xid {{ facts.keyvalue.xid }}",
                        cause="gpu-hardware",
                        evidence="facts.keyvalue.ev",
                        propose=("drain",),
                        next="nccl",
                    ),
                    Rule(rule_out=(RuleOut("gpu-hardware", "no Xid"),)),
                ),
            ),
            Stage(
                "memory",
                "memory",
                collect=(Collect("mem.txt", "cat x"),),
                parse=("keyvalue",),
                decide=(
                    Rule(when="facts.keyvalue.oom > 0", finding="oom", cause="host-memory-oom"),
                ),
            ),
            Stage("nccl", "NCCL", decide=(Rule(next=END),)),
            Stage("never", "never"),
        ),
        remedies=(
            Remedy(
                "drain",
                "node-drain",
                "Drain",
                summary="drain {{ node_name }}",
                params={"node": "{{ node_name }}"},
            ),
        ),
    )


def test_a_matching_rule_records_its_finding_and_routes_past_the_next_stage() -> None:
    conductor = Conductor(_runbook(), {"node_name": "n1"})
    assert conductor.next_stage().id == "gpu"  # type: ignore[union-attr]
    record = conductor.record(
        "gpu", {"gpu.txt": _result("gpu.txt", "xid=79")}, {"keyvalue": {"xid": 79}}
    )
    assert record.status is StageStatus.ANOMALY
    assert [f.text for f in record.findings] == ["Xid 79"]
    assert conductor.current == "nccl"
    assert record.reason.startswith("rule 1")
    conductor.record("nccl", {}, {})
    assert conductor.done
    verdict = build_verdict(conductor, node="n1")
    assert verdict.root_cause == "gpu-hardware"
    statuses = {s.id: s.status for s in verdict.stages}
    assert statuses == {"gpu": "anomaly", "memory": "skipped", "nccl": "ok", "never": "skipped"}
    assert verdict.proposals[0].kind == "node-drain"
    assert verdict.proposals[0].params == {"node": "n1"}
    assert verdict.proposals[0].requires_approval is True


def test_no_matching_route_falls_through_and_rule_outs_are_kept() -> None:
    conductor = Conductor(_runbook())
    conductor.record("gpu", {"gpu.txt": _result("gpu.txt", "xid=0")}, {"keyvalue": {"xid": 0}})
    assert conductor.current == "memory"
    conductor.record("memory", {"mem.txt": _result("mem.txt")}, {"keyvalue": {"oom": 0}})
    conductor.record("nccl", {}, {})
    verdict = build_verdict(conductor, node="n")
    assert verdict.root_cause == "healthy"
    assert [(r.cause, r.because) for r in verdict.ruled_out] == [("gpu-hardware", "no Xid")]


def test_the_earliest_timed_finding_is_the_root_cause_not_the_first_stage() -> None:
    conductor = Conductor(_runbook())
    late = {"source": "dmesg.txt", "line": 90, "time": "2026-03-04T10:12:31+00:00", "text": "x"}
    conductor.record("gpu", {"gpu.txt": _result("gpu.txt")}, {"keyvalue": {"xid": 79, "ev": late}})
    # route went to nccl; walk a second conductor that sees memory first with an earlier time
    c2 = Conductor(_runbook())
    c2.record("gpu", {"gpu.txt": _result("gpu.txt")}, {"keyvalue": {"xid": 0}})
    c2.record("memory", {"mem.txt": _result("mem.txt")}, {"keyvalue": {"oom": 1}})
    c2.records["memory"].findings[0].evidence = [
        {"source": "dmesg.txt", "line": 10, "time": "2026-03-04T10:12:01+00:00"}
    ]
    c2.records["gpu"].findings.append(
        type(c2.records["memory"].findings[0])("gpu", "Xid 79", "gpu-hardware", [late])
    )
    verdict = build_verdict(c2, node="n")
    assert verdict.root_cause == "host-memory-oom"
    assert verdict.first_anomaly is not None and verdict.first_anomaly.line == 10


def test_failed_probes_make_the_stage_an_error_and_the_verdict_inconclusive() -> None:
    conductor = Conductor(_runbook())
    conductor.record(
        "gpu",
        {"gpu.txt": _result("gpu.txt", exited=None, timed_out=True, duration=5.0)},
        {"keyvalue": {}},
    )
    assert conductor.records["gpu"].status is StageStatus.ERROR
    conductor.record("memory", {"mem.txt": _result("mem.txt", exited=127)}, {"keyvalue": {}})
    assert conductor.records["memory"].status is StageStatus.NOT_COLLECTED
    conductor.record("nccl", {}, {})
    verdict = build_verdict(conductor, node="n")
    assert verdict.root_cause == "inconclusive"
    collect_more = [p for p in verdict.proposals if p.kind == "collect-more"]
    assert collect_more and collect_more[0].params["stages"] == ["gpu", "memory"]


def test_a_probe_that_said_why_it_did_not_run_is_absent_evidence_not_an_error() -> None:
    """`echo 'no pod given (--var pod=NAME)' >&2; exit 127`: the stage's file is not
    collected, with that reason, as for a command not found — never a stage error."""
    conductor = Conductor(_runbook())
    said = _result("mem.txt", exited=127, stderr="no pod given (--var pod=NAME)\n")
    assert said.failure == "not run: no pod given (--var pod=NAME)"
    conductor.record("memory", {"mem.txt": said}, {"keyvalue": {}})
    assert conductor.records["memory"].status is StageStatus.NOT_COLLECTED
    assert not conductor.records["memory"].errors


def test_an_expression_that_fails_is_a_stage_error_and_the_walk_goes_on() -> None:
    conductor = Conductor(_runbook())
    conductor.record("gpu", {"gpu.txt": _result("gpu.txt")}, {"keyvalue": {"xid": "text"}})
    assert any("rule 1" in e for e in conductor.records["gpu"].errors)
    assert conductor.current == "memory"


def test_state_round_trips_through_json() -> None:
    conductor = Conductor(_runbook())
    conductor.record("gpu", {"gpu.txt": _result("gpu.txt")}, {"keyvalue": {"xid": 79}})
    state = json.loads(json.dumps(conductor.to_state()))
    again = Conductor(_runbook(), state=state)
    assert again.current == "nccl"
    assert again.records["gpu"].findings[0].text == "Xid 79"
    assert again.facts() == conductor.facts()


def test_derived_facts_are_computed_before_the_rules_and_seen_by_later_stages() -> None:
    from runbook.spec.models import Derive

    runbook = Runbook(
        id="d",
        title="d",
        stages=(
            Stage(
                "a",
                "a",
                derive=(
                    Derive("big", "facts.keyvalue.n > 10"),
                    Derive("bigger", "facts.derived.big and facts.keyvalue.n > 100"),
                ),
                decide=(Rule(when="facts.derived.big", finding="big", cause="host-memory-oom"),),
            ),
            Stage("b", "b", decide=(Rule(when="facts.derived.bigger", finding="bigger"),)),
        ),
    )
    conductor = Conductor(runbook)
    conductor.record("a", {}, {"keyvalue": {"n": 500}})
    assert conductor.records["a"].facts["derived"] == {"big": True, "bigger": True}
    conductor.record("b", {}, {})
    assert [f.text for f in conductor.records["b"].findings] == ["bigger"]


def test_an_else_rule_is_considered_only_when_its_chain_did_not_match() -> None:
    from runbook.conductor import Conductor
    from runbook.spec.loader import load_text

    rb = load_text(
        "id: t\nstages:\n  - id: s\n    decide:\n"
        "      - when: vars_a\n        finding: first\n"
        "      - else: true\n        when: vars_b\n        finding: second\n"
        "      - else: true\n        finding: otherwise\n"
        "      - finding: independent\n"
    )
    for a, b, want in [
        (True, True, ["first", "independent"]),
        (False, True, ["second", "independent"]),
        (False, False, ["otherwise", "independent"]),
    ]:
        c = Conductor(rb, {"vars_a": a, "vars_b": b})
        record = c.record("s", {}, {})
        assert [f.text for f in record.findings] == want, (a, b)


def test_match_first_records_only_the_first_matching_rule() -> None:
    from runbook.conductor import Conductor
    from runbook.spec.loader import load_text

    rb = load_text(
        "id: t\nstages:\n  - id: s\n    match: first\n    decide:\n"
        "      - when: 'false'\n        finding: skipped\n"
        "      - finding: matched\n      - finding: never\n"
    )
    record = Conductor(rb).record("s", {}, {})
    assert [f.text for f in record.findings] == ["matched"]


def test_to_state_keeps_an_unchanged_record_and_redoes_a_changed_one() -> None:
    conductor = Conductor(_runbook())
    conductor.record("gpu", {"gpu.txt": _result("gpu.txt")}, {"keyvalue": {"xid": 0}})
    first = conductor.to_state()
    conductor.record("memory", {"mem.txt": _result("mem.txt")}, {"keyvalue": {"oom": 3}})
    second = conductor.to_state()
    assert second["records"]["gpu"] is first["records"]["gpu"]  # not converted again
    assert second["records"]["memory"] is not first["records"]["memory"]
    assert second["records"]["memory"]["facts"] == {"keyvalue": {"oom": 3}}
    assert second["records"]["memory"]["findings"][0]["text"] == "oom"
    # a stage walked again (a resumed run) is converted again, and so is a skipped one
    conductor.record("gpu", {"gpu.txt": _result("gpu.txt")}, {"keyvalue": {"xid": 79}})
    conductor.skip("never", "skipped: test")
    third = conductor.to_state()
    assert third["records"]["gpu"]["facts"] == {"keyvalue": {"xid": 79}}
    assert third["records"]["never"]["reason"] == "skipped: test"
    assert third["records"]["memory"] is second["records"]["memory"]
    # and what it gives is what a conductor without the reuse would give
    fresh = Conductor(_runbook(), state=json.loads(json.dumps(third)))
    assert json.dumps(fresh.to_state(), sort_keys=True) == json.dumps(third, sort_keys=True)


def _unrenderable() -> Runbook:
    """A stage whose messages need arithmetic on a fact the node did not give."""
    return Runbook(
        id="t",
        title="t",
        stages=(
            Stage(
                "gpu",
                "GPU and PCIe",
                decide=(
                    Rule(
                        finding="{{ facts.smi.gpu_count + 1 }} GPUs",
                        cause="gpu-hardware",
                        propose=("drain",),
                        rule_out=(RuleOut("pcie-error", "{{ facts.aer.count * 2 }} reports"),),
                    ),
                ),
            ),
        ),
        remedies=(
            Remedy("drain", "node-drain", "Cordon and drain the node",
                   summary="drain {{ facts.kube.node.name ~ 1 + 1 }}",
                   params={"node": "{{ facts.kube.node.cpus + 1 }}"}),
        ),
    )  # fmt: skip


def test_a_message_that_cannot_be_rendered_is_a_sentence_and_its_error_names_no_template() -> None:
    record = Conductor(_unrenderable()).record("gpu", {}, {})
    assert [f.text for f in record.findings] == [
        "GPU and PCIe: evidence of gpu-hardware (details unavailable: smi was not collected)"
    ]
    assert record.ruled_out == [
        {
            "cause": "pcie-error",
            "because": "the GPU and PCIe stage's evidence rules it out (details unavailable: aer "
            "was not collected)",
        }
    ]
    assert record.errors == [
        "rule 1 finding: smi was not collected",
        "rule 1 rule-out reason: aer was not collected",
    ]


def test_a_proposal_whose_summary_cannot_be_rendered_says_its_title_and_what_was_missing() -> None:
    conductor = Conductor(_unrenderable())
    conductor.record("gpu", {}, {"kube": {"pod": {}}})
    proposal = next(
        p for p in build_verdict(conductor, node="n").proposals if p.kind == "node-drain"
    )
    assert proposal.summary.endswith(
        "Cordon and drain the node (details unavailable: kube.node was not collected)"
    )
    text = json.dumps(build_verdict(conductor, node="n").to_json())
    assert "{{" not in text and "undefined" not in text.lower()
