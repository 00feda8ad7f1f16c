"""Each node's clock offset, measured at collection time against the collector's clock.

Nodes of one job disagree about the time (NTP not running, a VM paused, a wrong RTC), and a
cross-node timeline built from their raw timestamps puts events in the wrong order. So before
its walk, every node is asked for `date +%s.%N` a few times over its own connection, each ask
bracketed by the collector's clock: the node read its clock somewhere between `sent` and
`received`, so

    offset      = node_time − (sent + received) / 2
    uncertainty = (received − sent) / 2

and the true offset lies within ±uncertainty of the estimate (whatever the asymmetry of the two
legs). The sample with the shortest round trip wins (as NTP's clock filter does); the node's
timestamps are corrected by subtracting the offset. The pure half (`best_offset`) is tested
alone; `measure_offset` is the I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from runbook.transports.base import Probe, Transport

#: how many round trips a node gets; the shortest wins
SAMPLES = 5
PROBE = "date +%s.%N"


@dataclass(frozen=True)
class ClockSample:
    sent: float
    node: float
    received: float

    @property
    def rtt(self) -> float:
        return self.received - self.sent

    @property
    def offset(self) -> float:
        return self.node - (self.sent + self.received) / 2


@dataclass(frozen=True)
class ClockOffset:
    """The node's clock minus the collector's, ± `uncertainty_s`."""

    offset_s: float
    uncertainty_s: float
    samples: int
    rtt_s: float

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("offset_s", "uncertainty_s", "rtt_s"):
            data[key] = round(data[key], 6)
        return data


def best_offset(samples: Sequence[ClockSample]) -> ClockOffset | None:
    """The estimate of the sample with the shortest round trip (None without a sample)."""
    usable = [s for s in samples if s.rtt >= 0]
    if not usable:
        return None
    best = min(usable, key=lambda s: s.rtt)
    return ClockOffset(best.offset, best.rtt / 2, len(usable), best.rtt)


def parse_epoch(text: str) -> float | None:
    """`date +%s.%N` output as seconds, or None (a `date` without %N prints a literal N)."""
    first = text.strip().split("\n", 1)[0].strip()
    try:
        value = float(first)
    except ValueError:
        try:
            value = float(first.split(".", 1)[0])
        except ValueError:
            return None
    return value if 1e8 < value < 1e11 else None


def measure_offset(
    transport: Transport,
    samples: int = SAMPLES,
    *,
    timeout: float = 5.0,
    clock: Callable[[], float] = time.time,
) -> ClockOffset | None:
    """Ask the node for its clock `samples` times; None when it never answered with one."""
    taken: list[ClockSample] = []
    for _ in range(max(1, samples)):
        sent = clock()
        result = transport.run(Probe("clock-offset", PROBE, timeout))
        received = clock()
        node = parse_epoch(result.stdout) if result.ok else None
        if node is None:
            break  # no clock to read (or the deadline is near): what was taken stands
        taken.append(ClockSample(sent, node, received))
    return best_offset(taken)
