"""A user signature catalog: the shipped format, named in the config (`signatures.user_catalog`)
or by `--signatures FILE`, checked when loaded (each problem one line naming the file and
line), merged before the shipped catalog; `runbook signatures test FILE BUNDLE` shows the lines
each entry matches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runbook import signatures
from runbook.cli.app import main
from runbook.parsers import dmesg
from runbook.transports.base import CommandResult

WARN = (
    "gpu-node-1:4711:4790 [0] transport/net_ib.cc:1234 NCCL WARN NET/IB : qp 0x1234 entered "
    "a state nobody has named yet (code 77)"
)
PEER = (
    "gpu-node-2:4712:4791 [1] misc/socket.cc:49 NCCL WARN Net : Connection closed by remote "
    "peer 10.0.0.1<34567>"
)
DRIVER = "[Wed Mar  4 10:11:58 2026] NVRM: GPU 0000:3b:00.0: SiteSpecificThing went wrong"

GOOD = """\
format: 1
signatures:
  - id: site-qp-state
    class: nccl
    role: local-error
    cause: rdma-misconfigured
    patterns:
      - "qp 0x[0-9a-f]+ entered a state"
    seen_in: "our cluster, 2026-03"
  - id: site-any-warn
    class: nccl
    role: local-error
    patterns: ["NCCL WARN NET/IB"]
  - id: site-driver
    class: kernel
    role: cause
    cause: gpu-hardware
    keywords: ["SiteSpecificThing"]
    patterns: ["SiteSpecificThing went wrong"]
"""


@pytest.fixture(autouse=True)
def shipped_catalog_after() -> Iterator[None]:
    yield
    signatures.use_user_catalog(None)


def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    (root / "app").mkdir(parents=True)
    (root / "bundle.yaml").write_text(
        "format: 1\nnode: gpu-node-1\ncollected_at: '2026-03-04T10:40:00+00:00'\n"
    )
    (root / "app" / "rank-0.log").write_text(f"{WARN}\n")
    (root / "app" / "rank-1.log").write_text(f"{PEER}\n")
    (root / "dmesg.txt").write_text(f"{DRIVER}\n")
    return root


def catalog(tmp_path: Path, text: str, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def analyze(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main([*args, "--format", "json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_a_user_signature_names_the_cause_of_a_line_the_shipped_catalog_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = bundle(tmp_path)
    shipped = analyze(["analyze", str(path)], capsys)
    assert shipped["root_cause"] == "inconclusive"
    mine = catalog(tmp_path, GOOD.replace("role: cause\n    cause: gpu-hardware", "role: context"))
    v = analyze(["analyze", str(path), "--signatures", str(mine)], capsys)
    assert v["root_cause"] == "rdma-misconfigured"
    assert (v["first_anomaly"]["source"], v["first_anomaly"]["line"]) == ("app/rank-0.log", 1)
    # the next analysis without the flag reads with the shipped catalog again
    assert analyze(["analyze", str(path)], capsys)["root_cause"] == "inconclusive"


def test_the_user_catalog_named_in_the_config_is_used_relative_to_the_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = bundle(tmp_path)
    (tmp_path / "etc").mkdir()
    catalog(tmp_path / "etc", GOOD.replace("role: cause\n    cause: gpu-hardware", "role: context"))
    config = tmp_path / "etc" / "config.yaml"
    config.write_text("signatures:\n  user_catalog: mine.yaml\n")
    v = analyze(["--config", str(config), "analyze", str(path)], capsys)
    assert v["root_cause"] == "rdma-misconfigured"


def test_a_kernel_user_signature_reaches_the_kernel_logs_pre_filter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = bundle(tmp_path)
    mine = catalog(tmp_path, GOOD)
    signatures.use_user_catalog(mine)
    assert "SiteSpecificThing" in dmesg.keywords()
    lines = dmesg.candidate_lines(
        CommandResult("dmesg.txt", "", source_path=str(path / "dmesg.txt"))
    )
    facts = dmesg.parse_dmesg(lines, numbered=True, collected_at="2026-03-04T10:40:00+00:00")
    assert [h.signature for h in facts.catalog_hits] == ["site-driver"]
    signatures.use_user_catalog(None)
    assert "SiteSpecificThing" not in dmesg.keywords()


ENTRY = """\
  - id: {id}
    class: {cls}
    role: {role}
    cause: {cause}
    patterns:
      - "{pattern}"
