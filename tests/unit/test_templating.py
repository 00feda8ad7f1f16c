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
    with pytest.raises(TemplateError, match="undefined"):
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
