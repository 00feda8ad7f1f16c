"""The guided walk on a terminal: every stage keeps its number, a skipped one too, and says why
it was skipped in a sentence, never as the expression that decided it."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from runbook import output
from runbook.executor import execute
from runbook.render.console import GuidedConsole
from runbook.session import replay_context
from runbook.spec import load_file, load_text, resolve
from runbook.spec.loader import read
from runbook.transports.local import LocalTransport
from runbook.transports.replay import ReplayTransport
from tests.tools import bundles


def _walk(runbook_text: str, **variables: object) -> str:
    out = io.StringIO()
    console = GuidedConsole(Console(file=out, width=200, color_system=None, highlight=False))
    execute(load_text(runbook_text), LocalTransport(), variables=variables, observer=console)
    return out.getvalue()


THREE = """\
id: three
vars: {deep: false}
stages:
  - id: first
    title: First
    collect: {one.txt: echo one}
    parse: text
  - id: deep
    title: Deep check
    when: deep | string | lower in ['1', 'true']
    skip_reason: the deep check runs only when asked, with --var deep=true
    collect: {two.txt: echo two}
    parse: text
  - id: plain
    title: Plain
    when: facts.text['one.txt'].stdout == 'nothing'
    collect: {three.txt: echo three}
    parse: text
  - id: last
    title: Last
    collect: {four.txt: echo four}
    parse: text
"""


@pytest.fixture(autouse=True)
def _loud(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "quiet", lambda: False)


def test_every_stage_keeps_its_number_and_a_skipped_one_says_why_in_a_sentence() -> None:
    shown = _walk(THREE)
    headers = re.findall(r"━━ (\d+)/(\d+) (.+) \((\S+)\)", shown)
    assert [(n, total, stage) for n, total, _, stage in headers] == [
        ("1", "4", "first"), ("2", "4", "deep"), ("3", "4", "plain"), ("4", "4", "last"),
    ]  # fmt: skip
    assert "skipped → plain (the deep check runs only when asked, with --var deep=true)" in shown
    # a stage whose runbook gives no reason is skipped in plain words too
    assert "skipped → last (its condition does not hold)" in shown
    assert "when:" not in shown and "lower in" not in shown and "is false" not in shown


def test_a_stage_that_runs_shows_no_skip_reason() -> None:
    shown = _walk(THREE, deep=True)
    assert "━━ 2/4 Deep check (deep)" in shown
    assert "runs only when asked" not in shown


def test_the_shipped_runbook_numbers_the_dcgm_diagnostic_it_skips_and_says_how_to_run_it() -> None:
    runbook = load_file(resolve("nccl-init-failure"))
    transport = ReplayTransport(bundles.path("healthy"))
    out = io.StringIO()
    console = GuidedConsole(Console(file=out, width=250, color_system=None, highlight=False))
    node, variables, context = replay_context(transport, {})
    try:
        execute(runbook, transport, variables=variables, context=context, observer=console,
                node=node)  # fmt: skip
    finally:
        transport.close()
    shown = out.getvalue()
    total = len(runbook.stages)
    position = [s.id for s in runbook.stages].index("dcgm-diag") + 1
    numbers = [int(n) for n in re.findall(rf"━━ (\d+)/{total} ", shown)]
    assert numbers == list(range(1, total + 1)), shown
    assert f"━━ {position}/{total} DCGM diagnostic (dcgm-diag)" in shown
    assert "give --var dcgm_diag=true" in shown
    assert "dcgm_diag |" not in shown and "{{" not in shown


def test_a_skip_reason_is_a_sentence_not_a_template() -> None:
    issues = [str(i) for i in read(THREE.replace("--var deep=true", "{{ deep }}")).errors]
    assert any(
        "stages[1].skip_reason: must be a plain sentence, not a template" in i for i in issues
    ), issues


def test_a_skip_reason_on_a_stage_that_is_never_skipped_is_a_warning() -> None:
    text = THREE.replace("    parse: text\n", "    skip_reason: never\n    parse: text\n", 1)
    issues = [str(i) for i in read(text).issues]
    assert any(
        "warning: stages[0].skip_reason: the stage has no `when`, so it is never skipped" in i
        for i in issues
    ), issues
