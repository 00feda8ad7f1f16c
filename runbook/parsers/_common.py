"""Helpers shared by the evidence parsers: the evidence anchor, line streaming, timestamps,
and the JSON conversion that adapters apply to their frozen dataclasses.

Everything here is pure: no I/O, no clock. A parser that needs "which year is it" (journal and
glog timestamps carry none) is handed the bundle's `collected_at` and asks `TimeRef` for it.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeGuard

from runbook.transports.base import CommandResult

#: evidence text is clipped to this many characters
MAX_TEXT = 300
#: each anomaly list keeps at most this many records (the earliest); totals are still counted
MAX_RECORDS = 1000

MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """Where an anomaly was seen: bundle file, 1-based line, ISO time if known, the line."""

    source: str
    line: int
    time: str | None
    text: str


def clip(text: str) -> str:
    """The line as evidence: stripped and at most MAX_TEXT characters."""
    text = text.strip()
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def iter_lines(text: str) -> Iterator[str]:
    """Lines of `text` without building a list (a 1 GiB dmesg must not be copied twice)."""
    for line in io.StringIO(text):
        yield line.rstrip("\r\n")


def evidence_lines(
    text: str, source: str, matches: Callable[[str], object], limit: int = 20
) -> list[dict[str, Any]]:
    """The lines of a file that `matches` (given each stripped line) accepts, as untimed
    evidence records (file, 1-based line, the line), the first `limit` of them."""
    found: list[dict[str, Any]] = []
    for n, line in enumerate(iter_lines(text), 1):
        if matches(line.strip()):
            found.append({"source": source, "line": n, "time": None, "text": clip(line)})
            if len(found) >= limit:
                break
    return found


def containing(needle: str) -> Callable[[str], bool]:
    """For `evidence_lines`: the lines that hold `needle`."""
    return lambda line: needle in line


def to_jsonable(value: Any) -> Any:
    """Dataclasses to dicts, tuples to lists, mapping keys to strings (JSON round-trips)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


# --- collected files ---------------------------------------------------------------------------


def is_collected(result: CommandResult | None) -> TypeGuard[CommandResult]:
    """The file is evidence: it was collected and the command ran (a non-zero exit still counts)."""
    return result is not None and result.collected and result.failure is None


def says_absent(result: CommandResult | None) -> bool:
    """`ls`/`cat` said the path does not exist (exit 1 or 2 with ENOENT): evidence of absence."""
    if not is_collected(result):
        return False
    return result.exited not in (0, None) and (
        "No such file or directory" in result.stderr or "No such file or directory" in result.stdout
    )


def files_under(files: Mapping[str, CommandResult], prefix: str) -> list[tuple[str, CommandResult]]:
    """The collected files whose bundle name starts with `prefix`, sorted by name."""
    return sorted((k, v) for k, v in files.items() if k.startswith(prefix))


# --- time ----------------------------------------------------------------------------------------


def _parse_iso(text: str) -> datetime | None:
    """ISO 8601 in the spellings logs use: `T` or space, `,` or `.`, `Z`, `+0000`, 9 digits."""
    m = re.fullmatch(
        r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,](\d+))?\s?(Z|[+-]\d\d:?\d\d)?", text.strip()
    )
    if not m:
        return None
    date, hms, frac, tz = m.groups()
    s = f"{date}T{hms}"
    if frac:
        s += "." + frac[:6].ljust(6, "0")
    if tz:
        s += "+00:00" if tz == "Z" else (tz if ":" in tz else tz[:3] + ":" + tz[3:])
    try:
        return datetime.fromisoformat(s)
    except ValueError:
        return None


def iso(text: str) -> str | None:
    """Normalise an ISO-ish timestamp to `datetime.isoformat()`, or None."""
    parsed = _parse_iso(text)
    return parsed.isoformat() if parsed else None


