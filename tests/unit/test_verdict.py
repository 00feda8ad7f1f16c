"""The typed verdict (runbook.verdict): DESIGN §5 as frozen dataclasses, one JSON pair."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from runbook.verdict import Verdict, VerdictError

from .test_bundle_corpus import NAMES, verdict


@pytest.mark.parametrize("name", NAMES)
def test_every_corpus_verdict_round_trips_through_the_types(name: str) -> None:
    data = verdict(name)
    typed = Verdict.from_json(data)
    assert typed.to_json() == data
    assert Verdict.from_json(typed.to_json()) == typed


@pytest.mark.parametrize("name", NAMES)
def test_first_anomaly_is_a_bundle_file_and_line_or_nothing(name: str) -> None:
    typed = Verdict.from_json(verdict(name))
    if typed.root_cause == "healthy":
        assert typed.first_anomaly is None
        return
    first = typed.first_anomaly
    assert first is not None, "an anomalous verdict names where it starts"
    assert not first.source.startswith("stage:")
    for link in typed.chain + typed.also_seen:
        for e in link.evidence:
            assert not e.source.startswith("stage:"), link
        # every finding points at a line of a bundle file
        assert any(e.line is not None for e in link.evidence), link


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("root_cause",), "probably-dns", "verdict.root_cause"),
        (("confidence",), "certain", "verdict.confidence"),
        (("format",), 2, "verdict.format"),
        (("chain", 0, "evidence", 0, "line"), "ten", "verdict.chain[0].evidence[0].line"),
        (("proposals", 0, "requires_approval"), "yes", "verdict.proposals[0]"),
    ],
)
def test_a_malformed_verdict_is_refused_naming_the_field(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    data = copy.deepcopy(verdict("article-incident"))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(VerdictError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Verdict.from_json(data)


def test_fields_a_newer_writer_adds_are_kept() -> None:
    data = copy.deepcopy(verdict("healthy"))
    data["a_field_from_the_future"] = {"x": 1}
    assert Verdict.from_json(data).to_json()["a_field_from_the_future"] == {"x": 1}


def test_report_on_a_damaged_verdict_json_says_which_field_in_one_line(tmp_path: Any) -> None:
    import json

    from tests.tools import bundles

    run = tmp_path / "run"
    bundles.materialize("healthy", run / "bundle")
    data = copy.deepcopy(verdict("healthy"))
    data["confidence"] = "certain"
    (run / "verdict.json").write_text(json.dumps(data))
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "runbook", "report", str(run)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "verdict.confidence" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_facts_of_reads_the_first_stage_that_collected_the_parser() -> None:
    from runbook.verdict import StageSummary

    typed = Verdict(
        "n", "healthy", "medium",
        stages=(
            StageSummary("a", "not-collected", facts={"dmesg": {"collected": False}}),
            StageSummary("b", "ok", facts={"dmesg": {"collected": True, "xids": [1]}}),
            StageSummary("c", "ok", facts={"dmesg": {"collected": True, "xids": [2]}}),
        ),
    )  # fmt: skip
    assert typed.facts_of("dmesg")["xids"] == [1]
    assert typed.facts_of("cgroup") == {}
    stage = typed.stage("b")
    assert stage is not None and stage.parser_facts("dmesg") is not None
    assert typed.stage("a") is not None and typed.stage("a").parser_facts("dmesg") is None  # type: ignore[union-attr]


def test_stage_findings_errors_and_gaps_are_typed_and_round_trip() -> None:
    data = copy.deepcopy(verdict("article-incident"))
    data["stages"][0]["errors"] = ["applog: 1 line(s) skipped"]
    data["stages"][1]["not_collected"] = {"dmesg.txt": "exit 1: Operation not permitted"}
    typed = Verdict.from_json(data)
    assert typed.stages[0].errors == ("applog: 1 line(s) skipped",)
    assert typed.stages[1].not_collected == {"dmesg.txt": "exit 1: Operation not permitted"}
    assert all(isinstance(f, str) for s in typed.stages for f in s.findings)
    assert typed.to_json() == data


def test_writer_fields_are_added_beside_the_contract() -> None:
    typed = Verdict.from_json(verdict("healthy")).annotated(duration_s=1.5)
    assert typed.to_json()["duration_s"] == 1.5
    assert Verdict.from_json(typed.to_json()) == typed


def test_a_sweep_report_whose_verdict_does_not_fit_is_one_line_not_a_traceback(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from runbook.cli.app import main

    host = {
        "host": "n1", "target": "ssh://n1", "status": "finding", "duration_s": 1.0,
        "verdict": {**verdict("healthy"), "confidence": "certain"},
    }  # fmt: skip
    report = {"kind": "runbook-sweep", "runbook": "nccl-init-failure", "source": "inv",
              "hosts": [host], "started_at": "t0", "finished_at": "t1", "duration_s": 1.0}
    (tmp_path / "sweep.json").write_text(json.dumps(report))
    out = str(tmp_path / "out")
    assert main(["sweep-merge", str(tmp_path), "--report", out]) == 2
    err = capsys.readouterr().err
    assert "verdict.confidence" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_resume_of_a_run_whose_verdict_json_does_not_fit_says_which_field(tmp_path: Any) -> None:
    import json

    from runbook.errors import StateError
    from runbook.rundir import read_verdict

    data = copy.deepcopy(verdict("healthy"))
    data["chain"] = "not a list"
    (tmp_path / "verdict.json").write_text(json.dumps(data))
    with pytest.raises(StateError, match=r"verdict\.chain"):
        read_verdict(tmp_path)
    (tmp_path / "verdict.json").write_text(json.dumps(verdict("healthy")))
    typed = read_verdict(tmp_path)
    assert typed is not None and typed.root_cause == "healthy"
