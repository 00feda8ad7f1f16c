"""analyze-dir over the recorded bundle corpus, and the four reports rendered from its real
verdicts: each recorded bundle reaches the root cause it records, sweep.md orders findings
worst first, junit.xml and runbook.prom stay valid whatever text a host name or an error
carries, and a rewrite never leaves a reader a half file. junit.xml is validated against the
Jenkins xUnit plugin's JUnit schema (tests/fixtures/junit/junit-10.xsd, shipped as it is)."""

from __future__ import annotations

import json
import re
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from runbook.spec import load_file, resolve
from runbook.sweep.analyze import analyze_dir
from runbook.sweep.merge import merge
from runbook.sweep.reports import write_reports
from runbook.sweep.results import HostResult, HostStatus, SweepResult
from runbook.verdict import Verdict
from tests.sweep.helpers import REPO, parse_prom
from tests.tools import bundles

JUNIT_XSD = REPO / "tests" / "fixtures" / "junit" / "junit-10.xsd"

CORPUS = bundles.root()  # every bundle composed (tests/tools/bundles.py), read-only
PICKED = (
    "healthy",
    "gpu-hardware-xid79",
    "host-oom-cgroup-dir-v2",
    "pcie-fatal-aer",
    "inconclusive",
    "shm-exhausted",
)


@pytest.fixture(scope="module")
def corpus_sweep(tmp_path_factory: pytest.TempPathFactory) -> SweepResult:
    fetched = tmp_path_factory.mktemp("fetched")
    for name in PICKED[1:]:
        (fetched / name).symlink_to(CORPUS / name, target_is_directory=True)
    with tarfile.open(fetched / "healthy.tar.gz", "w:gz") as tar:  # as collect.yml fetches
        tar.add(CORPUS / "healthy", arcname="bundle")
    (fetched / "broken").mkdir()
    (fetched / "broken" / "bundle.yaml").write_text("format: 7\nnode: x\n")
    runbook = load_file(resolve("nccl-init-failure"))
    return analyze_dir(fetched, runbook, runbook_ref="nccl-init-failure", forks=3)


def test_every_recorded_bundle_reaches_its_recorded_root_cause(corpus_sweep: SweepResult) -> None:
    hosts = {h.host: h for h in corpus_sweep.hosts}
    assert sorted(hosts) == sorted([*PICKED, "broken"])
    for name in PICKED:
        expected = yaml.safe_load((CORPUS / name / "expected.yaml").read_text())
        assert hosts[name].root_cause == expected["root_cause"], name
    assert hosts["broken"].status is HostStatus.ERROR
    assert "unknown bundle format 7" in str(hosts["broken"].error)
    assert corpus_sweep.exit_code() == 1


def test_sweep_md_lists_findings_worst_first(corpus_sweep: SweepResult, tmp_path: Path) -> None:
    write_reports(corpus_sweep, tmp_path)
    text = (tmp_path / "sweep.md").read_text()
    findings = text.split("## Findings, worst first", 1)[1].split("## Not swept", 1)[0]
    order = [
        line.split(": ", 1)[1].split(" (")[0]
        for line in findings.splitlines()
        if line.startswith("### ")
    ]
    assert order == [
        "gpu-hardware",
        "pcie-error",
        "host-memory-oom",
        "shm-exhausted",
        "inconclusive",
    ]
    assert "| broken | error |" in text
    assert "Healthy: healthy." in text


@pytest.fixture(scope="module")
def schema():  # type: ignore[no-untyped-def]
    import xmlschema

    return xmlschema.XMLSchema(str(JUNIT_XSD))


def test_junit_validates_against_the_jenkins_schema_with_the_host_details_kept(
    corpus_sweep: SweepResult, tmp_path: Path, schema
) -> None:  # type: ignore[no-untyped-def]
    write_reports(corpus_sweep, tmp_path)
    schema.validate(str(tmp_path / "junit.xml"))
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    # Ant's schema reads a timestamp without a zone offset (UTC here)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", suite.get("timestamp", "")), suite.attrib
    for case in suite.findall("testcase"):  # each host's target and status, where JUnit allows
        out = case.findtext("system-out") or ""
        assert "target: " in out and "status: " in out, out
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["runbook"] == "nccl-init-failure"


