"""Templating: every substituted value is one inert shell word; the sandbox refuses escapes."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from runbook import templating
from runbook.errors import TemplateError

HOSTILE = [
    "$(touch /tmp/x); rm -rf /",
    "`id`",
    "a'b\"c",
    "; echo pwned",
    "line1\nline2",
    "--help",
    "*",
    "",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_reaches_the_shell_as_one_word(value: str) -> None:
    command = templating.render_command("printf '%s\\n' {{ v }}", {"v": value})
    assert shlex.split(command)[2] == value
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True)
    assert out.stdout == value + "\n"


def test_literal_template_text_is_left_as_shell_syntax() -> None:
    assert templating.render_command("cat {{ d }}/memory.stat | head -n 3", {"d": "/sys/x y"}) == (
        "cat '/sys/x y'/memory.stat | head -n 3"
    )


def test_shjoin_quotes_each_item_separately() -> None:
    command = templating.render_command("ls {{ paths | shjoin }}", {"paths": ["a b", "$(c)"]})
    assert shlex.split(command) == ["ls", "a b", "$(c)"]


def test_a_value_cannot_pretend_to_be_shell_safe() -> None:
    # a string from a variable is quoted even if it looks like quoted shell text
    assert templating.render_command("{{ v }}", {"v": "'a' ; b"}) != "'a' ; b"


def test_an_undefined_variable_in_a_command_is_an_error_not_an_empty_word() -> None:
    with pytest.raises(TemplateError, match="missing value: no value for 'missing'"):
        templating.render_command("cat {{ missing }}/x", {})


@pytest.mark.parametrize(
    "expression",
    [
        "().__class__.__mro__[1].__subclasses__()",
        "x.__class__.__init__.__globals__",
        "lipsum.__globals__",
        "cycler.__init__.__globals__.os",
        "facts.update({'a': 1})",
    ],
)
def test_sandbox_escapes_are_refused(expression: str) -> None:
    try:
        value = templating.evaluate(expression, {"x": "s", "facts": {}})
    except TemplateError:
        return
    # an unsafe attribute reads as undefined (None); never an object from outside the sandbox
    assert value is None


def test_missing_facts_are_falsy_in_conditions() -> None:
    assert not templating.evaluate("facts.cgroup.oom_kills", {"facts": {}})
    assert templating.evaluate("facts.cgroup is not defined", {"facts": {}}) is True


def test_search_and_match_tests_work_like_ansibles() -> None:
    ctx = {"out": "GPU 0: A100\nGPU 1: A100"}
    assert templating.evaluate("out is search('GPU 1')", ctx) is True
    assert templating.evaluate("out is match('GPU 1')", ctx) is False


def test_human_bytes_uses_binary_units() -> None:
    assert templating.render_text("{{ n | human_bytes }}", {"n": 671088640 * 1024}) == "640.0 GiB"


def test_syntax_errors_are_reported_by_the_checkers() -> None:
    assert templating.check_expression("facts.x >") is not None
    assert templating.check_template("{{ unclosed") is not None
    assert templating.check_expression("facts.x > 0") is None


# -- messages for people: rendered from the facts, never template text ----------------------------


NO_NODE = {
    "facts": {"kube": {"pod": {"name": "trainer-0"}}, "nccl_log": {"env": {"NCCL_NET": "IB"}}}
}


def test_a_message_naming_a_fact_the_node_did_not_give_renders_without_it() -> None:
    source = (
        "expects IB ({{ (facts.kube.node.rdma_labels | list | join(', ') ~ ' ') if "
        "facts.kube.node.rdma_labels }}{{ facts.nccl_log.env | dictsort | map('join', '=') "
        "| join(' ') }}){{ ' on ' ~ facts.kube.node.name if facts.kube.node.name }}"
    )
    assert templating.render_message(source, NO_NODE) == ("expects IB (NCCL_NET=IB)", None)


def test_a_missing_fact_renders_as_nothing_through_the_filters_that_take_one() -> None:
    source = (
        "[{{ facts.cgroup.peak | human_bytes }}|{{ facts.cgroup.peak | gib }}|"
        "{{ facts.x.env | dictsort | join(' ') }}|{{ facts.x.list | first }}]"
    )
    assert templating.render_message(source, {"facts": {}}) == ("[|||]", None)


def test_a_message_that_still_cannot_render_says_what_was_missing_in_plain_words() -> None:
    text, problem = templating.render_message(
        "{{ facts.kube.node.gpus + 1 }} GPUs, first {{ facts.nccl_log.warns[0].message }}",
        NO_NODE,
    )
    assert text is None
    assert problem == "kube.node and nccl_log.warns were not collected"


def test_a_message_whose_facts_are_there_but_of_another_kind_says_so_without_its_source() -> None:
    text, problem = templating.render_message(
        "{{ facts.a.n + 1 }} ranks", {"facts": {"a": {"n": "eight"}}}
    )
    assert text is None and problem is not None
    assert problem.startswith("the facts collected do not fit it (TypeError")
    assert "{{" not in problem and "facts.a.n" not in problem


def test_missing_facts_names_the_shortest_absent_path_once_in_order() -> None:
    source = "{{ facts.b.c.d }}{{ facts.a.x }}{{ facts.b.c.e }}{{ facts.a.items() }}{{ v }}"
    found = templating.missing_facts(source, {"facts": {"a": {"x": 1}, "b": {}}, "v": 1})
    assert found == ["b.c"]


def test_jinjas_missing_value_errors_are_said_without_its_vocabulary() -> None:
    with pytest.raises(TemplateError) as raised:
        templating.render_command("cat {{ facts.kube.node.name }}", {"facts": {"kube": {}}})
    message = raised.value.one_line()
    assert "missing value: no 'node' in the facts" in message
    assert "undefined" not in message.lower()


def test_a_derived_fact_no_stage_derives_is_a_load_time_error() -> None:
    names = templating.Names(frozenset(), frozenset({"rdma"}), frozenset({"multi_node"}))
    assert templating.check_template("{{ facts.derived.multi_node }}", names) is None
    problem = templating.check_template("{{ facts.derived.multinode }}", names)
    assert problem == "facts.derived.multinode: no stage derives it (did you mean 'multi_node'?)"
    assert templating.check_expression("facts.derived['multinode']", names) == problem


def test_strict_names_refuse_an_undeclared_variable_and_an_unparsed_parsers_facts() -> None:
    names = templating.Names(frozenset({"pod"}), frozenset({"rdma"}), frozenset(), strict=True)
    assert templating.check_expression("pod and facts.rdma.usable and node", names) is None
    local = "{% set e = 1 %}{% for x in [e] %}{{ x }}{{ loop.index }}{% endfor %}"
    assert templating.check_template(local, names) is None
    assert "unknown name 'podd'" in (templating.check_expression("podd", names) or "")
    assert "facts.rmda: no stage of the runbook parses 'rmda'" in (
        templating.check_template("{{ facts.rmda.usable }}", names) or ""
    )
    lenient = templating.Names(frozenset(), frozenset(), frozenset())
    assert templating.check_template("{{ podd }}{{ facts.rmda }}", lenient) is None


def test_prepare_compiles_without_rendering() -> None:
    templating.prepare("text", "{{ facts.nothing_here + 1 }}")
    templating.prepare("expr", "facts.nothing_here > 1")
    with pytest.raises(TemplateError, match="syntax error"):
        templating.prepare("command", "{{ unclosed")
