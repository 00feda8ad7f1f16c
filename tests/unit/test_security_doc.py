"""docs/security.md names the test behind each promise and each attack: every file and test
function it names exists, so a renamed or deleted test cannot leave a promise without proof."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "security.md"

# `tests/x/test_y.py`, `tests/x/test_y.py::test_z`, or `::test_z` (of the file named last)
_NAMED = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?`")


def named_tests(text: str) -> list[tuple[str, str | None]]:
    named: list[tuple[str, str | None]] = []
    last: str | None = None
    for match in _NAMED.finditer(text):
        path, test = match.group(1), match.group(2)
        if path:
            last = path
        if (path or test) and last:
            named.append((path or last, test))
    return named


def test_every_test_the_security_doc_names_exists() -> None:
    named = named_tests(DOC.read_text())
    assert len(named) > 60, named  # the doc is read, not skipped
    missing = [
        f"{path}::{test}" if test else path
        for path, test in named
        if not (REPO / path).is_file()
        or (test and not re.search(rf"^\s*def {test}\(", (REPO / path).read_text(), re.M))
    ]
    assert missing == []


def test_both_attack_tables_have_a_test_on_every_row() -> None:
    text = DOC.read_text()
    for title in ("## Attacks tried, first round", "## Attacks tried, second round"):
        section = text.split(title, 1)[1].split("\n## ", 1)[0]
        rows = [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
        assert rows, title
        for row in rows:
            assert "`tests/" in row.rsplit("|", 2)[1], row
