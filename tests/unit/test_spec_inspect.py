"""Inspection reports every problem in a runbook, each with its kind, path and line."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from runbook.parsers import registry
from runbook.spec import Issue, inspect_text

SPECS = Path(__file__).parent / "specs"


def issues_of(text: str) -> list[Issue]:
    return inspect_text(dedent(text), "rb.yaml")


def where(issues: list[Issue]) -> list[tuple[str, str, int]]:
    return [(i.kind, i.path, i.line) for i in issues]


def one(text: str, severity: str = "error") -> Issue:
    """The one issue of `severity` in `text` (it must have exactly one)."""
    found = [i for i in issues_of(text) if i.severity == severity]
    assert len(found) == 1, [str(i) for i in found]
    return found[0]


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


# -- syntax ------------------------------------------------------------------------------------


def test_a_yaml_syntax_error_is_reported_at_its_line() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
            title: [unclosed
        """)

    assert (issue.kind, issue.path, issue.line) == ("syntax", "", 5)
    assert issue.message.startswith("invalid YAML: ")


def test_a_top_level_list_is_not_a_runbook() -> None:
    issue = one("- id: x\n- id: y\n")

    assert (issue.kind, issue.path, issue.line) == ("syntax", "", 1)
    assert issue.message.startswith("must be a mapping")


def test_an_empty_file_is_not_a_runbook() -> None:
    issue = one("# nothing here\n")

    assert (issue.kind, issue.line) == ("syntax", 1)
    assert "empty" in issue.message


