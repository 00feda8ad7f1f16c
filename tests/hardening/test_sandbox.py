"""The Jinja2 sandbox of runbook expressions and templates (runbook/templating.py) refuses
escapes and bombs: each is a recorded expression/template error (or `runbook validate` reports
it), never executed, never a traceback.

Escapes: dunder attributes (`__class__`, `__mro__`, `__subclasses__`, `__globals__`,
`__builtins__`, `__init__.__globals__`), Jinja's helper globals (`lipsum`, `cycler`, `joiner`,
`namespace`: dropped), `self` (reserved), `config`/`request` (Flask's, undefined here), attribute
tricks (`|attr('__class__')`, `['__cl' ~ 'ass__']`, `str.format` fields, `%` formatting).
Bombs: `range(10**9)` and allocations Jinja's own sandbox does not bound (`'a' * 10**10`,
`2 ** 10**9`, printf and format widths, padding, `replace`, `join`, `batch`), refused before
anything is allocated. Each escape that got through would touch a marker file.

(tests/unit/test_templating.py checks five escapes on evaluate(); this covers the list in all
three environments, the bombs, and a run end to end.)
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runbook import templating
from runbook.errors import TemplateError
from tests.integration.conftest import cli_env

MARKER = Path(tempfile.gettempdir()) / f"rbk-sandbox-escaped-{os.getpid()}"
TOUCH = f"'touch {MARKER}'"

ESCAPES = [
    "x.__class__",
    "x.__class__.__mro__",
    "().__class__.__mro__[1].__subclasses__()",
    "().__class__.__base__.__subclasses__()",
    "x.__init__.__globals__",
    "x.__init__.__globals__['os'].system(" + TOUCH + ")",
    "__builtins__",
    "__builtins__.__import__('os').system(" + TOUCH + ")",
    "lipsum.__globals__['os'].system(" + TOUCH + ")",
    "cycler.__init__.__globals__.os.system(" + TOUCH + ")",
    "joiner.__init__.__globals__.os.system(" + TOUCH + ")",
    "namespace.__init__.__globals__.os.system(" + TOUCH + ")",
    "self",
    "self.__init__.__globals__",
    "self._TemplateReference__context",
    "config",
    "config.__class__.__init__.__globals__['os'].system(" + TOUCH + ")",
    "request.application.__globals__.__builtins__.__import__('os').system(" + TOUCH + ")",
    "x|attr('__class__')",
    "(x|attr('__class__')|attr('__mro__'))[1]|attr('__subclasses__')",
    "x['__cl' ~ 'ass__']",
    "x['__class__']['__mro__']",
    "'{0.__class__}'.format(x)",
    "'{0.__class__.__mro__[1].__subclasses__}'.format(x)",
    "'{0.__init__.__globals__[os]}'.format(x)",
    "'{a.__class__}'.format_map({'a': x})",
    "'%s' % x.__class__",
    "'%(a)s' % {'a': x.__class__}",
    "x.format_map.__self__.__class__",
    "facts.update({'pwned': 1})",
    "facts.a.append(1)",
    "facts.__class__.__base__.__subclasses__()",
    "range.__class__",
    "(1).__class__.__base__",
    "dict.mro()",
]
#: (expression, what the sandbox says) — each would allocate gigabytes or spin for minutes
BOMBS = [
    ("range(10**9)", "Range too big"),
    ("range(10**9) | list | length", "Range too big"),
    ("'a' * 10**10", "'*' of a str"),
    ("[1] * 10**9", "'*' of a list"),
    ("10**10 * 'a'", "'*' of a str"),
    ("(x ~ x) * 10**9", "'*' of a str"),
    ("2 ** (10**9)", "'**'"),  # Jinja's `**` is left-associative: parenthesise
    ("'%*d' % (10**9, 1)", "printf"),
    ("'%1000000000d' % 1", "printf"),
    ("'%.1000000000f' % 1.0", "printf"),
    ("'%1000000000d' | format(1)", "printf"),
    ("'{:>1000000000}'.format(1)", "format width"),
    ("'{0:{1}}'.format(1, 10**9)", "replacement field inside a format spec"),
    ("x.center(10**9)", "center"),
    ("x.ljust(10**9)", "ljust"),
    ("x.zfill(10**9)", "zfill"),
    ("('\t' * 1000).expandtabs(10**6)", "expandtabs"),
    ("x | center(10**9)", "center"),
    ("x | indent(10**9)", "indent"),
    ("('a' * 10**6).replace('a', 'a' * 10**6)", "replace"),
    ("('a' * 1000) | replace('', 'b' * 10**4)", "replace"),
    ("(['a' * 10**6] * 100) | join", "join"),
    ("('x' * 10**5).join(range(100) | map('string'))", "join"),
    ("[0] | batch(10**9, 0) | list", "batch"),
    ("[0] | slice(10**9) | list", "slice"),
]


@pytest.fixture(autouse=True)
def _nothing_escaped() -> Iterator[None]:
    MARKER.unlink(missing_ok=True)
    yield
    assert not MARKER.exists(), "an escape executed a command"


CONTEXT: dict[str, Any] = {"x": "s", "facts": {"a": [1]}, "vars": {}, "results": {}}


def _plain(value: Any) -> bool:
    """Data a runbook may see: JSON-like values, no object from outside the sandbox."""
    if value is None or isinstance(value, bool | int | float | str):
        return not (isinstance(value, str) and ("<" in value or "class" in value))
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


@pytest.mark.parametrize("expression", ESCAPES)
def test_an_escape_in_an_expression_is_an_error_or_undefined_never_an_object(
    expression: str,
) -> None:
    try:
        value = templating.evaluate(expression, CONTEXT)
    except TemplateError as exc:
        assert "\n" not in exc.one_line()
        return
    # an unsafe attribute is undefined (falsy, so a `when:` is false); a format field of one
    # renders as nothing
    assert value in (None, ""), f"{expression} gave {value!r}"
    assert _plain(value)


@pytest.mark.parametrize("expression", ESCAPES)
def test_an_escape_in_a_command_or_text_template_is_a_template_error(expression: str) -> None:
    for render in (templating.render_command, templating.render_text):
        try:
            out = render("echo {{ " + expression + " }}", CONTEXT)
        except TemplateError as exc:
            assert "\n" not in exc.one_line()
            continue
        # only a format field of an unsafe attribute renders (as nothing)
        assert out.strip() in ("echo", "echo ''"), f"{expression} rendered {out!r}"


@pytest.mark.parametrize(("expression", "said"), BOMBS)
def test_a_bomb_is_refused_before_it_allocates(expression: str, said: str) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(TemplateError, match=r"refused by the sandbox|Range too big") as refused:
        templating.evaluate(expression, CONTEXT)
    assert said in str(refused.value)
    with pytest.raises(TemplateError):
        templating.render_text("{{ " + expression + " }}", CONTEXT)
    assert time.monotonic() - started < 2
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 64, f"{expression}: peak RSS grew {grown_mib:.0f} MiB"


@pytest.mark.parametrize(
    "source",
    ["{{ '-' * 40 }}", "{{ '%#x' | format(255) }}", "{{ '{:>8}'.format(n) }}", "{{ 2 ** 62 }}",
     "{{ ['a', 'b'] | join(', ') }}", "{{ 'a-b' | replace('-', '[-_]') }}", "{{ 'x' | center(9) }}",
     "{{ '%s=%d' % ('n', n) }}", "{{ [1, 2, 3] | batch(2) | list }}", "{{ n | human_bytes }}"],
)  # fmt: skip
def test_what_real_runbooks_write_still_renders(source: str) -> None:
    assert templating.render_text(source, {"n": 42})


def test_self_is_reported_by_validate_and_refused_when_evaluated() -> None:
    for source in ("self", "self.x", "not self", "facts.a if self else 1"):
        assert "reserved" in (templating.check_expression(source) or ""), source
        with pytest.raises(TemplateError, match="reserved"):
            templating.evaluate(source, CONTEXT)
    assert "reserved" in (templating.check_template("{{ self }}") or "")


RUNBOOK = """\
id: sandbox-escapes
stages:
  - id: commands
    collect:
{collect}
      fine.txt: echo fine
    parse: text
    decide:
{rules}
  - id: after
    collect:
      after.txt: echo after
    parse: text