def epoch_to_iso(seconds: float) -> str | None:
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def _finite(value: Any) -> float | None:
    """`value` as a finite float, else None (NaN, infinity and 10**400 are not times)."""
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def to_epoch(value: Any) -> float | None:
    """A context value (`now`, `collected_at`) as epoch seconds: a number or an ISO string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return _finite(value)
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        try:
            float(value)
        except ValueError:
            pass
        else:
            return _finite(value)
        parsed = _parse_iso(value)
        if parsed is None:
            return None
        dt = parsed
    else:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


class TimeRef:
    """Supplies the year for timestamps that lack one (syslog `Mar 04 10:12:01`, glog `E0304`).

    The year is that of `collected_at`; a month later than the collection month belongs to the
    year before (a journal collected in January reaching back into December).
    """

    def __init__(self, collected_at: str | None) -> None:
        ref = _parse_iso(collected_at) if collected_at else None
        self.year = ref.year if ref else None
        self.month = ref.month if ref else None

    def year_for(self, month: int) -> int | None:
        if self.year is None or self.month is None:
            return None
        return self.year - 1 if month > self.month else self.year

    def make(
        self, month: int, day: int, hms: str, frac: str | None = None, year: int | None = None
    ) -> str | None:
        year = year if year is not None else self.year_for(month)
        if year is None:
            return None
        try:
            h, mi, s = (int(x) for x in hms.split(":"))
            us = int(frac[:6].ljust(6, "0")) if frac else 0
            return datetime(year, month, day, h, mi, s, us).isoformat()
        except ValueError:
            return None


_CTIME = re.compile(
    r"^\[(?:[A-Z][a-z]{2} )?([A-Z][a-z]{2}) +(\d{1,2}) (\d\d:\d\d:\d\d)(?:[.,](\d+))? (\d{4})\] ?"
)
_MONO = re.compile(r"^\[\s*(\d{1,12}\.\d{1,9})(?:\s*<\s*\d{1,12}\.\d{1,9}>)?\] ?")
#: `dmesg -H` / `--reltime`: `[Mar 3 14:02] msg`, then `[  +0.000412] msg` for the next lines
_RELTIME = re.compile(r"^\[\s*\+\s*\d{1,12}\.\d{1,9}\] ?")
_HUMAN = re.compile(r"^\[([A-Z][a-z]{2}) ?(\d{1,2}) (\d\d:\d\d)(?::(\d\d))?\] ?")
_PRIO = re.compile(r"^<\d+>")
#: Talos `talosctl dmesg`: `192.168.1.9: kern: warning: [2026-04-22T21:25:20.5Z]: msg`
_TALOS = re.compile(
    r"^(?:\S{1,253}: )?kern:\s{0,10}\w{1,10}: "
    r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z)\]: ?"
)
_DMESG_X = re.compile(r"^[a-z]+\s*:[a-z]+\s*: ")
_ISO_PREFIX = re.compile(r"^(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?) ")
_SYSLOG = re.compile(
    r"^(?:(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
    r"|(?:[A-Z][a-z]{2} )?(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?"
    r"(?:Z|[+-]\d\d:?\d\d)?)(?: [A-Z]{2,5})?)"
    r" (?P<host>\S+) (?P<ident>[^\s:\[]+)(?:\[(?P<pid>\d+)\])?: ?(?P<msg>.*)$"
)


@dataclass(frozen=True)
class Stamp:
    """What a log line's prefix said: wall time (ISO), kernel monotonic seconds, the message."""

    time: str | None
    uptime_s: float | None
    message: str
    #: syslog/journal prefix fields, when the line had one
    host: str | None = None
    ident: str | None = None
    pid: int | None = None


def parse_syslog_prefix(line: str, ref: TimeRef) -> Stamp | None:
    """`journalctl` short / short-precise / short-iso / short-full lines (and /var/log/syslog)."""
    m = _SYSLOG.match(line)
    if not m:
        return None
    if m.group("iso"):
        time = iso(m.group("iso"))
    else:
        mon = m.group("mon")
        time = (
            ref.make(MONTHS[mon], int(m.group("day")), m.group("hms"), m.group("frac"))
            if mon in MONTHS
            else None
        )
    pid = m.group("pid")
    return Stamp(
        time, None, m.group("msg"), m.group("host"), m.group("ident"), int(pid) if pid else None
    )