def test_an_unknown_key_is_reported_with_a_did_you_mean_at_its_line() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
            decde:
              - next: end
        """)

    assert (issue.kind, issue.path, issue.line) == ("syntax", "stages[0].decde", 4)
    assert issue.message == "unknown key 'decde' (did you mean 'decide'?)"


def test_unknown_keys_are_found_in_rules_rule_outs_remedies_and_the_top_level() -> None:
    issues = issues_of("""\
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
        """)

    assert [(i.path, i.line) for i in issues if i.message.startswith("unknown key")] == [
        ("titel", 2),
        ("stages[0].decide[0].whn", 6),
        ("stages[0].decide[0].rule_out.becuse", 7),
        ("remedies[0].sumary", 11),
    ]


def test_an_unknown_key_with_no_close_match_lists_the_known_keys() -> None:
    issue = one("id: x\nstages:\n  - id: a\n    colour: blue\n")

    assert issue.message == (
        "unknown key 'colour' (expected one of: collect, decide, derive, description, id, match, "
        "parse, timeout, title, when)"
    )


def test_a_duplicate_yaml_key_is_reported_at_the_second_one() -> None:
    issue = one("id: x\nstages:\n  - id: a\n    title: one\n    title: two\n")

    assert (issue.kind, issue.path, issue.line) == ("syntax", "stages[0].title", 5)
    assert issue.message == "duplicate key 'title' (first at line 4)"


@pytest.mark.parametrize(
    ("snippet", "path", "message"),
    [
        ("    collect: cat /proc/meminfo\n", "stages[0].collect", "must be a mapping"),
        ("    collect: {a.txt: [cat, x]}\n", "stages[0].collect['a.txt']", "must be a string"),
        ("    timeout: 0\n", "stages[0].timeout", "must be a positive number of seconds"),
        ("    timeout: soon\n", "stages[0].timeout", "must be a positive number of seconds"),
        ("    timeout: true\n", "stages[0].timeout", "must be a positive number of seconds"),
        ("    parse: 3\n", "stages[0].parse", "must be a name or a list of names"),
        ("    parse: [text, 3]\n", "stages[0].parse[1]", "must be a name"),
        ("    when: true\n", "stages[0].when", "must be a string, not the boolean true"),
        ("    decide: {next: end}\n", "stages[0].decide", "must be a list of rules"),
        ("    decide: [next]\n", "stages[0].decide[0]", "must be a mapping (a rule)"),
        ("    title:\n", "stages[0].title", "must be a string, not null"),
    ],
)
def test_a_value_of_the_wrong_type_is_reported_at_its_line(
    snippet: str, path: str, message: str
) -> None:
    issue = one("id: x\nstages:\n  - id: a\n" + snippet)

    assert (issue.kind, issue.path, issue.line) == ("syntax", path, 4)
    assert issue.message.startswith(message)


def test_missing_id_and_stages_are_reported_at_the_mapping() -> None:
    issues = issues_of("title: no id\n")

    assert [(i.kind, i.path, i.line, i.message) for i in issues] == [
        ("syntax", "", 1, "missing required key 'id'"),
        ("syntax", "", 1, "missing required key 'stages'"),
    ]


def test_an_empty_stage_list_is_an_error() -> None:
    issue = one("id: x\nstages: []\n")

    assert (issue.path, issue.line, issue.message) == ("stages", 2, "must list at least one stage")


def test_a_stage_without_id_and_a_remedy_without_kind_are_reported() -> None:
    issues = issues_of("""\
        id: x
        stages:
          - title: anonymous
        remedies:
          - id: r
        """)

    assert [(i.path, i.line, i.message) for i in issues if i.severity == "error"] == [
        ("stages[0]", 3, "missing required key 'id'"),
        ("remedies[0]", 5, "missing required key 'kind'"),
    ]


@pytest.mark.parametrize(
    ("text", "path", "line"),
    [
        ("id: NCCL_Init\nstages:\n  - id: a\n", "id", 1),
        ("id: x\nstages:\n  - id: Kernel Logs\n", "stages[0].id", 3),
        ("id: x\nstages:\n  - id: -a\n", "stages[0].id", 3),
        (
            "id: x\nstages:\n  - id: a\n    decide: [{propose: R_1}]\n"
            "remedies:\n  - {id: R_1, kind: collect-more}\n",
            "remedies[0].id",
            6,
        ),
    ],
)
def test_an_id_not_in_lowercase_and_dashes_is_reported(text: str, path: str, line: int) -> None:
    issue = one(text)

    assert (issue.kind, issue.path, issue.line) == ("syntax", path, line)
    assert "is not a valid id" in issue.message


def test_a_collect_name_outside_the_bundle_is_reported() -> None:
    issue = one("id: x\nstages:\n  - id: a\n    collect:\n      ../../etc/cron.d/x: id\n")

    assert (issue.kind, issue.path, issue.line) == (
        "syntax",
        "stages[0].collect['../../etc/cron.d/x']",
        5,
    )


def test_variable_names_must_be_identifiers_and_not_reserved() -> None:
    issues = issues_of("""\
        id: x
        vars:
          log-dir: /var/log
          facts: 1
          nested: {a: 1}
        stages:
          - id: a
        """)

    assert where(issues) == [
        ("syntax", "vars['log-dir']", 3),
        ("syntax", "vars.facts", 4),
        ("syntax", "vars.nested", 5),
    ]


# -- semantics ---------------------------------------------------------------------------------


def test_next_naming_no_stage_is_reported_at_its_line() -> None:
    issue = one("""\
        id: x
        stages:
          - id: gpu
            decide:
              - when: facts.text
                next: kernel-log
          - id: kernel-logs
        """)

    assert (issue.kind, issue.path, issue.line) == ("semantics", "stages[0].decide[0].next", 6)
    assert issue.message == "no stage named 'kernel-log' (did you mean 'kernel-logs'?)"
    assert str(issue) == (
        "rb.yaml:6: stages[0].decide[0].next: no stage named 'kernel-log' "
        "(did you mean 'kernel-logs'?)"
    )


def test_next_end_is_a_reserved_target_and_not_a_stage_id() -> None:
    assert issues_of("id: x\nstages:\n  - id: a\n    decide: [{next: end}]\n") == []

    issue = one("id: x\nstages:\n  - id: end\n")
    assert (issue.kind, issue.path, issue.line) == ("semantics", "stages[0].id", 3)
    assert "reserved" in issue.message


def test_a_duplicate_stage_id_is_reported_at_the_second_stage() -> None:
    issue = one("id: x\nstages:\n  - id: a\n  - id: b\n  - id: a\n")

    assert (issue.kind, issue.path, issue.line) == ("semantics", "stages[2].id", 5)
    assert issue.message == "duplicate stage id 'a' (first used by stages[0], line 3)"


def test_a_duplicate_remedy_id_is_reported_at_the_second_remedy() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
            decide: [{propose: r}]
        remedies:
          - {id: r, kind: collect-more}
          - {id: r, kind: node-drain}
        """)

    assert (issue.kind, issue.path, issue.line) == ("semantics", "remedies[1].id", 7)
    assert issue.message == "duplicate remedy id 'r' (first used by remedies[0], line 6)"