def test_reports_stay_valid_whatever_text_they_carry(
    corpus_sweep: SweepResult, tmp_path: Path, schema
) -> None:  # type: ignore[no-untyped-def]
    nasty = 'rack"7\\a|b\nc\x07'
    sweep = SweepResult(
        **{
            **corpus_sweep.__dict__,
            "hosts": [
                *corpus_sweep.hosts,
                HostResult(
                    nasty, "ssh://root@h:22", HostStatus.UNREACHABLE, 1.0, error='no\x00route | "x"'
                ),
                HostResult(
                    "ok-but-odd",
                    "ssh://root@o:22",
                    HostStatus.HEALTHY,
                    1.0,
                    verdict=Verdict(nasty, "healthy", "high"),
                ),
            ],
        }
    )
    write_reports(sweep, tmp_path)
    schema.validate(str(tmp_path / "junit.xml"))  # hostile text and all, as Jenkins reads it
    root = ET.parse(tmp_path / "junit.xml").getroot()  # parses: no raw control characters
    names = [c.get("name") for c in root.iter("testcase")]
    # the bell written visibly (runbook.printable), as on every console and in every report
    assert len(names) == len(sweep.hosts) and 'rack"7\\a|b\nc\\x07' in names
    samples = parse_prom((tmp_path / "runbook.prom").read_text())
    nodes = {labels["node"] for labels, _ in samples["runbook_root_cause"]}
    assert "ok-but-odd" in nodes and nasty not in nodes  # an unreachable host has no cause
    hosts = {labels["status"]: v for labels, v in samples["runbook_sweep_hosts"]}
    assert hosts["unreachable"] == 1 and hosts["error"] == 1
    md = (tmp_path / "sweep.md").read_text()
    # one table row: the pipe and the backslash escaped, the newline folded, the bell visible
    # (a backslash is Markdown's escape: written \\ it renders as itself)
    assert 'rack"7\\\\a\\|b c\\\\x07' in md and "\x07" not in md
    assert json.loads((tmp_path / "sweep.json").read_text())["counts"]["unreachable"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["sweep.json", "sweep.md", "junit.xml", "runbook.prom"]
    )  # no temporary left


def test_a_merge_keeps_the_latest_result_of_a_host_and_the_stalest_success(
    corpus_sweep: SweepResult,
) -> None:
    old = SweepResult(
        **{**corpus_sweep.__dict__, "shard": "1/2", "finished_ts": 100.0, "duration_s": 10.0}
    )
    redo = HostResult(
        "healthy", "replay://x", HostStatus.FINDING, 1.0,
        verdict=Verdict("x", "gpu-hardware", "high"),
    )
    new = SweepResult(
        **{
            **corpus_sweep.__dict__,
            "shard": "2/2",
            "finished_ts": 200.0,
            "duration_s": 5.0,
            "hosts": [redo],
        }
    )
    merged = merge([new, old])
    hosts = {h.host: h for h in merged.hosts}
    assert hosts["healthy"].root_cause == "gpu-hardware"  # the later shard's result
    assert merged.finished_ts == 100.0 and merged.duration_s == pytest.approx(110.0)
    assert merged.shards == ["1/2", "2/2"] and merged.missing_shards == []


def test_a_sweep_of_one_host_says_one_host(tmp_path: Path) -> None:
    from tests.integration.conftest import cli_env
    from tests.sweep.helpers import runbook

    fetched = tmp_path / "fetched"
    fetched.mkdir()
    (fetched / "healthy").symlink_to(CORPUS / "healthy", target_is_directory=True)
    done = runbook(["analyze-dir", str(fetched), "--report", str(tmp_path / "report")],
                   cli_env(tmp_path))  # fmt: skip
    assert done.rc == 0, done.stderr
    assert " of 1 host in " in done.stdout.splitlines()[0], done.stdout
    assert "\n1 host, " in (tmp_path / "report" / "sweep.md").read_text()


def test_inconclusive_hosts_are_counted_and_listed_apart_from_findings(tmp_path: Path) -> None:
    from tests.integration.conftest import cli_env
    from tests.sweep.helpers import runbook

    fetched = tmp_path / "fetched"
    fetched.mkdir()
    for name in ("healthy", "gpu-hardware-xid79", "pcie-fatal-aer", "inconclusive"):
        (fetched / name).symlink_to(CORPUS / name, target_is_directory=True)
    done = runbook(["analyze-dir", str(fetched), "--report", str(tmp_path / "report")],
                   cli_env(tmp_path))  # fmt: skip
    assert done.rc == 1, done.stderr  # an inconclusive host is not cleared: not green
    lines = done.stdout.splitlines()
    assert lines[0].endswith(": 1 healthy, 2 findings, 1 inconclusive"), lines[0]
    findings = lines[lines.index("findings, worst first:") + 1 :]
    heading = next(i for i, line in enumerate(findings) if line.startswith("inconclusive ("))
    assert sorted(line.split()[0] for line in findings[:heading]) == [
        "gpu-hardware-xid79", "pcie-fatal-aer"
    ]  # fmt: skip
    assert findings[heading + 1].split()[:2] == ["inconclusive", "inconclusive"]
    summary = (tmp_path / "report" / "sweep.md").read_text()
    assert "**1** healthy, **2** findings, **1** inconclusive." in summary, summary
