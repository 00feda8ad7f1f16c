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
    import shutil

    from .test_bundle_corpus import BUNDLES

    run = tmp_path / "run"
    shutil.copytree(BUNDLES / "healthy", run / "bundle")
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