"""


def entry(**kw: str) -> str:
    values = {"id": "mine", "cls": "nccl", "role": "local-error", "cause": "null",
              "pattern": "foo"} | kw  # fmt: skip
    return ENTRY.format(**values)


HEAD = "format: 1\nsignatures:\n"


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        (HEAD + entry(pattern="unclosed (group"), 8, "pattern 'unclosed (group'"),
        (HEAD + entry(role="fatal"), 5, "role 'fatal' is not one of"),
        (HEAD + entry(cls="gpu"), 4, "class 'gpu' is not one of"),
        (HEAD + entry(cause="oom"), 6, "cause 'oom' is not a root cause"),
        (HEAD + entry() + entry(id="x") + "  - class: nccl\n    role: cause\n", 15,
         "signatures[2].id: expected a name"),
        (HEAD + entry(id="a") + entry(id="b") + entry(id="a"), 15, "signature 'a': duplicate id"),
        (HEAD + entry(id="peer-closed"), 3, "a shipped signature has this id"),
        (HEAD + entry() + "    pattern: typo\n", 9, "unknown field 'pattern'"),
        (HEAD + entry(cls="kernel"), 4, "needs keywords"),
        ("format: 1\nsignatures: [\n", 3, "not YAML"),
        ("format: 2\nsignatures: []\n", 1, "format: 1"),
    ],
)  # fmt: skip
def test_each_bad_user_catalog_is_one_line_naming_its_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int, says: str
) -> None:
    path = bundle(tmp_path)
    mine = catalog(tmp_path, text)
    for args in (["analyze", str(path), "--signatures", str(mine)],
                 ["signatures", "test", str(mine), str(path)]):  # fmt: skip
        assert main(args) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert f"{mine}:{line}: " in err, err
        assert says in err, err
        assert "Traceback" not in err


def test_a_missing_user_catalog_or_bundle_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = bundle(tmp_path)
    assert main(["signatures", "test", str(tmp_path / "none.yaml"), str(path)]) == 2
    assert "cannot read the signature catalog" in capsys.readouterr().err
    mine = catalog(tmp_path, GOOD)
    assert main(["signatures", "test", str(mine), str(tmp_path / "no-bundle")]) == 2
    err = capsys.readouterr().err
    assert "no such bundle" in err and len(err.strip().splitlines()) == 1


def test_signatures_test_shows_each_entrys_lines_and_which_entry_the_analysis_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = bundle(tmp_path)
    mine = catalog(tmp_path, GOOD)
    assert main(["signatures", "test", str(mine), str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "site-qp-state (nccl, local-error, rdma-misconfigured): 1 line(s)"
    assert out[1] == f"  app/rank-0.log:1: {WARN}"
    # the second entry matches the same line, but the first entry is read there
    assert out[2] == "site-any-warn (nccl, local-error, no cause): 1 line(s)"
    assert out[3] == f"  app/rank-0.log:1: {WARN}  [read as site-qp-state]"
    assert out[4] == "site-driver (kernel, cause, gpu-hardware): 1 line(s)"
    assert out[5] == f"  dmesg.txt:1: {DRIVER}"
    assert main(["signatures", "test", str(mine), str(path), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [e["count"] for e in data["signatures"]] == [1, 1, 1]
    assert data["signatures"][1]["lines"][0]["taken_by"] == "site-qp-state"


def test_an_entry_that_matches_nothing_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = bundle(tmp_path)
    mine = catalog(tmp_path, "format: 1\nsignatures:\n" + entry(pattern="never printed"))
    assert main(["signatures", "test", str(mine), str(path)]) == 0
    assert capsys.readouterr().out.strip() == "mine (nccl, local-error, no cause): no line"


def test_user_entries_are_tried_before_the_shipped_ones(tmp_path: Path) -> None:
    from runbook.signatures import load_user

    peer = "Connection closed by remote peer"
    text = HEAD + entry(id="quiet-peer", role="benign", pattern=peer)
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert [s.id for s in load_user(path)] == ["quiet-peer"]
    assert signatures.catalog().classify(PEER).id == "peer-closed"  # type: ignore[union-attr]
    signatures.use_user_catalog(path)
    assert signatures.catalog().classify(PEER).id == "quiet-peer"  # type: ignore[union-attr]
    assert signatures.user_catalog_path() == str(path)


def test_analyze_dir_reads_every_bundle_with_the_configured_user_catalog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    bundle(tmp_path).rename(fleet / "gpu-node-1")
    catalog(tmp_path, GOOD.replace("role: cause\n    cause: gpu-hardware", "role: context"))
    config = tmp_path / "config.yaml"
    config.write_text("signatures:\n  user_catalog: mine.yaml\n")
    args = ["--config", str(config), "analyze-dir", str(fleet), "--report", str(tmp_path / "r")]
    main([*args, "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert [h["root_cause"] for h in report["hosts"]] == ["rdma-misconfigured"]


def _exit_code(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as done:  # npd ends with its status
        return int(done.code or 0)


def test_npd_reads_the_node_with_the_user_catalog_of_its_flag_or_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The node-problem-detector check reads a node as `run` does: with --signatures FILE, or
    the config's signatures.user_catalog (it read with the shipped catalog alone)."""
    path = bundle(tmp_path)
    mine = catalog(tmp_path, GOOD.replace("role: cause\n    cause: gpu-hardware", "role: context"))
    config = tmp_path / "config.yaml"
    config.write_text(f"signatures:\n  user_catalog: {mine.name}\n")
    target = ["--target", f"replay://{path}", "--format", "json"]
    runs = {
        "shipped": ["npd", *target],
        "flag": ["npd", *target, "--signatures", str(mine)],
        "config": ["--config", str(config), "npd", *target],
    }
    messages = {}
    for name, args in runs.items():
        assert _exit_code(args) == 0
        messages[name] = json.loads(capsys.readouterr().out)["message"]
        signatures.use_user_catalog(None)  # each as a process of its own
    assert messages["shipped"].endswith("(verdict: inconclusive)"), messages
    assert messages["flag"].endswith("(verdict: rdma-misconfigured)"), messages
    assert messages["config"] == messages["flag"]
    # a bad catalog: NPD's unknown, one line
    bad = catalog(tmp_path, "format: 1\nsignatures: 3\n", "bad.yaml")
    assert _exit_code(["npd", *target, "--signatures", str(bad), "--max-output-length", "400"]) == 2
    assert "bad.yaml" in json.loads(capsys.readouterr().out)["message"]


