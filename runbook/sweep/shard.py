"""`--shard K/N`: which hosts a shard sweeps. Stable: a host's shard is a function of its name
alone (sha256), so the N CronJob pods (or AWX slices) of a fleet split it the same way every
night whatever order the inventory lists hosts in, and adding a host moves no other. Pure."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TypeVar

from runbook.errors import UsageError

T = TypeVar("T")

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(text: str) -> tuple[int, int]:
    """`K/N` with 1 <= K <= N."""
    match = _SHARD.match(text)
    if not match:
        raise UsageError(f"--shard {text!r}: expected K/N, e.g. 2/8")
    k, n = int(match.group(1)), int(match.group(2))
    if not 1 <= k <= n:
        raise UsageError(f"--shard {text!r}: K must be between 1 and N")
    return k, n


def shard_of(name: str, n: int) -> int:
    """The shard (1..n) that sweeps host `name`."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


def select(items: Sequence[T], names: Sequence[str], k: int, n: int) -> list[T]:
    """The items of shard k of n (`names[i]` is the name of `items[i]`)."""
    return [item for item, name in zip(items, names, strict=True) if shard_of(name, n) == k]