def test_an_unknown_parser_is_reported_with_a_did_you_mean() -> None:
    issue = one("id: x\nstages:\n  - id: a\n    parse: [text, keyvalu]\n")

    assert (issue.kind, issue.path, issue.line) == ("semantics", "stages[0].parse[1]", 4)
    assert issue.message == "no parser named 'keyvalu' (did you mean 'keyvalue'?)"


def test_an_unknown_parser_with_no_close_match_lists_the_known_parsers() -> None:
    issue = one("id: x\nstages:\n  - id: a\n    parse: zzzzzz\n")

    assert issue.path == "stages[0].parse"
    assert (
        issue.message == f"no parser named 'zzzzzz' (known: {', '.join(sorted(registry.names()))})"
    )


@pytest.mark.parametrize(
    ("rule", "path"),
    [
        ("{when: facts.a, conclude: oom}", "stages[0].decide[0].conclude"),
        ("{when: facts.a, finding: x, cause: oom}", "stages[0].decide[0].cause"),
        ("{rule_out: {cause: oom, because: x}}", "stages[0].decide[0].rule_out.cause"),
        (
            "{rule_out: [{cause: healthy, because: x}, {cause: oom, because: y}]}",
            "stages[0].decide[0].rule_out[1].cause",
        ),
    ],
)
def test_a_cause_that_is_not_a_root_cause_is_reported(rule: str, path: str) -> None:
    issue = one(f"id: x\nstages:\n  - id: a\n    decide:\n      - {rule}\n")

    assert (issue.kind, issue.path, issue.line) == ("semantics", path, 5)
    assert issue.message.startswith("'oom' is not a root cause (known: gpu-hardware, ")


def test_a_root_cause_typo_gets_a_did_you_mean() -> None:
    issue = one("id: x\nstages:\n  - id: a\n    decide:\n      - {conclude: host-memory-om}\n")

    assert issue.message == "'host-memory-om' is not a root cause (did you mean 'host-memory-oom'?)"


def test_a_remedy_kind_that_is_not_a_proposal_kind_is_reported() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
            decide: [{propose: drain}]
        remedies:
          - id: drain
            kind: node-drian
        """)

    assert (issue.kind, issue.path, issue.line) == ("semantics", "remedies[0].kind", 7)
    assert issue.message == "'node-drian' is not a proposal kind (did you mean 'node-drain'?)"


def test_propose_naming_no_remedy_is_reported_at_its_line() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
            decide:
              - when: facts.a
                propose: [drain, shm]
        remedies:
          - {id: drain, kind: node-drain}
        """)

    assert (issue.kind, issue.path, issue.line) == (
        "semantics",
        "stages[0].decide[0].propose[1]",
        6,
    )
    assert issue.message == "no remedy named 'shm' under remedies: (remedies: drain)"


def test_propose_in_a_runbook_without_remedies_says_so() -> None:
    issue = one("id: x\nstages:\n  - id: a\n    decide: [{propose: drain}]\n")

    assert issue.path == "stages[0].decide[0].propose"
    assert issue.message == "no remedy named 'drain': the runbook has no remedies:"


def test_a_rule_with_both_next_and_conclude_is_reported() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
            decide:
              - {when: facts.a, next: end, conclude: healthy}
        """)

    assert (issue.kind, issue.path, issue.line) == ("semantics", "stages[0].decide[0].next", 5)


def test_a_bundle_file_collected_twice_with_different_commands_is_reported() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
            collect: {dmesg.txt: dmesg}
          - id: b
            collect: {dmesg.txt: dmesg -T}
        """)

    assert (issue.kind, issue.path, issue.line) == (
        "semantics",
        "stages[1].collect['dmesg.txt']",
        6,
    )