def test_a_resumed_run_reads_the_rest_with_the_catalog_the_run_began_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """run.json names the user catalog (--signatures) the run read with; a run killed right
    after it started is resumed, in a process without the flag, with that catalog."""
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    path = bundle(tmp_path)
    catalog(tmp_path, GOOD.replace("role: cause\n    cause: gpu-hardware", "role: context"))
    run_dir = tmp_path / "run"
    first = analyze(["run", "nccl-init-failure", "--target", f"replay://{path}", "--no-input",
                     "--run-dir", str(run_dir), "--signatures", "mine.yaml"], capsys)  # fmt: skip
    assert first["root_cause"] == "rdma-misconfigured"
    record = json.loads((run_dir / "run.json").read_text())
    assert record["signatures"] == str(tmp_path / "mine.yaml")  # absolute: resume may run elsewhere
    for done in ("state.json", "verdict.json", "approvals.json"):
        (run_dir / done).unlink(missing_ok=True)
    events = (run_dir / "events.jsonl").read_text().splitlines()
    (run_dir / "events.jsonl").write_text(events[0] + "\n")
    signatures.use_user_catalog(None)  # a new process: no flag, no config
    monkeypatch.chdir(tmp_path / "bundle")
    assert main(["resume", str(run_dir), "--no-input", "--format", "json"]) == 0
    capsys.readouterr()
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["root_cause"] == "rdma-misconfigured"
