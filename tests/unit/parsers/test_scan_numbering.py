"""Line numbers and record boundaries in the candidate scanner (runbook/parsers/scan.py) are
counted once per byte of input: equal to a naive count for any text, block size and hit
position (hits across block boundaries, CRLF line ends, no final newline), and found without
searching a block again for each device a corrected-AER storm names."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import dmesg, scan
from runbook.transports.base import CommandResult

KEYWORDS = ["KEY", "Xid"]
WINDOWS = {"OPEN": 2}
_CORRECTED = re.compile(dmesg.CORRECTED_AER.decode(), re.ASCII)

#: pieces a line is made of: keywords, a window opener, corrected reports of a few devices,
#: text that names a device without being a report, CR (a CRLF line end when last), non-ASCII
PIECE = st.sampled_from([
    "chatter ", "KEY", "Xid 79 ", "OPEN ", "AER: Corrected error received: 0000:3b:00.0",
    "AER: Corrected error received: 0000:3c:00.0", "nvidia 0000:3b:00.0: PCIe Bus Error ",
    "AER: Multiple Correctable error message received from 0000:00:1c.0", "\r", "ünï ", "x" * 40,
])  # fmt: skip
LINE = st.lists(PIECE, max_size=4).map("".join)


def naive_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def naive_candidates(text: str) -> list[tuple[int, str]]:
    wanted, extend_to = [], 0
    for number, line in enumerate(naive_lines(text), 1):
        hit = any(k in line for k in [*KEYWORDS, *WINDOWS])
        if hit:
            window = max((n for k, n in WINDOWS.items() if k in line), default=0)
            extend_to = max(extend_to, number + window)
        if hit or number <= extend_to:
            wanted.append((number, line.rstrip("\r")))
    return wanted


def naive_tally(text: str) -> dict[str, tuple[int, tuple[int, str], tuple[int, str]]]:
    found: dict[str, list] = {}  # type: ignore[type-arg]
    for number, line in enumerate(naive_lines(text), 1):
        for key in _CORRECTED.findall(line):
            seen = found.setdefault(key, [0, (number, line.rstrip("\r")), None])
            seen[0] += 1
            seen[2] = (number, line.rstrip("\r"))
    return {k: (v[0], v[1], v[2]) for k, v in found.items()}


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(LINE, max_size=40),
    final_newline=st.booleans(),
    block=st.integers(1, 97),
    engine=st.sampled_from(["hyperscan", "re2", "find"]),
    probes=st.booleans(),
    fast=st.booleans(),
)
def test_line_numbers_equal_a_naive_count_for_any_blocks_and_hits(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
    final_newline: bool,
    block: int,
    engine: str,
    probes: bool,
    fast: bool,
) -> None:
    text = "\n".join(lines) + ("\n" if final_newline and lines else "")
    path = tmp_path_factory.mktemp("numbering") / "log.txt"
    path.write_bytes(text.encode())
    old_block, old_engine = scan.BLOCK_BYTES, scan.ENGINE
    try:
        scan.ENGINE = engine
        scan.FAST = scan._fast if fast else None  # the C passes, or Python's
        scan.BLOCK_BYTES = block  # blocks end inside lines and inside keywords
        for result in (
            CommandResult("x", "", stdout=text),
            CommandResult("x", "", source_path=str(path)),
        ):
            probed = dmesg.CORRECTED_PROBES if probes else ()
            tally = scan.Tally(dmesg.CORRECTED_AER_LITERALS, probed)
            picked = scan.candidates(result, KEYWORDS, WINDOWS, tally=tally)
            assert list(picked) == naive_candidates(text)
            assert picked.total == len(naive_lines(text))
            got = {k: (t.count, t.first, t.last) for k, t in tally.found.items()}
            assert got == naive_tally(text)
    finally:
        scan.BLOCK_BYTES, scan.ENGINE, scan.FAST = old_block, old_engine, scan._fast


class _Counted(bytes):
    """A block that adds up how many bytes each search or count over it reads."""

    read = 0

    def count(self, sub, start=None, end=None):  # type: ignore[no-untyped-def,override]
        _Counted.read += self._span(start, end)
        return super().count(sub, start, end)

    def find(self, sub, start=None, end=None):  # type: ignore[no-untyped-def,override]
        i = super().find(sub, start, end)
        _Counted.read += (i if i >= 0 else self._span(start, end) + (start or 0)) - (start or 0)
        return i

    def rfind(self, sub, start=None, end=None):  # type: ignore[no-untyped-def,override]
        i = super().rfind(sub, start, end)
        stop = len(self) if end is None else end
        _Counted.read += stop - (i if i >= 0 else (start or 0))
        return i

    def _span(self, start: int | None, end: int | None) -> int:
        return (len(self) if end is None else end) - (start or 0)


class _CountedFast:
    """The C passes, adding up the bytes each call reads."""

    def newlines(self, data: bytes, lo: int, hi: int) -> int:
        _Counted.read += hi - lo
        return int(scan._fast.newlines(data, lo, hi))

    def tally(self, data: bytes, lo: int, hi: int, steps: object) -> dict:  # type: ignore[type-arg]
        _Counted.read += hi - lo
        return scan._fast.tally(data, lo, hi, steps)  # type: ignore[no-any-return]


@pytest.mark.parametrize("fast", [True, False], ids=["c", "python"])
def test_a_storm_naming_many_devices_is_numbered_in_one_pass_over_each_block(
    monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    """300 devices, each reporting in its own stretch of the block (a storm that moves along
    the log): the scanner reads each byte a few times, not once per device."""
    monkeypatch.setattr(scan, "FAST", _CountedFast() if fast else None)
    at = "[Wed Mar  4 09:00:00 2026] "
    lines = []
    for device in range(300):
        for _ in range(20):
            lines.append(
                f"{at}pcieport 0000:00:01.0: AER: Corrected error received: 0000:{device:03x}:00.0"
            )
            lines.append(f"{at}nvidia 0000:{device:03x}:00.0: PCIe Bus Error: severity=Corrected")
            lines.append(f"{at}audit: type=1400 chatter chatter chatter")
    lines.insert(
        len(lines) // 2, f"{at}NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    )
    text = "\n".join(lines) + "\n"
    block = _Counted(text.encode())

    def blocks(_result: CommandResult, _finder: object) -> Iterator[scan.Block]:
        yield block, len(block), None, 0

    monkeypatch.setattr(scan, "_blocks", blocks)
    _Counted.read = 0
    tally = scan.Tally(dmesg.CORRECTED_AER_LITERALS)
    picked = list(scan.candidates(CommandResult("dmesg.txt", ""), ["NVRM: Xid"], tally=tally))
    assert picked == [(len(lines) // 2 + 1, lines[len(lines) // 2])]
    assert len(tally.found) == 300
    assert {k: (t.count, t.first, t.last) for k, t in tally.found.items()} == naive_tally(text)
    assert _Counted.read <= 4 * len(block), f"{_Counted.read / len(block):.0f} reads per byte"
    if fast:  # the C count and tally each read it all (the spy sees them; not `re`'s reads)
        assert _Counted.read >= 2 * len(block)


def _read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "scan-read-ahead"]


def test_a_scan_stopped_early_leaves_no_read_ahead_thread_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dmesg.txt"
    path.write_text("".join(f"line {n} KEY\n" for n in range(2000)))
    monkeypatch.setattr(scan, "BLOCK_BYTES", 64)
    lines = iter(scan.candidates(CommandResult("x", "", source_path=str(path)), KEYWORDS))
    assert next(lines) == (1, "line 0 KEY")
    assert _read_ahead_threads()
    lines.close()  # type: ignore[attr-defined]
    assert not _read_ahead_threads()


def test_a_read_error_in_the_read_ahead_reaches_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dmesg.txt"
    path.write_text("".join(f"line {n} KEY\n" for n in range(2000)))
    monkeypatch.setattr(scan, "BLOCK_BYTES", 64)

    class Failing(io.FileIO):
        reads = 0

        def readinto(self, buffer):  # type: ignore[no-untyped-def,override]
            Failing.reads += 1
            if Failing.reads == 3:
                raise OSError(5, "Input/output error")
            return super().readinto(buffer)

    result = CommandResult("x", "", source_path=str(path))
    monkeypatch.setattr(CommandResult, "open_source", lambda self: Failing(str(path)))
    with pytest.raises(OSError, match="Input/output error"):
        list(scan.candidates(result, KEYWORDS))
    assert not _read_ahead_threads()


@pytest.mark.parametrize("fast", [True, False], ids=["c", "python"])
def test_the_tally_searches_only_from_the_first_report_of_a_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    """The keyword search (Hyperscan) notes where the first corrected report of a block is:
    the blocks before it are not searched again for the tally, and in its block the search
    starts at its line."""
    quiet = "".join(f"[ {n}.0] audit: type=1400 chatter\n" for n in range(4000))
    report = "[ 9.0] pcieport 0000:00:01.0: AER: Corrected error received: 0000:3b:00.0\n"
    path = tmp_path / "dmesg.txt"
    path.write_text(quiet + report + quiet[:3000])
    monkeypatch.setattr(scan, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(scan, "ENGINE", "hyperscan")
    monkeypatch.setattr(scan, "FAST", scan._fast if fast else None)
    tally = scan.Tally(dmesg.CORRECTED_AER_LITERALS, dmesg.CORRECTED_PROBES)
    searched: list[int] = []
    search = tally.search

    def spy(data, lo, hi):  # type: ignore[no-untyped-def]
        searched.append(hi - lo)
        return search(data, lo, hi)

    monkeypatch.setattr(tally, "search", spy)
    picked = scan.candidates(CommandResult("x", "", source_path=str(path)), KEYWORDS, tally=tally)
    assert list(picked) == []
    assert {k: (t.count, t.first[0]) for k, t in tally.found.items()} == {"0000:3b:00.0": (1, 4001)}
    # every block's first line is searched whole (it may join the last block's end); past
    # that, only the report's block, from the report's line on
    assert searched and sum(searched) < 3 * 4096, searched
