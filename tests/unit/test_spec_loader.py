"""The loader turns runbook YAML into the model, with defaults, lines and every issue."""

from __future__ import annotations

from pathlib import Path

import pytest

from runbook.errors import SpecError
from runbook.spec import (
    Collect,
    Issue,
    Remedy,
    Rule,
    RuleOut,
    Runbook,
    Stage,
    load_file,
    load_text,
    loader,
    resolve,
    shipped,
)

SPECS = Path(__file__).parent / "specs"
REPO = Path(__file__).parents[2]

MINIMAL = """\
id: minimal
stages:
  - id: only
    collect:
      hostname.txt: hostname
    parse: text
"""


def test_a_valid_runbook_loads_into_the_model() -> None:
    runbook = load_file(SPECS / "valid.yaml")

    assert runbook == Runbook(
        id="host-memory",
        title="Host memory pressure",
        description="Did the training pod run out of host memory?",
        vars={
            "cgroup_dir": "/sys/fs/cgroup",
            "min_free_gib": 2,
            "verbose": False,
            "logs": ["/var/log/a.log", "/var/log/b.log"],
        },
        surfaced_as="facts.text['app.log'].stdout | regex_search('NCCL WARN .*')",
        stages=(
            Stage(
                id="cgroup-memory",
                title="cgroup memory",
                timeout=10.0,
                collect=(
                    Collect("cgroup/memory.events", "cat {{ cgroup_dir }}/memory.events", 16),
                    Collect("app.log", "tail -n 50 {{ logs | shjoin }}", 17),
                ),
                parse=("keyvalue", "text"),
                decide=(
                    Rule(
                        when="facts.keyvalue.oom_kill | int > 0",
                        finding="{{ facts.keyvalue.oom_kill }} OOM kills in {{ cgroup_dir }}",
                        cause="host-memory-oom",
                        evidence="facts.keyvalue.evidence",
                        propose=("memory-limit",),
                        next="kernel-logs",
                        line=20,
                    ),
                    Rule(
                        rule_out=(RuleOut("host-memory-oom", "no OOM kill in memory.events"),),
                        line=26,
                    ),
                ),
                line=12,
            ),
            Stage(
                id="gpu",
                title="gpu",
                when="vars.verbose",
                collect=(Collect("nvidia-smi.txt", "nvidia-smi -q", 32),),
                parse=("text",),
                decide=(
                    Rule(
                        when="facts.text['nvidia-smi.txt'].stdout is search('Xid')",
                        finding="Xid in nvidia-smi",
                        conclude="gpu-hardware",
                        line=35,
                    ),
                    Rule(
                        rule_out=(
                            RuleOut("gpu-hardware", "no Xid"),
                            RuleOut("pcie-error", "no AER"),
                        ),
                        line=38,
                    ),
                ),
                line=29,
            ),
            Stage(
                id="kernel-logs",
                title="kernel log",
                collect=(Collect("dmesg.txt", "dmesg -T", 44),),
                parse=("text",),
                decide=(Rule(next="end", line=47),),
                line=41,
            ),
        ),
        remedies=(
            Remedy(
                id="memory-limit",
                kind="memory-limit",
                title="Size the pod memory limit from the measured peak",
                summary="raise the limit to {{ facts.keyvalue.peak | human_bytes }}",
                playbook="memory-limit.yml",
                params={"limit_bytes": "{{ (facts.keyvalue.peak * 1.2) | int }}", "retries": "3"},
                line=49,
            ),
        ),
        path=str(SPECS / "valid.yaml"),
    )


def test_titles_default_to_ids_and_timeout_to_thirty_seconds() -> None:
    runbook = load_text(
        MINIMAL
        + """\
    decide:
      - {when: facts.text, propose: fix}
remedies:
  - {id: fix, kind: collect-more}
"""
    )

    assert runbook.title == "minimal"
    assert runbook.stages[0].title == "only"
    assert runbook.stages[0].timeout == 30.0
    assert runbook.remedies[0].title == "fix"
    assert runbook.path == "<string>"


def test_one_parser_or_remedy_name_becomes_a_one_tuple() -> None:
    runbook = load_text(
        MINIMAL
        + """\
    decide:
      - {when: facts.text, propose: fix}
remedies:
  - {id: fix, kind: collect-more}
"""
    )

    assert runbook.stages[0].parse == ("text",)
    assert runbook.stages[0].decide[0].propose == ("fix",)