"""


#: validate refuses the name `self` (not the attribute `__self__`): see below
NAMES_SELF = [e for e in ESCAPES if re.search(r"\bself\b", e)]
RUNNABLE = [e for e in ESCAPES if e not in NAMES_SELF]


def _escape_runbook(escapes: list[str]) -> str:
    collect = "".join(
        f"      c{i}.txt: {json.dumps('echo {{ ' + e + ' }}')}\n" for i, e in enumerate(escapes)
    )
    rules = "".join(
        f"      - when: {json.dumps(e)}\n        finding: {json.dumps('{{ ' + e + ' }}')}\n"
        f"        evidence: {json.dumps(e)}\n"
        for e in [*escapes, *(b for b, _ in BOMBS)]
    )
    return RUNBOOK.format(collect=collect, rules=rules)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runbook", *args],
        capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_runbook_naming_self_is_refused_by_validate_and_by_run(tmp_path: Path) -> None:
    path = tmp_path / "self.yaml"
    path.write_text(_escape_runbook(ESCAPES))
    env = cli_env(tmp_path)
    valid = _cli(env, "validate", str(path))
    assert valid.returncode == 2
    reported = [line for line in valid.stderr.splitlines() if "'self' is reserved" in line]
    # each is in a command, a condition, a finding and an evidence expression
    assert len(reported) == 4 * len(NAMES_SELF) == 12, valid.stderr
    run = _cli(env, "run", str(path), "--target", "local", "--no-input")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "not a valid runbook" in run.stderr and "Traceback" not in run.stderr


def test_a_run_records_every_escape_as_an_error_and_runs_none_of_them(tmp_path: Path) -> None:
    """Every escape and bomb in a runbook's commands, conditions, findings and evidence: the
    walk ends (exit 0, a verdict), each is recorded on its stage, the stage after is walked,
    and nothing of them ran on the target."""
    path = tmp_path / "escapes.yaml"
    path.write_text(_escape_runbook(RUNNABLE))
    env = cli_env(tmp_path)
    valid = _cli(env, "validate", str(path))
    assert valid.returncode == 0, valid.stderr
    started = time.monotonic()
    run = _cli(env, "run", str(path), "--target", "local", "--format", "json", "--no-input",
               "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr
    assert time.monotonic() - started < 60
    stages = {s["id"]: s for s in json.loads(run.stdout)["stages"]}
    errors = stages["commands"]["errors"]
    for i, _ in enumerate(RUNNABLE):
        assert any(e.startswith(f"c{i}.txt: ") for e in errors), (i, errors)
    said_for = ("refused by the sandbox", "missing value", "Range too big", "not safely callable")
    assert all(any(s in e for s in said_for) for e in errors if e.startswith("c")), errors
    for _, said in BOMBS:
        assert any(said in e for e in errors), said
    assert stages["commands"]["facts"]["text"]["fine.txt"]["stdout"] == "fine\n"
    assert stages["after"]["status"] == "ok"
