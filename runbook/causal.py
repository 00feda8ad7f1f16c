"""Causal ranking: which of several anomalies came first — the one function the node verdict,
the application-log summary and the job merge all order evidence with.

Timed evidence is ordered by time on the node's clock, earliest first. Untimed evidence
(most rank logs carry no timestamps; interleaved lines of different processes are not causal
order) is ordered by its role — a cause before a rank's own error, before a rank that lost a
peer, before where the failure surfaced — then by file and line. The two orders are merged:
the next item is the earliest timed one unless the best untimed one has a role strictly
stronger than every timed item still to come (an untimed cause goes before a timed lost peer,
never before a timed cause). The result does not depend on the input's order.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from runbook.signatures import ROLE_ORDER, role_rank

T = TypeVar("T")


def _get(item: Any, key: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(key)
    return getattr(item, key, None)


def parse_time(value: Any, local: dt.tzinfo | None = None) -> dt.datetime | None:
    """ISO 8601 as an aware datetime, or None. A naive time (`dmesg -T`, syslog, most
    application logs) is the node's local time: `local` when the node's UTC offset is known,
    else taken as UTC."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=local or dt.timezone.utc)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=local or dt.timezone.utc)


def _position(item: Any) -> tuple[str, int]:
    line = _get(item, "line")
    return (str(_get(item, "source") or ""), line if isinstance(line, int) else 1 << 62)


def _earlier_in_same_file(untimed: tuple[Any, ...], timed: tuple[Any, ...]) -> bool:
    """An untimed line above a timed line of the same role in the same file came first."""
    rank_u, source_u, line_u = untimed[0], untimed[1], untimed[2]
    rank_t, source_t, line_t = timed[1], timed[2], timed[3]
    return bool(rank_u == rank_t and source_u and source_u == source_t and line_u < line_t)


def causal_order(
    items: Iterable[T],
    *,
    local: dt.tzinfo | None = None,
    time_of: Callable[[T], Any] | None = None,
    role_of: Callable[[T], Any] | None = None,
    position_of: Callable[[T], tuple[str, int]] | None = None,
) -> list[T]:
    """`items` (evidence records or anything with `time`, `role`, `source`, `line`) in causal
    order (see the module docstring). `time_of`/`role_of` read them another way."""
    # a time inferred from an earlier line is a lower bound, not the line's time
    get_time = time_of or (lambda i: None if _get(i, "time_inferred") else _get(i, "time"))
    get_role = role_of or (lambda i: _get(i, "role"))
    get_position = position_of or _position
    timed: list[tuple[tuple[Any, ...], T]] = []
    untimed: list[tuple[tuple[Any, ...], T]] = []
    for index, item in enumerate(items):
        when = parse_time(get_time(item), local)
        rank = role_rank(get_role(item))
        if when is None:
            untimed.append(((rank, *get_position(item), index), item))
        else:
            timed.append(((when, rank, *get_position(item), index), item))
    timed.sort(key=lambda p: p[0])
    untimed.sort(key=lambda p: p[0])
    # the strongest role still to come among the timed items, from each position on
    strongest = [len(ROLE_ORDER)] * (len(timed) + 1)
    for k in range(len(timed) - 1, -1, -1):
        strongest[k] = min(timed[k][0][1], strongest[k + 1])
    out: list[T] = []
    i = j = 0
    while i < len(timed) or j < len(untimed):
        if j < len(untimed) and (
            i >= len(timed)
            or untimed[j][0][0] < strongest[i]
            or _earlier_in_same_file(untimed[j][0], timed[i][0])
        ):
            out.append(untimed[j][1])
            j += 1
        else:
            out.append(timed[i][1])
            i += 1
    return out
