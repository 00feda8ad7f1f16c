"""Finding the few interesting lines of a huge log at C speed.

Most of a node's kernel log or kubelet journal is chatter. Running a parser's regular
expressions on every line costs microseconds a line in Python — minutes for a gigabyte. Here
the raw bytes are searched, block by block, for a handful of literal keywords in one pass;
only the lines that hold a keyword — plus, for keywords that open a multi-line record, the
lines after them — are decoded and handed to the parser, numbered as in the whole file so
evidence cites the right line.

The multi-literal search is the best engine the platform has (measured over 768 MiB of kernel
log, 19 keywords): Hyperscan (x86_64; SIMD literal matching) 0.25 s; RE2 (a DFA) 1.6 s; one
`bytes.find` pass per keyword 5.7 s. Python's `re` backtracks through an alternation at every
position and is slower still. Every engine gives the same lines. No library yields numbered
candidate lines for a Python state machine, hence this module; it does no I/O beyond reading
the file-backed evidence it is given.
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from runbook.transports.base import CommandResult

_hs: Any
try:  # which engines exist depends on the platform's wheels
    import hyperscan as _hs  # type: ignore[import-untyped,import-not-found,unused-ignore,no-redef]
except ImportError:  # pragma: no cover
    _hs = None
try:
    import re2 as _re2  # type: ignore[import-untyped,import-not-found,unused-ignore]
except ImportError:  # pragma: no cover
    _re2 = None
_fast: Any
try:  # built from _scanfast.c at install when a C compiler is there (pyproject.toml)
    from runbook.parsers import _scanfast as _fast  # type: ignore[attr-defined,no-redef,unused-ignore]
except ImportError:  # pragma: no cover
    _fast = None

BLOCK_BYTES = 16 * 1024 * 1024
#: the most of one line kept while looking for its end (a file of no newlines at all — a
#: sparse file, a binary — is read in constant memory)
MAX_LINE_BYTES = 1024 * 1024
#: the fastest engine installed: "hyperscan", "re2" or "find" (tests pin each in turn)
ENGINE = "hyperscan" if _hs is not None else "re2" if _re2 is not None else "find"
#: the C passes (newline count, tally; see _scanfast.c), None where they were not built: then
#: bytes.count and the tally's regular expression do the same work slower (tests pin both)
FAST: Any = _fast


def _newlines(data: bytes | bytearray, lo: int, hi: int) -> int:
    """The number of newlines in data[lo:hi]."""
    if FAST is not None:
        return int(FAST.newlines(data, lo, hi))
    return data.count(b"\n", lo, hi)


#: a block, how many of its bytes are the file's, the keyword offsets found in them (None: not
#: searched yet), and where a tally's lines may begin (_Finder.scan)
Block = tuple[bytes | bytearray, int, list[int] | None, int | None]


def _blocks(result: CommandResult, finder: _Finder) -> Iterator[Block]:
    """The evidence's bytes, block by block. A file is read, and each block searched for the
    keywords (`finder`), in a thread of its own one block ahead, into two buffers used in turn
    (a fresh 16 MiB object per read costs the kernel's page faults on new memory: ~20 % of the
    read time): a block is valid only until the next one is asked for. Reading and Hyperscan
    release the interpreter's lock, so they overlap the line counting and tallying here (on
    two cores, a quiet kernel log's scan in about half the time)."""
    if result.source_path is None or result.stdout:
        data = result.stdout.encode("utf-8", errors="surrogatepass")
        yield data, len(data), None, 0
        return
    free: queue.SimpleQueue[bytearray | None] = queue.SimpleQueue()
    for _ in range(2):
        free.put(bytearray(BLOCK_BYTES))
    ready: queue.SimpleQueue[Block | BaseException | None] = queue.SimpleQueue()
    # Hyperscan searches the block's second half in a thread of its own (a twin database: a
    # scratch space serves one thread), beside this one's search of the first half: the
    # search is the read-ahead's largest cost, and without the split it, not the counting
    # here, set the pace on two cores (a quiet 1 GiB log: the read-ahead about 1 s, the
    # counting 0.45 s; the whole analysis 1.8 s before the split, 1.5 s after)
    twin = finder.twin() if finder.database is not None else None
    halves: queue.SimpleQueue[tuple[bytearray, int, int] | None] = queue.SimpleQueue()
    halved: queue.SimpleQueue[tuple[list[int], int | None] | BaseException] = queue.SimpleQueue()

    def search_halves() -> None:
        assert twin is not None
        while (job := halves.get()) is not None:
            try:
                halved.put(twin.scan(*job))
            except BaseException as exc:  # handed to the read-ahead, raised there
                halved.put(exc)

    def search(buffer: bytearray, size: int) -> tuple[list[int], int | None]:
        # no keyword holds a line end: one cut after a newline splits no match
        mid = buffer.rfind(b"\n", 0, size // 2) + 1 if twin is not None else 0
        if mid == 0:
            return finder.scan(buffer, 0, size)
        halves.put((buffer, mid, size))
        offsets, tally_from = finder.scan(buffer, 0, mid)
        second = halved.get()
        if isinstance(second, BaseException):
            raise second
        return offsets + second[0], second[1] if tally_from is None else tally_from

    def read() -> None:
        try:
            with result.open_source() as handle:
                while (buffer := free.get()) is not None:
                    size = handle.readinto(memoryview(buffer))
                    if not size:
                        break
                    ready.put((buffer, size, *search(buffer, size)))
            ready.put(None)
        except BaseException as exc:  # handed to the reader below, raised there
            ready.put(exc)

    thread = threading.Thread(target=read, name="scan-read-ahead", daemon=True)
    thread.start()
    helper = None
    if twin is not None:
        helper = threading.Thread(target=search_halves, name="scan-search-half", daemon=True)
        helper.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
            buffer = item[0]
            if isinstance(buffer, bytearray):  # the consumer is done with it: read into it
                free.put(buffer)
    finally:
        free.put(None)  # a reader stopped early ends the thread too
        thread.join()
        if helper is not None:
            halves.put(None)
            helper.join()


def _decode(line: bytes | bytearray) -> str:
    return line.rstrip(b"\r").decode("utf-8", errors="replace")


class _Finder:
    """Offsets in a block where any keyword occurs (at least one per matching line); with
    Hyperscan, in the same pass, where the first of some `probes` occurs (a tally's literals:
    a block without them needs no tally search)."""

    def __init__(
        self, keys: tuple[bytes, ...], engine: str | None = None, probes: tuple[bytes, ...] = ()
    ) -> None:
        self.keys = keys
        self.probes = probes
        alternation = b"|".join(re.escape(k) for k in keys)
        self.pattern = None
        self.database = None
        engine = engine or ENGINE
        self._engine = engine
        if engine == "hyperscan" and _hs is not None and keys:
            # compiled per scan (~1 ms): a database's scratch space must not be shared
            # between the threads of a sweep
            self.database = _hs.Database()
            # a probe is reported once, at its first match (HS_FLAG_SINGLEMATCH)
            self.database.compile(
                expressions=[re.escape(k) for k in (*keys, *probes)],
                ids=list(range(len(keys) + len(probes))),
                elements=len(keys) + len(probes),
                flags=[0] * len(keys) + [_hs.HS_FLAG_SINGLEMATCH] * len(probes),
            )
        elif engine in ("hyperscan", "re2") and _re2 is not None and keys:
            options = _re2.Options()
            options.never_capture = True  # we only need where; ~15% faster
            self.pattern = _re2.compile(alternation, options)

    def twin(self) -> _Finder:
        """A finder of the same keywords and probes with a database of its own (for another
        thread)."""
        return _Finder(self.keys, self._engine, self.probes)

    def scan(self, block: bytes | bytearray, lo: int, hi: int) -> tuple[list[int], int | None]:
        """(the keywords' offsets in block[lo:hi], the offset of the first probe's last byte
        there: None when no probe occurs, `lo` when that is not known)."""
        if self.database is None:
            return list(self.offsets(block, lo, hi)), lo
        ends: list[int] = []
        probed: list[int] = []
        keys = len(self.keys)

        def found(ident: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            (ends if ident < keys else probed).append(lo + end - 1)

        self.database.scan(memoryview(block)[lo:hi], match_event_handler=found)
        if not self.probes:
            return ends, lo
        return ends, min(probed, default=None)

    def offsets(self, block: bytes | bytearray, lo: int, hi: int) -> Iterator[int]:
        if self.database is not None:
            yield from self.scan(block, lo, hi)[0]
            return
        if self.pattern is not None:
            for match in self.pattern.finditer(block, lo, hi):
                yield match.start()
            return
        for key in self.keys:  # fallback: one C-speed pass per keyword
            i = block.find(key, lo, hi)
            while i != -1:
                yield i
                end = block.find(b"\n", i, hi)
                i = block.find(key, end + 1, hi) if end != -1 else -1


@dataclass
class Tallied:
    """How many lines a Tally counted for one key, and the first and last of them."""

    count: int
    first: tuple[int, str]
    last: tuple[int, str]


@dataclass(frozen=True)
class Literals:
    """A pattern a storm's lines match, written so C can search it too: one literal of each
    step in turn (the alternatives tried in order, as a regular expression's alternation;
    b"" makes a step optional), then the key, one or more bytes that are not whitespace. The
    first step is one literal, where a match begins. `regex` is the same pattern for `re`."""

    steps: tuple[tuple[bytes, ...], ...]

    def __post_init__(self) -> None:
        if not self.steps or len(self.steps[0]) != 1 or not self.steps[0][0]:
            raise ValueError("Literals: the first step is one non-empty literal")
        if any(not step for step in self.steps):
            raise ValueError("Literals: a step without alternatives")

    def regex(self) -> bytes:
        """The regular expression of the steps, the key its one group."""
        parts = [
            re.escape(step[0]) if len(step) == 1 else b"(?:%s)" % b"|".join(map(re.escape, step))
            for step in self.steps
        ]
        return b"".join(parts) + rb"(\S+)"


class Tally:
    """Lines of a kind a storm repeats by the hundred thousand (a corrected PCIe AER report),
    counted per key instead of handed on one by one: `pattern` (bytes, one group: the key; or
    Literals) is searched over each block, a count per key, and only the first and last line
    of each key are decoded. A line the pattern matches is not a candidate unless a keyword or
    a window picks it too; the parser then recognises it and leaves it to the tally. After
    iteration, `found` holds a Tallied per key (str), in the order first seen.

    The search: Literals in C where _scanfast is built (FAST), else the regular expression's
    `finditer` and a dictionary per key. Over one 16 MiB block of the benchmark's GPU AER storm
    (a quarter of the records a report, devices changing along it), thread CPU, best of 9: C
    2.6 ms, finditer 16.4 ms (`re` walks byte by byte to the literal prefix, and each match
    costs a match object); its newline count: C 2.1 ms, bytearray.count 6.4 ms
    (`benchmarks.analyze_throughput --tally-costs`).
    Measured before that, over 48 MiB of a storm (39,200 reports): `findall` 34 ms and a
    `Counter` 2 ms; decoding and parsing those 157,000 lines one by one took 5 s.

    Where each key's first and last line lie comes from the same pass that counts them: a
    search per key per block for its first and last line cost 32× grep in a storm whose device
    changes along the log. The lines' numbers are counted by the scanner in its one pass over
    the block (`locate` names the line starts, `commit` takes their numbers)."""

    def __init__(self, pattern: bytes | Literals, probes: tuple[bytes, ...] = ()) -> None:
        self.literals = pattern if isinstance(pattern, Literals) else None
        self.pattern = re.compile(pattern.regex() if isinstance(pattern, Literals) else pattern)
        #: literals one of which every match of `pattern` holds (it begins with one): a block
        #: the keyword search found none of them in is not searched again for the tally
        self.probes = probes
        self.found: dict[str, Tallied] = {}
        #: the block being scanned: key -> [count, first match's offset, last match's offset]
        self._pending: dict[bytes, list[int]] = {}
        #: the line (start, end) around each offset _pending names
        self._spans: dict[int, tuple[int, int]] = {}

    def search(self, data: bytes | bytearray, lo: int, hi: int) -> dict[bytes, list[int]]:
        """key -> [count, offset of its first match, of its last] over data[lo:hi], keys in
        the order first seen."""
        if FAST is not None and self.literals is not None:
            found: dict[bytes, list[int]] = FAST.tally(data, lo, hi, self.literals.steps)
            return found
        # the first and last match of each key are kept whole: their offsets are read once
        matches: dict[bytes, list[Any]] = {}
        get = matches.get
        for match in self.pattern.finditer(data, lo, hi):
            key = match[1]
            seen = get(key)
            if seen is None:
                matches[key] = [1, match, match]
            else:
                seen[0] += 1
                seen[2] = match
        return {key: [n, first.start(), last.start()] for key, (n, first, last) in matches.items()}

    def locate(self, data: bytes | bytearray, lo: int, hi: int) -> list[int]:
        """Count the matching lines of data[lo:hi] (whole lines) per key and find each key's
        first and last line; the starts of those lines, in order (their numbers are wanted)."""
        pending = self.search(data, lo, hi)
        self._pending = pending
        self._spans = {}
        for _count, first, last in pending.values():
            for at in (first, last):
                if at not in self._spans:
                    start = data.rfind(b"\n", lo, at) + 1 or lo
                    end = data.find(b"\n", at, hi)
                    self._spans[at] = (start, hi if end < 0 else end)
        return sorted({start for start, _end in self._spans.values()})

    def commit(self, data: bytes | bytearray, numbers: Mapping[int, int]) -> None:
        """Record the block `locate` read, given the number of each line start it named."""
        for key, (count, first_at, last_at) in self._pending.items():
            first = self._line(data, first_at, numbers)
            last = self._line(data, last_at, numbers)
            name = _decode(key)
            seen = self.found.get(name)
            if seen is None:
                self.found[name] = Tallied(count, first, last)
            else:
                seen.count += count
                seen.last = last
        self._pending, self._spans = {}, {}

    def _line(
        self, data: bytes | bytearray, at: int, numbers: Mapping[int, int]
    ) -> tuple[int, str]:
        start, end = self._spans[at]
        return numbers[start], _decode(data[start:end])


class candidates:
    """Iterate for (line number, line) of every line holding one of `keywords`; a line holding
    a key of `after` also brings the `after[key]` lines that follow it. Line ends are stripped.
    After iteration, `total` is the number of lines and `first`/`last` the first and last."""

    def __init__(
        self,
        result: CommandResult,
        keywords: Iterable[str],
        after: Mapping[str, int] | None = None,
        tally: Tally | None = None,
    ) -> None:
        self.result = result
        #: lines counted, not handed on (see Tally); complete once iteration ends
        self.tally = tally
        keys = tuple(dict.fromkeys([*keywords, *(after or {})]))
        self._keys = tuple(k.encode() for k in keys)
        self._probes = tally.probes if tally is not None else ()
        self._finder = _Finder(self._keys, ENGINE)
        self._after = {k.encode(): n for k, n in (after or {}).items()}
        self._base = 1  # number of the first line of the next block
        self._extend_to = 0  # every line up to this number is wanted
        self.total = 0
        self.first: str | None = None
        self.last: str | None = None

    def __iter__(self) -> Iterator[tuple[int, str]]:
        # blocks are scanned in place between offsets (no copies of megabytes); only the
        # line split across two blocks is joined
        # the unfinished line at a block's end, grown in place (a line without an end for
        # megabytes is not copied again for every block)
        carry = bytearray()
        # the read-ahead thread searches with a finder of its own (a Hyperscan database's
        # scratch space serves one thread at a time)
        streamed = self.result.source_path is not None and not self.result.stdout
        ahead = _Finder(self._keys, ENGINE, self._probes) if streamed else self._finder
        for block, size, offsets, tally_from in _blocks(self.result, ahead):
            head = block.find(b"\n", 0, size) + 1
            if head == 0:  # no line ends in this block: a line longer than a line can be
                carry += block[: min(size, max(0, MAX_LINE_BYTES - len(carry)))]  # its head
                continue
            first_line = carry + block[:head]
            yield from self._scan(first_line, 0, len(first_line))
            cut = block.rfind(b"\n", 0, size) + 1
            if cut > head:
                yield from self._scan(block, head, cut, offsets, tally_from)
            carry = bytearray(block[cut:size])
        if carry:
            yield from self._scan(carry + b"\n", 0, len(carry) + 1)
        self.total = self._base - 1

    def _scan(
        self,
        data: bytes | bytearray,
        lo: int,
        hi: int,
        offsets: list[int] | None = None,
        tally_from: int | None = 0,
    ) -> Iterator[tuple[int, str]]:
        """The whole lines of data[lo:hi] (hi just after a newline). Lines are numbered by one
        walk over the block that counts each newline once: from one wanted line (a candidate,
        a line of a window, a tallied line) to the next."""
        if self.first is None:
            self.first = _decode(data[lo : data.find(b"\n", lo, hi)])
        self.last = _decode(data[data.rfind(b"\n", lo, hi - 1) + 1 : hi - 1])
        # keyword offsets the read-ahead found over the whole block, else searched here (no
        # keyword holds a line end: a match inside [lo, hi) starts there too)
        found = (
            self._finder.offsets(data, lo, hi)
            if offsets is None
            else (i for i in offsets if lo <= i < hi)
        )
        starts = {data.rfind(b"\n", lo, i) + 1 or lo for i in found}
        marks: set[int] = set()
        if self.tally is not None:
            # a tally's lines begin at the line of its first probe, if the block holds one
            begin = None if tally_from is None else data.rfind(b"\n", lo, tally_from) + 1 or lo
            marks = set(self.tally.locate(data, hi if begin is None else max(lo, begin), hi))
        numbers: dict[int, int] = {}  # a tallied line's start -> its number
        position, number = lo, self._base
        for start in sorted(starts | marks):
            if start < position:
                continue  # already yielded inside a window
            # the window of an earlier line may cover lines before this one
            while number <= self._extend_to and position < start:
                end = data.find(b"\n", position, hi)
                if position in marks:
                    numbers[position] = number
                yield number, _decode(data[position:end])
                position, number = end + 1, number + 1
            number += _newlines(data, position, start)
            position = start
            if start in marks:
                numbers[start] = number
            if start not in starts:
                continue  # a tallied line only: counted, not handed on
            end = data.find(b"\n", start, hi)
            line = data[start:end]
            window = max((n for key, n in self._after.items() if key in line), default=0)
            self._extend_to = max(self._extend_to, number + window)
            yield number, _decode(line)
            position, number = end + 1, number + 1
        while number <= self._extend_to and position < hi:
            end = data.find(b"\n", position, hi)
            yield number, _decode(data[position:end])
            position, number = end + 1, number + 1
        self._base = number + _newlines(data, position, hi)
        if self.tally is not None:  # the block is still valid here
            self.tally.commit(data, numbers)