# -- remedies only under remedies: -------------------------------------------------------------


@pytest.mark.parametrize("key", ["remedy: true", "playbook: drain.yml"])
def test_a_stage_that_changes_the_node_is_reported(key: str) -> None:
    issue = one(f"id: x\nstages:\n  - id: a\n  - id: drain-node\n    {key}\n")

    assert (issue.kind, issue.path, issue.line) == (
        "semantics",
        f"stages[1].{key.split(':')[0]}",
        5,
    )
    assert issue.message == (
        "stage 'drain-node' changes the node: declare it under remedies:, where it needs approval"
    )


def test_a_stage_marked_remedy_false_is_a_plain_stage() -> None:
    assert issues_of("id: x\nstages:\n  - id: a\n    remedy: false\n") == []


# -- the stage graph ---------------------------------------------------------------------------


def test_a_backward_next_that_closes_a_cycle_is_reported_at_its_line() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
          - id: b
            decide:
              - when: facts.text.retry
                next: a
          - id: c
        """)

    assert (issue.kind, issue.path, issue.line) == ("semantics", "stages[1].decide[0].next", 7)
    assert issue.message == "cycle in the stage graph: a -> b -> a; a walk must end"


def test_a_stage_routing_to_itself_is_a_cycle() -> None:
    issue = one("id: x\nstages:\n  - id: a\n    decide:\n      - {when: facts.a, next: a}\n")

    assert (issue.path, issue.line) == ("stages[0].decide[0].next", 5)
    assert issue.message == "cycle in the stage graph: a -> a; a walk must end"


def test_a_cycle_through_explicit_next_edges_names_every_stage_on_it() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
            decide: [{next: c}]
          - id: b
            decide: [{next: end}]
          - id: c
            decide: [{when: facts.x, next: b}, {next: a}]
        """)

    assert (issue.path, issue.line) == ("stages[2].decide[1].next", 8)
    assert issue.message == "cycle in the stage graph: a -> c -> a; a walk must end"


def test_a_skipped_stage_falls_through_even_when_its_rules_always_route() -> None:
    issue = one("""\
        id: x
        stages:
          - id: a
            decide: [{next: c}]
          - id: b
          - id: c
            when: vars.again
            decide: [{next: b}]
          - id: d
        """)

    # c -> b (rule) -> c (fall-through); c may be skipped, so d is still reachable
    assert (issue.path, issue.line) == ("stages[2].decide[0].next", 8)
    assert issue.message == "cycle in the stage graph: b -> c -> b; a walk must end"


def test_forward_routing_and_end_make_no_cycle() -> None:
    assert (
        issues_of("""\
        id: x
        stages:
          - id: a
            decide: [{when: facts.a, next: c}]
          - id: b
            decide: [{conclude: healthy}]
          - id: c
            decide: [{next: end}]
        """)
        == []
    )


def test_a_stage_no_walk_reaches_is_a_warning() -> None:
    issue = one(
        """\
        id: x
        stages:
          - id: a
            decide: [{next: c}]
          - id: b
          - id: c
        """,
        "warning",
    )

    assert (issue.kind, issue.path, issue.line) == ("semantics", "stages[1]", 5)
    assert issue.message == "stage 'b' is never reached from the first stage 'a'"


def test_rules_after_an_unconditional_routing_rule_are_a_warning() -> None:
    issues = issues_of("""\
        id: x
        stages:
          - id: a
            decide:
              - finding: always
              - next: end
              - when: facts.a
                finding: never
        """)

    assert [(i.severity, i.path, i.line) for i in issues] == [
        ("warning", "stages[0].decide[2]", 7),
    ]
    assert issues[0].message == (
        "rule is never evaluated: decide[1] above has no `when` and always routes"
    )


def test_a_remedy_no_rule_proposes_is_a_warning() -> None:
    issue = one(
        "id: x\nstages:\n  - id: a\nremedies:\n  - {id: r, kind: collect-more}\n", "warning"
    )

    assert (issue.path, issue.line) == ("remedies[0]", 5)
    assert issue.message == "remedy 'r' is never proposed by any rule"


