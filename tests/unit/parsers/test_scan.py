"""The candidate-line scanner picks exactly the lines a naive line-by-line filter would, with the
right numbers, whatever the block size, in memory or streamed from a file."""

from __future__ import annotations

import itertools
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
        dmesg.candidate_lines(CommandResult("dmesg.txt", "", stdout=text)),
        numbered=True,
        collected_at="2026-03-04T10:40:00+00:00",
    )
    for field in ("memcg_ooms", "global_ooms", "page_alloc_failures", "pin_failures", "xids",
                  "fallen_off_bus", "aer", "aer_corrected", "catalog_hits", "totals"):  # fmt: skip
        assert getattr(picked, field) == getattr(whole, field), field


TALLY_LINE = st.sampled_from([
    "chatter", "x AER: Corrected error received: dev-a", "y AER: Corrected error received: dev-b",
    "dev-a only named", "AER: Corrected error received: id=dev-a\r", "a KEY here", "",
    "AER: Multiple Correctable error message received from dev-b", "OPEN block",
])  # fmt: skip


def naive_tally(text: str) -> dict[str, tuple[int, tuple[int, str], tuple[int, str]]]:
    import re

    found: dict[str, list] = {}  # type: ignore[type-arg]
    pattern = re.compile(dmesg.CORRECTED_AER.decode(), re.ASCII)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, 1):
        for key in pattern.findall(line):
            seen = found.setdefault(key, [0, (number, line.rstrip("\r")), None])
            seen[0] += 1
            seen[2] = (number, line.rstrip("\r"))
    return {k: (v[0], v[1], v[2]) for k, v in found.items()}


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(TALLY_LINE, max_size=60), block=st.integers(1, 80))
def test_the_tally_counts_what_a_line_by_line_count_does_whatever_the_blocks(
    tmp_path_factory, lines, block
) -> None:  # type: ignore[no-untyped-def]
    """Counted per key, with the first and last line of each, in memory or streamed in blocks
    of any size, beside the candidates (which it does not change)."""
    text = "\n".join(lines) + ("\n" if lines else "")
    path = tmp_path_factory.mktemp("tally") / "log.txt"
    path.write_text(text, encoding="utf-8")
    old_block = scan.BLOCK_BYTES
    try:
        streamed = CommandResult("x", "", source_path=str(path))
        sources = (CommandResult("x", "", stdout=text), streamed)
        for source, fast in itertools.product(sources, (scan._fast, None)):
            scan.BLOCK_BYTES = block if source.source_path else old_block
            scan.FAST = fast  # the C passes, or Python's
            tally = scan.Tally(dmesg.CORRECTED_AER_LITERALS)
            picked = scan.candidates(source, ["KEY"], {"OPEN": 2}, tally=tally)
            assert list(picked) == naive(text, ["KEY"], {"OPEN": 2})
            got = {k: (t.count, t.first, t.last) for k, t in tally.found.items()}
            assert got == naive_tally(text)
    finally:
        scan.BLOCK_BYTES, scan.FAST = old_block, scan._fast


def shaped_kernel_log(shape: str, lines: int = 3000) -> str:
    """A kernel log of one of the benchmark's shapes (benchmarks/analyze_throughput.py), the
    article's incident and an uncorrected AER record buried in it."""
    from benchmarks import analyze_throughput as bench

    body = bench.shaped_lines(shape, lines)
    at = "[Wed Mar  4 10:20:00 2026] "
    uncorrected = [
        f"{at}pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:1b:00.0",
        f"{at}nvidia 0000:1b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
        "type=Transaction Layer, (Receiver ID)",
        f"{at}nvidia 0000:1b:00.0:   device [10de:2330] error status/mask=00000020/00000000",
        f"{at}nvidia 0000:1b:00.0:    [ 5] SDES                   (First)",
    ]
    third = len(body) // 3
    return "\n".join(
        body[:third] + bench.DMESG_SIGNATURES + body[third : 2 * third] + uncorrected
        + body[2 * third :] + bench.DMESG_SIGNATURES
    ) + "\n"


@pytest.mark.parametrize("shape", ["quiet", "chatter", "aer", "aer-gpu"])
def test_the_fast_path_gives_the_slow_paths_facts_in_every_shape_and_engine(
    tmp_path: Path, shape: str
) -> None:
    """Line by line (every line decoded) and through the pre-filter with its tally (every
    engine, streamed in small blocks), a kernel log of each benchmark shape gives the same
    facts: every record, every total, the corrected-AER summary."""
    text = shaped_kernel_log(shape)
    path = tmp_path / "dmesg.txt"
    path.write_text(text)
    at = "2026-03-04T10:40:00+00:00"
    whole = dmesg.parse_dmesg(text.splitlines(), collected_at=at)
    assert whole.memcg_ooms and whole.xids and whole.fatal_aer  # the buried records
    if shape.startswith("aer"):
        assert sum(c.reports for c in whole.aer_corrected) > 100
    old_block, old_engine = scan.BLOCK_BYTES, scan.ENGINE
    try:
        for engine, fast in itertools.product(ENGINES, (scan._fast, None)):
            scan.ENGINE, scan.FAST = engine, fast
            scan.BLOCK_BYTES = 4096 + 7  # blocks end mid-line
            picked = dmesg.parse_dmesg(
                dmesg.candidate_lines(CommandResult("dmesg.txt", "", source_path=str(path))),
                numbered=True, collected_at=at,
            )  # fmt: skip
            assert dmesg.facts_dict(picked) == dmesg.facts_dict(whole), (engine, fast)
    finally:
        scan.BLOCK_BYTES, scan.ENGINE, scan.FAST = old_block, old_engine, scan._fast
