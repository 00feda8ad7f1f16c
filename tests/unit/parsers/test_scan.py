"""The candidate-line scanner picks exactly the lines a naive line-by-line filter would, with the
right numbers, whatever the block size, in memory or streamed from a file."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import dmesg, scan
from runbook.transports.base import CommandResult

SAMPLES = Path(__file__).parent / "samples"


def naive(text: str, keywords: list[str], after: dict[str, int]) -> list[tuple[int, str]]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    wanted, extend_to = [], 0
    for number, line in enumerate(lines, 1):
        hit = any(k in line for k in [*keywords, *after])
        if hit:
            extend_to = max(
                extend_to, number + max((n for k, n in after.items() if k in line), default=0)
            )
        if hit or number <= extend_to:
            wanted.append((number, line.rstrip("\r")))
    return wanted


LINE = st.sampled_from(
    ["chatter", "a KEY here", "OPEN block", "", "x" * 50, "KEYOPEN", "tail\r", "ünï"]
)


ENGINES = ("hyperscan", "re2", "find")


def test_every_search_engine_is_installed_here() -> None:
    # the equivalence below is only worth something if each engine really ran
    assert scan._re2 is not None
    assert scan._hs is not None or platform.machine() != "x86_64"


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(LINE, max_size=60), block=st.integers(1, 64), final_newline=st.booleans())
def test_every_engine_streamed_or_not_equals_a_naive_filter(
    tmp_path_factory, lines, block, final_newline
) -> None:  # type: ignore[no-untyped-def]
    text = "\n".join(lines) + ("\n" if final_newline and lines else "")
    expected = naive(text, ["KEY"], {"OPEN": 2})
    path = tmp_path_factory.mktemp("scan") / "log.txt"
    path.write_text(text, encoding="utf-8")
    old_block, old_engine = scan.BLOCK_BYTES, scan.ENGINE
    try:
        for engine in ENGINES:
            scan.ENGINE = engine
            in_memory = scan.candidates(CommandResult("x", "", stdout=text), ["KEY"], {"OPEN": 2})
            assert list(in_memory) == expected, engine
            scan.BLOCK_BYTES = block
            streamed = scan.candidates(
                CommandResult("x", "", source_path=str(path)), ["KEY"], {"OPEN": 2}
            )
            assert list(streamed) == expected, engine
            lines_in_text = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            assert streamed.total == lines_in_text
            scan.BLOCK_BYTES = old_block
    finally:
        scan.BLOCK_BYTES, scan.ENGINE = old_block, old_engine


@pytest.mark.parametrize("sample", sorted((SAMPLES / "dmesg").glob("*")), ids=lambda p: p.name)
def test_the_dmesg_prefilter_loses_no_record(sample: Path) -> None:
    text = sample.read_text(encoding="utf-8", errors="replace")
    whole = dmesg.parse_dmesg(text.splitlines(), collected_at="2026-03-04T10:40:00+00:00")
    picked = dmesg.parse_dmesg(
        scan.candidates(CommandResult("dmesg.txt", "", stdout=text), dmesg.KEYWORDS, dmesg.WINDOWS),
        numbered=True,
        collected_at="2026-03-04T10:40:00+00:00",
    )
    for field in ("memcg_ooms", "global_ooms", "page_alloc_failures", "pin_failures", "xids",
                  "fallen_off_bus", "aer"):  # fmt: skip
        assert getattr(picked, field) == getattr(whole, field), field