# -- shell quoting -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "quotes"),
    [
        ("cat '{{ cgroup_dir }}/memory.events'", "single"),
        ('grep "{{ pattern }}" dmesg.txt', "double"),
        ("sh -c 'ls {{ dir }}'", "single"),
    ],
)
def test_a_substitution_inside_quotes_in_a_command_is_a_warning(command: str, quotes: str) -> None:
    issue = one(_yaml(command), "warning")

    assert (issue.kind, issue.path, issue.line) == ("semantics", "stages[0].collect['out.txt']", 5)
    assert f"is inside {quotes} quotes: templating shell-quotes every value itself" in issue.message


def _yaml(command: str) -> str:
    """A one-stage runbook collecting `command` as a YAML block scalar (no YAML quoting)."""
    return f"id: x\nstages:\n  - id: a\n    collect:\n      out.txt: >-\n        {command}\n"


@pytest.mark.parametrize(
    "command",
    [
        "printf '%s\\n' {{ value }}",
        "cat {{ cgroup_dir }}/memory.events",
        "tail -n 5 {{ logs | shjoin }} 2>/dev/null || echo 'no logs'",
        "echo \\'{{ x }}",
        "{% if verbose %}echo 'loud'{% endif %} {{ x }}",
    ],
)
def test_a_bare_substitution_is_not_a_warning(command: str) -> None:
    assert issues_of(_yaml(command)) == []


# -- expressions and templates -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("snippet", "path", "line"),
    [
        ("    when: vars.x ==\n", "stages[0].when", 4),
        ("    decide:\n      - when: facts.a >\n", "stages[0].decide[0].when", 5),
        ("    decide:\n      - {evidence: 'facts.a |'}\n", "stages[0].decide[0].evidence", 5),
        (
            "    decide:\n      - {evidence: facts.a | nosuchfilter}\n",
            "stages[0].decide[0].evidence",
            5,
        ),
    ],
)
def test_an_expression_that_does_not_compile_is_reported_with_the_jinja_message(
    snippet: str, path: str, line: int
) -> None:
    issue = one("id: x\nstages:\n  - id: a\n" + snippet)

    assert (issue.kind, issue.path, issue.line) == ("expression", path, line)
    assert issue.message.startswith("expression does not compile: syntax error: ")


def test_surfaced_as_must_compile() -> None:
    issue = one("id: x\nsurfaced_as: facts.applog[\nstages:\n  - id: a\n")

    assert (issue.kind, issue.path, issue.line) == ("expression", "surfaced_as", 2)


@pytest.mark.parametrize(
    ("snippet", "path", "line"),
    [
        ("    collect:\n      a.txt: cat {{ x\n", "stages[0].collect['a.txt']", 5),
        ("    decide:\n      - finding: '{{ x }'\n", "stages[0].decide[0].finding", 5),
        (
            "    decide:\n      - rule_out: {cause: healthy, because: '{% if %}'}\n",
            "stages[0].decide[0].rule_out.because",
            5,
        ),
    ],
)
def test_a_stage_template_that_does_not_compile_is_reported(
    snippet: str, path: str, line: int
) -> None:
    issue = one("id: x\nstages:\n  - id: a\n" + snippet)

    assert (issue.kind, issue.path, issue.line) == ("expression", path, line)
    assert issue.message.startswith("template does not compile: syntax error: ")


def test_remedy_summary_and_params_templates_must_compile() -> None:
    issues = issues_of("""\
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
        """)

    assert where(issues) == [
        ("expression", "remedies[0].summary", 8),
        ("expression", "remedies[0].params.limit", 10),
    ]


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


def test_a_node_that_cannot_be_read_keeps_the_paths_of_its_siblings() -> None:
    issues = issues_of("""\
        id: x
        stages:
          - just-a-string
          - id: b
            decide:
              - 3
              - {when: facts.a, next: nowhere}
        """)

    assert where([i for i in issues if i.severity == "error"]) == [
        ("syntax", "stages[0]", 3),
        ("syntax", "stages[1].decide[0]", 6),
        ("semantics", "stages[1].decide[1].next", 7),
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