def parse_kernel_prefix(line: str, ref: TimeRef, boot_epoch: float | None = None) -> Stamp | None:
    """The timestamp of a kernel log line, in any of the shapes collectors produce.

    `dmesg -T` `[Tue Mar  4 10:12:01 2025]`, plain `[ 1234.567890]` (wall time only when the
    boot time is known), `dmesg -d` `[ 1234.567890 <    0.000412>]`, `dmesg -H` (`[Mar 4
    10:12]`, then `[  +0.000412]`: untimed), `dmesg -r` `<6>[...]`, `dmesg -x`
    `kern  :err   : [...]`, `dmesg --time-format iso`, `journalctl -k` / syslog lines
    (`... kernel: [ 12.3] msg`) and Talos (`HOST: kern: warning: [ISO]: msg`).
    Returns None for a line without any timestamp (a continuation line).
    """
    line = _PRIO.sub("", line, count=1)
    line = _DMESG_X.sub("", line, count=1)
    m = _CTIME.match(line)
    if m:
        mon, day, hms, frac, year = m.groups()
        time = ref.make(MONTHS.get(mon, 1), int(day), hms, frac, year=int(year))
        return Stamp(time, None, line[m.end() :])
    m = _TALOS.match(line)
    if m:
        return Stamp(iso(m.group(1)), None, line[m.end() :])
    m = _HUMAN.match(line)
    if m:
        mon, day, hm, sec = m.groups()
        time = ref.make(MONTHS.get(mon, 1), int(day), f"{hm}:{sec or '00'}")
        return Stamp(time, None, line[m.end() :])
    m = _RELTIME.match(line)
    if m:
        # a delta to the line before: the time is not known to the second, the line is read
        return Stamp(None, None, line[m.end() :])
    m = _MONO.match(line)
    if m:
        uptime_s = float(m.group(1))
        time = epoch_to_iso(boot_epoch + uptime_s) if boot_epoch is not None else None
        return Stamp(time, uptime_s, line[m.end() :])
    syslog = parse_syslog_prefix(line, ref)
    if syslog is not None:
        msg = syslog.message
        uptime: float | None = None
        mono = _MONO.match(msg)
        if mono:
            uptime = float(mono.group(1))
            msg = msg[mono.end() :]
        return Stamp(syslog.time, uptime, msg, syslog.host, syslog.ident, syslog.pid)
    m = _ISO_PREFIX.match(line)
    if m:
        return Stamp(iso(m.group(1)), None, line[m.end() :])
    return None


# glog `E0304 10:12:01.123456 1234 file.cc:12]`; c10 logging drops the thread id and the month's
# leading zero: `[E304 10:12:31.886021000 ProcessGroupNCCL.cpp:616]`
_GLOG = re.compile(
    r"\b([IWEF])(\d{1,2})(\d\d) (\d\d:\d\d:\d\d)(?:\.(\d+))?(?: +\d+)? [^\s\]]+:\d+\]"
)
_ANY_ISO = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)")


def find_time(line: str, ref: TimeRef) -> str | None:
    """A wall-clock time anywhere near the start of an application log line, or None.

    ISO (`2025-03-04T10:12:01.123Z`, `2025-03-04 10:12:01,123`, `[2025-03-04 10:12:01]`), glog
    (`E0304 10:12:01.123456 1234 file.cc:12]`, year from `ref`), syslog prefixes.
    """
    head = line[:200]
    m = _ANY_ISO.search(head)
    if m and m.start() < 80:
        return iso(m.group(1))
    m = _GLOG.search(head)
    if m:
        _, mon, day, hms, frac = m.groups()
        return ref.make(int(mon), int(day), hms, frac)
    sys = parse_syslog_prefix(line, ref)
    return sys.time if sys else None


def add_seconds(iso_time: str, seconds: float) -> str | None:
    parsed = _parse_iso(iso_time)
    return (parsed + timedelta(seconds=seconds)).isoformat() if parsed else None


def context_ref(context: Mapping[str, Any]) -> TimeRef:
    """The TimeRef of a run: `collected_at` from the context, else none (times without a
    year then stay None rather than being guessed)."""
    value = context.get("collected_at")
    if isinstance(value, datetime):
        value = value.isoformat()
    return TimeRef(value if isinstance(value, str) else None)


def page_size(context: Mapping[str, Any]) -> int:
    value = context.get("page_size", 4096)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 4096


class Counter:
    """Bounded record lists: keep the first MAX_RECORDS, count them all."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}

    def keep(self, name: str, records: list[Any], record: Any) -> None:
        self.totals[name] = self.totals.get(name, 0) + 1
        if len(records) < MAX_RECORDS:
            records.append(record)