def test_rule_out_may_be_one_mapping_or_a_list_of_them() -> None:
    runbook = load_text(
        MINIMAL
        + """\
    decide:
      - rule_out: {cause: healthy, because: one}
      - rule_out:
          - {cause: gpu-hardware, because: two}
          - {cause: pcie-error, because: three}
"""
    )

    first, second = runbook.stages[0].decide
    assert first.rule_out == (RuleOut("healthy", "one"),)
    assert second.rule_out == (RuleOut("gpu-hardware", "two"), RuleOut("pcie-error", "three"))


def test_an_empty_collection_key_is_as_if_left_out() -> None:
    runbook = load_text(
        "id: empty\nvars:\nremedies:\nstages:\n  - id: a\n    collect:\n    decide:\n"
    )

    assert runbook.vars == {}
    assert runbook.remedies == ()
    assert runbook.stages[0].collect == ()
    assert runbook.stages[0].decide == ()


def test_an_invalid_runbook_raises_spec_error_carrying_every_issue() -> None:
    text = "id: broken\nstages:\n  - id: a\n    decide:\n      - next: nowhere\n  - id: a\n"

    with pytest.raises(SpecError) as raised:
        load_text(text, "broken.yaml")

    issues = raised.value.issues
    assert all(isinstance(i, Issue) for i in issues)
    assert [(i.path, i.line) for i in issues if isinstance(i, Issue) and i.severity == "error"] == [
        ("stages[0].decide[0].next", 5),
        ("stages[1].id", 6),
    ]
    message = raised.value.one_line()
    assert message.startswith("broken.yaml is not a valid runbook (2 errors;")
    assert "broken.yaml:5: stages[0].decide[0].next: no stage named 'nowhere'" in message


def test_warnings_do_not_stop_a_runbook_from_loading(caplog: pytest.LogCaptureFixture) -> None:
    text = "id: warned\nstages:\n  - id: only\n    decide:\n      - next: end\n  - id: never\n"

    runbook = load_text(text, "warned.yaml")

    assert [s.id for s in runbook.stages] == ["only", "never"]
    assert "warned.yaml:6: warning: stages[1]: stage 'never' is never reached" in caplog.text


def test_the_yaml_loader_constructs_no_python_objects() -> None:
    text = "id: x\nstages: !!python/object/apply:os.system ['touch /tmp/pwned']\n"

    with pytest.raises(SpecError) as raised:
        load_text(text)

    (issue,) = raised.value.issues
    assert isinstance(issue, Issue)
    assert (issue.kind, issue.line) == ("syntax", 2)
    assert "could not determine a constructor" in issue.message


def test_a_missing_file_is_a_spec_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"

    with pytest.raises(SpecError, match=r"cannot read runbook .*nope\.yaml: No such file"):
        load_file(missing)


def test_resolve_finds_a_shipped_runbook_by_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "nccl-init-failure.yaml").write_text(MINIMAL)
    monkeypatch.setattr(loader, "SHIPPED_DIR", tmp_path)

    assert resolve("nccl-init-failure") == tmp_path / "nccl-init-failure.yaml"
    assert shipped() == ["nccl-init-failure"]


def test_resolve_accepts_a_path_to_a_yaml_file() -> None:
    path = SPECS / "valid.yaml"

    assert resolve(str(path)) == path


def test_an_unknown_runbook_is_one_line_listing_the_shipped_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("b-runbook", "a-runbook"):
        (tmp_path / f"{name}.yaml").write_text(MINIMAL)
    monkeypatch.setattr(loader, "SHIPPED_DIR", tmp_path)

    with pytest.raises(SpecError) as raised:
        resolve("no-such-runbook")

    assert str(raised.value) == (
        "no runbook 'no-such-runbook': not a shipped runbook id (a-runbook, b-runbook) "
        "nor a YAML file"
    )


RUNBOOK_FILES = sorted(
    [*loader.SHIPPED_DIR.glob("*.yaml"), *(REPO / "tests/integration/runbooks").glob("*.yaml")]
)


@pytest.mark.parametrize("path", RUNBOOK_FILES, ids=lambda p: p.name)
def test_every_shipped_and_test_runbook_is_free_of_issues(path: Path) -> None:
    issues = loader.read(path.read_text(encoding="utf-8"), str(path)).issues

    assert [str(i) for i in issues] == []
