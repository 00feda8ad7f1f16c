"""Inspection reports every problem in a runbook, each with its kind, path and line.

Most cases differ only by data: a runbook text and the issue (or issues) it must give. They are
tables below, each row with a readable id; every row asserts the issue's kind, severity, path and
line, and its message exactly, by prefix or by a fragment, as the row says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest

from runbook.parsers import registry
from runbook.spec import Issue, inspect_text

SPECS = Path(__file__).parent / "specs"


def issues_of(text: str) -> list[Issue]:
    return inspect_text(dedent(text), "rb.yaml")


def one(text: str, severity: str = "error") -> Issue:
    """The one issue of `severity` in `text` (it must have exactly one)."""
    found = [i for i in issues_of(text) if i.severity == severity]
    assert len(found) == 1, [str(i) for i in found]
    return found[0]


def stage(snippet: str) -> str:
    """A runbook with one stage `a` whose body is `snippet` (indented four spaces)."""
    return "id: x\nstages:\n  - id: a\n" + snippet


def rule(text: str) -> str:
    """A runbook with one stage `a` deciding by the one rule `text` (a YAML flow mapping)."""
    return stage(f"    decide:\n      - {text}\n")


def collected(command: str) -> str:
    """A one-stage runbook collecting `command` as a YAML block scalar (no YAML quoting)."""
    return stage(f"    collect:\n      out.txt: >-\n        {command}\n")


@dataclass(frozen=True)
class Want:
    """One expected issue: kind, path, line and severity always; the message exactly
    (`message`), by its start (`starts`) or by a fragment (`contains`) where a row gives one;
    `printed` is the whole `str(issue)` where a row gives it."""

    kind: str
    path: str
    line: int
    message: str | None = None
    starts: str | None = None
    contains: str | None = None
    severity: str = "error"
    printed: str | None = None

    def check(self, issue: Issue) -> None:
        assert (issue.kind, issue.severity, issue.path, issue.line) == (
            self.kind,
            self.severity,
            self.path,
            self.line,
        ), str(issue)
        if self.message is not None:
            assert issue.message == self.message
        if self.starts is not None:
            assert issue.message.startswith(self.starts), issue.message
        if self.contains is not None:
            assert self.contains in issue.message, issue.message
        if self.printed is not None:
            assert str(issue) == self.printed


def case(case_id: str, text: str, want: Want) -> Any:
    return pytest.param(text, want, id=case_id)


# -- the issue itself --------------------------------------------------------------------------


def test_an_issue_prints_as_file_line_path_message() -> None:
    issue = Issue("semantics", "stages[3].decide[1].next", 42, "no stage named 'x'", file="a.yaml")
    warning = Issue("semantics", "stages[1]", 7, "never reached", "warning", "a.yaml")
    bare = Issue("syntax", "", 3, "invalid YAML: oops", file="a.yaml")

    assert str(issue) == "a.yaml:42: stages[3].decide[1].next: no stage named 'x'"
    assert str(warning) == "a.yaml:7: warning: stages[1]: never reached"
    assert str(bare) == "a.yaml:3: invalid YAML: oops"


def test_a_valid_runbook_has_no_issues() -> None:
    path = SPECS / "valid.yaml"

    assert inspect_text(path.read_text(encoding="utf-8"), str(path)) == []


# -- runbooks with no issue at all -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(stage("    decide: [{next: end}]\n"), id="next-end-is-a-reserved-target"),
        pytest.param(stage("    remedy: false\n"), id="remedy-false-is-a-plain-stage"),
        pytest.param(
            """\
            id: x
            stages:
              - id: a
                decide: [{when: facts.a, next: c}]
              - id: b
                decide: [{conclude: healthy}]
              - id: c
                decide: [{next: end}]
            """,
            id="forward-routing-and-end-make-no-cycle",
        ),
        # a bare substitution in a command is not a quoting warning
        pytest.param(collected("printf '%s\\n' {{ value }}"), id="bare-sub-after-quoted-arg"),
        pytest.param(collected("cat {{ cgroup_dir }}/memory.events"), id="bare-sub-in-a-path"),
        pytest.param(
            collected("tail -n 5 {{ logs | shjoin }} 2>/dev/null || echo 'no logs'"),
            id="bare-sub-with-a-filter-then-quotes",
        ),
        pytest.param(collected("echo \\'{{ x }}"), id="bare-sub-after-an-escaped-quote"),
        pytest.param(
            collected("{% if verbose %}echo 'loud'{% endif %} {{ x }}"),
            id="bare-sub-after-a-quoted-block",
        ),
    ],
)
def test_a_runbook_without_problems_has_no_issues(text: str) -> None:
    assert issues_of(text) == []


# -- runbooks with exactly one issue -----------------------------------------------------------

WRONG_TYPE = [
    ("collect-not-a-mapping", "    collect: cat /proc/meminfo\n", "stages[0].collect",
     "must be a mapping"),
    ("collect-command-not-a-string", "    collect: {a.txt: [cat, x]}\n",
     "stages[0].collect['a.txt']", "must be a string"),
    ("timeout-zero", "    timeout: 0\n", "stages[0].timeout",
     "must be a positive number of seconds"),
    ("timeout-a-word", "    timeout: soon\n", "stages[0].timeout",
     "must be a positive number of seconds"),
    ("timeout-a-boolean", "    timeout: true\n", "stages[0].timeout",
     "must be a positive number of seconds"),
    ("parse-a-number", "    parse: 3\n", "stages[0].parse", "must be a name or a list of names"),
    ("parse-list-with-a-number", "    parse: [text, 3]\n", "stages[0].parse[1]", "must be a name"),
    ("when-a-boolean", "    when: true\n", "stages[0].when",
     "must be a string, not the boolean true"),
    ("decide-a-mapping", "    decide: {next: end}\n", "stages[0].decide",
     "must be a list of rules"),
    ("decide-rule-a-string", "    decide: [next]\n", "stages[0].decide[0]",
     "must be a mapping (a rule)"),
    ("title-null", "    title:\n", "stages[0].title", "must be a string, not null"),
]  # fmt: skip

NOT_A_ROOT_CAUSE = [
    ("conclude", "{when: facts.a, conclude: oom}", "stages[0].decide[0].conclude"),
    ("finding-cause", "{when: facts.a, finding: x, cause: oom}", "stages[0].decide[0].cause"),
    ("rule-out", "{rule_out: {cause: oom, because: x}}", "stages[0].decide[0].rule_out.cause"),
    ("rule-out-list",
     "{rule_out: [{cause: healthy, because: x}, {cause: oom, because: y}]}",
     "stages[0].decide[0].rule_out[1].cause"),
]  # fmt: skip

CHANGES_THE_NODE = (
    "stage 'drain-node' changes the node: declare it under remedies:, where it needs approval"
)
NO_EXPRESSION = "expression does not compile: syntax error: "
NO_TEMPLATE = "template does not compile: syntax error: "
IN_QUOTES = "quotes: templating shell-quotes every value itself"

ONE_ISSUE = [
    # -- syntax
    case(
        "yaml-syntax-error-at-its-line",
        """\
        id: x
        stages:
          - id: a
            title: [unclosed
        """,
        Want("syntax", "", 5, starts="invalid YAML: "),
    ),
    case("top-level-list-is-not-a-runbook", "- id: x\n- id: y\n",
         Want("syntax", "", 1, starts="must be a mapping")),
    case("empty-file-is-not-a-runbook", "# nothing here\n",
         Want("syntax", "", 1, contains="empty")),
    case(
        "unknown-key-with-a-did-you-mean",
        """\
        id: x
        stages:
          - id: a
            decde:
              - next: end
        """,
        Want("syntax", "stages[0].decde", 4,
             message="unknown key 'decde' (did you mean 'decide'?)"),
    ),
    case(
        "unknown-key-without-close-match-lists-known-keys",
        stage("    colour: blue\n"),
        Want("syntax", "stages[0].colour", 4, message=(
            "unknown key 'colour' (expected one of: collect, decide, derive, description, id, "
            "match, parse, skip_reason, timeout, title, when)"
        )),
    ),
    case("duplicate-yaml-key-at-the-second-one", stage("    title: one\n    title: two\n"),
         Want("syntax", "stages[0].title", 5, message="duplicate key 'title' (first at line 4)")),
    *(
        case(f"wrong-type-{name}", stage(snippet), Want("syntax", path, 4, starts=message))
        for name, snippet, path, message in WRONG_TYPE
    ),
    case("empty-stage-list", "id: x\nstages: []\n",
         Want("syntax", "stages", 2, message="must list at least one stage")),
    case("invalid-id-runbook", "id: NCCL_Init\nstages:\n  - id: a\n",
         Want("syntax", "id", 1, contains="is not a valid id")),
    case("invalid-id-stage-with-space", "id: x\nstages:\n  - id: Kernel Logs\n",
         Want("syntax", "stages[0].id", 3, contains="is not a valid id")),
    case("invalid-id-stage-leading-dash", "id: x\nstages:\n  - id: -a\n",
         Want("syntax", "stages[0].id", 3, contains="is not a valid id")),
    case("invalid-id-remedy",
         stage("    decide: [{propose: R_1}]\n") + "remedies:\n  - {id: R_1, kind: collect-more}\n",
         Want("syntax", "remedies[0].id", 6, contains="is not a valid id")),
    case("collect-name-outside-the-bundle", stage("    collect:\n      ../../etc/cron.d/x: id\n"),
         Want("syntax", "stages[0].collect['../../etc/cron.d/x']", 5)),
    # -- semantics
    case(
        "next-naming-no-stage",
        """\
        id: x
        stages:
          - id: gpu
            decide:
              - when: facts.text
                next: kernel-log
          - id: kernel-logs
        """,
        Want(
            "semantics", "stages[0].decide[0].next", 6,
            message="no stage named 'kernel-log' (did you mean 'kernel-logs'?)",
            printed=(
                "rb.yaml:6: stages[0].decide[0].next: no stage named 'kernel-log' "
                "(did you mean 'kernel-logs'?)"
            ),
        ),
    ),
    case("end-is-reserved-not-a-stage-id", "id: x\nstages:\n  - id: end\n",
         Want("semantics", "stages[0].id", 3, contains="reserved")),
    case("duplicate-stage-id-at-the-second-stage",
         "id: x\nstages:\n  - id: a\n  - id: b\n  - id: a\n",
         Want("semantics", "stages[2].id", 5,
              message="duplicate stage id 'a' (first used by stages[0], line 3)")),
    case(
        "duplicate-remedy-id-at-the-second-remedy",
        """\
        id: x
        stages:
          - id: a
            decide: [{propose: r}]
        remedies:
          - {id: r, kind: collect-more}
          - {id: r, kind: node-drain}
        """,
        Want("semantics", "remedies[1].id", 7,
             message="duplicate remedy id 'r' (first used by remedies[0], line 6)"),
    ),
    case("unknown-parser-with-a-did-you-mean", stage("    parse: [text, keyvalu]\n"),
         Want("semantics", "stages[0].parse[1]", 4,
              message="no parser named 'keyvalu' (did you mean 'keyvalue'?)")),
    case("unknown-parser-without-close-match-lists-known-parsers", stage("    parse: zzzzzz\n"),
         Want("semantics", "stages[0].parse", 4,
              message=f"no parser named 'zzzzzz' (known: {', '.join(sorted(registry.names()))})")),
    *(
        case(f"not-a-root-cause-{name}", rule(text),
             Want("semantics", path, 5,
                  starts="'oom' is not a root cause (known: collective-desync, collective-hung, "))
        for name, text, path in NOT_A_ROOT_CAUSE
    ),
    case("root-cause-typo-gets-a-did-you-mean", rule("{conclude: host-memory-om}"),
         Want("semantics", "stages[0].decide[0].conclude", 5,
              message="'host-memory-om' is not a root cause (did you mean 'host-memory-oom'?)")),
    case(
        "remedy-kind-not-a-proposal-kind",
        """\
        id: x
        stages:
          - id: a
            decide: [{propose: drain}]
        remedies:
          - id: drain
            kind: node-drian
        """,
        Want("semantics", "remedies[0].kind", 7,
             message="'node-drian' is not a proposal kind (did you mean 'node-drain'?)"),
    ),
    case(
        "propose-naming-no-remedy",
        """\
        id: x
        stages:
          - id: a
            decide:
              - when: facts.a
                propose: [drain, shm]
        remedies:
          - {id: drain, kind: node-drain}
        """,
        Want("semantics", "stages[0].decide[0].propose[1]", 6,
             message="no remedy named 'shm' under remedies: (remedies: drain)"),
    ),
    case("propose-in-a-runbook-without-remedies", stage("    decide: [{propose: drain}]\n"),
         Want("semantics", "stages[0].decide[0].propose", 4,
              message="no remedy named 'drain': the runbook has no remedies:")),
    case("rule-with-both-next-and-conclude", rule("{when: facts.a, next: end, conclude: healthy}"),
         Want("semantics", "stages[0].decide[0].next", 5)),
    case(
        "bundle-file-collected-twice-with-different-commands",
        """\
        id: x
        stages:
          - id: a
            collect: {dmesg.txt: dmesg}
          - id: b
            collect: {dmesg.txt: dmesg -T}
        """,
        Want("semantics", "stages[1].collect['dmesg.txt']", 6),
    ),
    # -- remedies only under remedies:
    case("stage-marked-remedy-changes-the-node",
         "id: x\nstages:\n  - id: a\n  - id: drain-node\n    remedy: true\n",
         Want("semantics", "stages[1].remedy", 5, message=CHANGES_THE_NODE)),
    case("stage-with-a-playbook-changes-the-node",
         "id: x\nstages:\n  - id: a\n  - id: drain-node\n    playbook: drain.yml\n",
         Want("semantics", "stages[1].playbook", 5, message=CHANGES_THE_NODE)),
    # -- the stage graph
    case(
        "backward-next-closing-a-cycle",
        """\
        id: x
        stages:
          - id: a
          - id: b
            decide:
              - when: facts.text.retry
                next: a
          - id: c
        """,
        Want("semantics", "stages[1].decide[0].next", 7,
             message="cycle in the stage graph: a -> b -> a; a walk must end"),
    ),
    case("stage-routing-to-itself-is-a-cycle", rule("{when: facts.a, next: a}"),
         Want("semantics", "stages[0].decide[0].next", 5,
              message="cycle in the stage graph: a -> a; a walk must end")),
    case(
        "cycle-through-explicit-next-edges-names-every-stage",
        """\
        id: x
        stages:
          - id: a
            decide: [{next: c}]
          - id: b
            decide: [{next: end}]
          - id: c
            decide: [{when: facts.x, next: b}, {next: a}]
        """,
        Want("semantics", "stages[2].decide[1].next", 8,
             message="cycle in the stage graph: a -> c -> a; a walk must end"),
    ),
    # c -> b (rule) -> c (fall-through); c may be skipped, so d is still reachable
    case(
        "skipped-stage-falls-through-even-when-its-rules-always-route",
        """\
        id: x
        stages:
          - id: a
            decide: [{next: c}]
          - id: b
          - id: c
            when: vars.again
            decide: [{next: b}]
          - id: d
        """,
        Want("semantics", "stages[2].decide[0].next", 8,
             message="cycle in the stage graph: b -> c -> b; a walk must end"),
    ),
    case(
        "stage-no-walk-reaches-is-a-warning",
        """\
        id: x
        stages:
          - id: a
            decide: [{next: c}]
          - id: b
          - id: c
        """,
        Want("semantics", "stages[1]", 5, severity="warning",
             message="stage 'b' is never reached from the first stage 'a'"),
    ),
    case("remedy-no-rule-proposes-is-a-warning",
         "id: x\nstages:\n  - id: a\nremedies:\n  - {id: r, kind: collect-more}\n",
         Want("semantics", "remedies[0]", 5, severity="warning",
              message="remedy 'r' is never proposed by any rule")),
    # -- shell quoting: a substitution inside quotes in a command is a warning
    *(
        case(f"substitution-inside-{quotes}-quotes-{n}", collected(command),
             Want("semantics", "stages[0].collect['out.txt']", 5, severity="warning",
                  contains=f"is inside {quotes} {IN_QUOTES}"))
        for n, (command, quotes) in enumerate(
            [
                ("cat '{{ cgroup_dir }}/memory.events'", "single"),
                ('grep "{{ pattern }}" dmesg.txt', "double"),
                ("sh -c 'ls {{ dir }}'", "single"),
            ],
            1,
        )
    ),
    # -- expressions and templates
    case("expression-stage-when", stage("    when: vars.x ==\n"),
         Want("expression", "stages[0].when", 4, starts=NO_EXPRESSION)),
    case("expression-rule-when", stage("    decide:\n      - when: facts.a >\n"),
         Want("expression", "stages[0].decide[0].when", 5,
              starts=NO_EXPRESSION)),
    case("expression-evidence-trailing-pipe",
         stage("    decide:\n      - {evidence: 'facts.a |'}\n"),
         Want("expression", "stages[0].decide[0].evidence", 5,
              starts=NO_EXPRESSION)),
    case("expression-evidence-unknown-filter",
         stage("    decide:\n      - {evidence: facts.a | nosuchfilter}\n"),
         Want("expression", "stages[0].decide[0].evidence", 5,
              starts=NO_EXPRESSION)),
    case("surfaced-as-must-compile", "id: x\nsurfaced_as: facts.applog[\nstages:\n  - id: a\n",
         Want("expression", "surfaced_as", 2)),
    case("template-collect-command", stage("    collect:\n      a.txt: cat {{ x\n"),
         Want("expression", "stages[0].collect['a.txt']", 5,
              starts=NO_TEMPLATE)),
    case("template-finding", stage("    decide:\n      - finding: '{{ x }'\n"),
         Want("expression", "stages[0].decide[0].finding", 5,
              starts=NO_TEMPLATE)),
    case("template-rule-out-because",
         stage("    decide:\n      - rule_out: {cause: healthy, because: '{% if %}'}\n"),
         Want("expression", "stages[0].decide[0].rule_out.because", 5,
              starts=NO_TEMPLATE)),
]  # fmt: skip


@pytest.mark.parametrize(("text", "want"), ONE_ISSUE)
def test_a_runbook_with_one_problem_reports_it_at_its_line(text: str, want: Want) -> None:
    want.check(one(text, want.severity))


# -- runbooks with several issues --------------------------------------------------------------


def _all(issue: Issue) -> bool:
    return True


def _errors(issue: Issue) -> bool:
    return issue.severity == "error"


def _unknown_keys(issue: Issue) -> bool:
    return issue.message.startswith("unknown key")


SEVERAL_ISSUES = [
    pytest.param(
        """\
        id: x
        titel: X
        stages:
          - id: a
            decide:
              - whn: facts.a
                rule_out: {cause: healthy, becuse: fine}
        remedies:
          - id: r
            kind: collect-more
            sumary: more
        """,
        _unknown_keys,
        [
            Want("syntax", "titel", 2),
            Want("syntax", "stages[0].decide[0].whn", 6),
            Want("syntax", "stages[0].decide[0].rule_out.becuse", 7),
            Want("syntax", "remedies[0].sumary", 11),
        ],
        id="unknown-keys-in-rules-rule-outs-remedies-and-the-top-level",
    ),
    pytest.param(
        "title: no id\n",
        _all,
        [
            Want("syntax", "", 1, message="missing required key 'id'"),
            Want("syntax", "", 1, message="missing required key 'stages'"),
        ],
        id="missing-id-and-stages-at-the-mapping",
    ),
    pytest.param(
        """\
        id: x
        stages:
          - title: anonymous
        remedies:
          - id: r
        """,
        _errors,
        [
            Want("syntax", "stages[0]", 3, message="missing required key 'id'"),
            Want("syntax", "remedies[0]", 5, message="missing required key 'kind'"),
        ],
        id="stage-without-id-and-remedy-without-kind",
    ),
    pytest.param(
        """\
        id: x
        vars:
          log-dir: /var/log
          facts: 1
          nested: {a: 1}
        stages:
          - id: a
        """,
        _all,
        [
            Want("syntax", "vars['log-dir']", 3),
            Want("syntax", "vars.facts", 4),
            Want("syntax", "vars.nested", 5),
        ],
        id="variable-names-must-be-identifiers-and-not-reserved",
    ),
    pytest.param(
        """\
        id: x
        stages:
          - id: a
            decide: [{propose: r}]
        remedies:
          - id: r
            kind: memory-limit
            summary: "raise to {{ peak"
            params:
              limit: "{{ peak * }}"
        """,
        _all,
        [
            Want("expression", "remedies[0].summary", 8),
            Want("expression", "remedies[0].params.limit", 10),
        ],
        id="remedy-summary-and-params-templates-must-compile",
    ),
    pytest.param(
        """\
        id: x
        stages:
          - id: a
            decide:
              - finding: always
              - next: end
              - when: facts.a
                finding: never
        """,
        _all,
        [
            Want("semantics", "stages[0].decide[2]", 7, severity="warning",
                 message=(
                     "rule is never evaluated: decide[1] above has no `when` and always routes"
                 )),
        ],
        id="rules-after-an-unconditional-routing-rule-are-a-warning",
    ),
    pytest.param(
        """\
        id: x
        stages:
          - just-a-string
          - id: b
            decide:
              - 3
              - {when: facts.a, next: nowhere}
        """,
        _errors,
        [
            Want("syntax", "stages[0]", 3),
            Want("syntax", "stages[1].decide[0]", 6),
            Want("semantics", "stages[1].decide[1].next", 7),
        ],
        id="a-node-that-cannot-be-read-keeps-the-paths-of-its-siblings",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("text", "select", "wants"), SEVERAL_ISSUES)
def test_a_runbook_with_several_problems_reports_each_at_its_line(
    text: str, select: Callable[[Issue], bool], wants: list[Want]
) -> None:
    issues = [i for i in issues_of(text) if select(i)]

    assert len(issues) == len(wants), [str(i) for i in issues]
    for issue, want in zip(issues, wants, strict=True):
        want.check(issue)


# -- all of them at once -----------------------------------------------------------------------


def test_a_file_with_several_problems_reports_all_of_them_grouped_by_kind() -> None:
    path = SPECS / "several-problems.yaml"

    issues = inspect_text(path.read_text(encoding="utf-8"), "several-problems.yaml")

    assert [(i.kind, i.severity, i.path, i.line) for i in issues] == [
        ("syntax", "error", "stages[0].decde", 7),
        ("syntax", "error", "stages[1].timeout", 10),
        ("semantics", "warning", "stages[0].collect['dmesg.txt']", 5),
        ("semantics", "error", "stages[0].parse", 6),
        ("semantics", "error", "stages[1].decide[0].cause", 13),
        ("semantics", "error", "stages[1].decide[0].next", 14),
        ("semantics", "error", "stages[1].decide[1].next", 15),
        ("semantics", "warning", "stages[2]", 16),
        ("semantics", "error", "stages[2].remedy", 17),
        ("semantics", "warning", "remedies[0]", 19),
        ("semantics", "error", "remedies[0].kind", 20),
        ("expression", "error", "stages[1].decide[0].when", 12),
        ("expression", "error", "remedies[0].summary", 21),
    ]


# -- the format document stays true ------------------------------------------------------------

DOC = Path(__file__).parents[2] / "docs" / "runbook-format.md"


def _fenced(language: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [block.split("```", 1)[0] for block in text.split(f"```{language}\n")[1:]]


def test_the_example_in_the_format_document_is_a_valid_runbook() -> None:
    example = _fenced("yaml")[0]

    assert [str(i) for i in inspect_text(example, "example.yaml")] == []


def test_the_validate_output_in_the_format_document_is_what_validate_prints() -> None:
    shown = _fenced("text")[0].splitlines()
    issues = inspect_text((SPECS / "several-problems.yaml").read_text(), "several-problems.yaml")

    assert shown[0] == "$ runbook validate several-problems.yaml"
    assert shown[1:] == [str(i) for i in issues]
