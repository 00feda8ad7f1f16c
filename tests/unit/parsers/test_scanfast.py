"""The scanner's C passes (runbook/parsers/_scanfast.c) give Python's answers: the newline
count is bytes.count's, the tally is re.finditer's over the Literals' regular expression, for
any bytes and range; and the install built them (CI installs a compiler: a scanner silently
back on its Python passes would be 2× slower in an AER storm, not wrong, so only this test
would notice)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import dmesg, scan

FAST = scan._fast

#: the corrected-AER pattern as the kernel-format comment spells it, before it was Literals
FORMER = re.compile(
    rb"AER: (?:Multiple )?Correct(?:ed|able) error (?:message )?received(?::| from) (?:id=)?(\S+)"
)

#: pieces that make near misses likely: each step's literals, cut short, whitespace of every
#: kind \s knows (and \x1c, which str.isspace knows but a bytes pattern does not), high bytes
PIECE = st.sampled_from([
    b"AER: ", b"AER:", b"AE", b"Multiple ", b"Multiple", b"Correct", b"Correctable", b"ed",
    b"able", b" error ", b"message ", b"received", b":", b" from", b" ", b"id=", b"0000:3b:00.0",
    b"0000:3c:00.0", b"\n", b"\t", b"\x0b", b"\x0c", b"\r", b"\x1c", b"\xff\xfe", b"x",
    b"AER: Corrected error received: ", b"AER: Multiple Correctable error message received from ",
])  # fmt: skip
DATA = st.lists(PIECE, max_size=30).map(b"".join) | st.binary(max_size=200)


def python_tally(pattern: re.Pattern[bytes], data: bytes, lo: int, hi: int) -> dict:  # type: ignore[type-arg]
    found: dict[bytes, list[int]] = {}
    for match in pattern.finditer(data, lo, hi):
        seen = found.setdefault(match[1], [0, match.start(), 0])
        seen[0] += 1
        seen[2] = match.start()
    return found


def test_the_install_built_the_c_passes() -> None:
    assert FAST is not None, "runbook/parsers/_scanfast.c was not built: is a C compiler installed?"
    assert scan.FAST is FAST


@settings(max_examples=400, deadline=None)
@given(data=DATA, cut=st.tuples(st.integers(0, 220), st.integers(0, 220)))
def test_the_c_tally_is_finditers_for_any_bytes_and_range(
    data: bytes, cut: tuple[int, int]
) -> None:
    assert FAST is not None
    lo, hi = min(cut), max(cut)
    want = python_tally(FORMER, data, lo, hi)
    assert python_tally(re.compile(dmesg.CORRECTED_AER), data, lo, hi) == want
    got = FAST.tally(bytearray(data), lo, hi, dmesg.CORRECTED_AER_LITERALS.steps)
    assert got == want
    assert list(got) == list(want)  # keys in the order first seen


def test_a_key_ends_where_the_regular_expression_sees_whitespace_for_every_byte() -> None:
    assert FAST is not None
    for byte in range(256):
        for data in (
            b"AER: Corrected error received: 0000:3b" + bytes([byte]) + b"00.0\n",
            b"AER: Corrected error received:" + bytes([byte]) + b"0000:3b:00.0",
        ):
            want = python_tally(FORMER, data, 0, len(data))
            assert FAST.tally(data, 0, len(data), dmesg.CORRECTED_AER_LITERALS.steps) == want, byte


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"ab", b"b", b"c", b" ", b"\n", b"abc"])).map(b"".join),
    steps=st.lists(
        st.lists(st.sampled_from([b"a", b"b", b"ab", b"", b"c"]), min_size=1, max_size=3).map(
            tuple
        ),
        max_size=3,
    ),
)
def test_any_literals_search_as_their_regular_expression_with_its_backtracking(
    data: bytes, steps: list[tuple[bytes, ...]]
) -> None:
    """Alternatives that are prefixes of each other (b"a", b"ab") and empty ones: C tries
    them in order and backtracks where a later step fails, as `re` does."""
    assert FAST is not None
    literals = scan.Literals(((b"a",), *steps))
    want = python_tally(re.compile(literals.regex()), data, 0, len(data))
    assert FAST.tally(data, 0, len(data), literals.steps) == want


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=600) | DATA, cut=st.tuples(st.integers(0, 700), st.integers(0, 700)))
def test_the_c_newline_count_is_bytes_count(data: bytes, cut: tuple[int, int]) -> None:
    assert FAST is not None
    lo, hi = min(cut), max(cut)
    assert FAST.newlines(bytearray(data), lo, hi) == data.count(b"\n", lo, hi)


def test_a_long_block_of_newlines_counts_past_a_byte_counter() -> None:
    """More than 255 words of newlines: the per-byte lanes are summed before they wrap."""
    assert FAST is not None
    data = b"\n" * 100_003 + b"x\nx" * 1000
    assert FAST.newlines(data, 0, len(data)) == 101_003
    assert FAST.newlines(data, 5, 70_000) == 69_995


@pytest.mark.parametrize(
    ("steps", "error"),
    [
        ((), TypeError),
        (((),), TypeError),
        (((b"",),), ValueError),
        (((b"a", b"b"),), ValueError),
        (((b"a",), ("str",)), TypeError),
        ([(b"a",)], TypeError),
    ],
)
def test_malformed_steps_are_refused_not_read(steps: object, error: type[Exception]) -> None:
    assert FAST is not None
    with pytest.raises(error):
        FAST.tally(b"aaa", 0, 3, steps)


def test_negative_offsets_are_refused_and_ranges_past_the_end_are_cut() -> None:
    assert FAST is not None
    with pytest.raises(ValueError):
        FAST.newlines(b"a\n", -1, 2)
    assert FAST.newlines(b"a\nb\n", 1, 99) == 2
    assert FAST.newlines(b"a\nb\n", 3, 1) == 0
    assert FAST.tally(b"xay", 0, 99, ((b"a",),)) == {b"y": [1, 1, 1]}


def test_literals_refuse_a_first_step_c_cannot_anchor_on() -> None:
    for steps in [(), ((b"",),), ((b"a", b"b"),), ((b"a",), ())]:
        with pytest.raises(ValueError):
            scan.Literals(steps)
