"""Memory sizes: parsing what people and Kubernetes write, and formatting what Kubernetes reads.

`parse_size` accepts

- plain bytes: `1073741824`, `1e9`, `512B`, `512 bytes`;
- binary units, in Kubernetes (`12Gi`, `512Mi`, `64Ki`, `1Ti`, `Pi`, `Ei`) and human (`4GiB`,
  `512MiB`) spellings, case-insensitive in the human form (`4gib`);
- decimal units as Kubernetes means them: `k`/`K` (10^3), `M` (10^6), `G` (10^9), `T` (10^12),
  `P`, `E`, and `KB`/`MB`/`GB`/`TB` alike (`1.5G` = 1 500 000 000 bytes: memory sizes in a
  pod spec are Kubernetes quantities, where `G` is decimal);
- Kubernetes' milli-suffix, which `kubectl` prints for computed values
  (`1288490188800m` = 1 288 490 188.8 bytes), rounded up to the next byte as Kubernetes does.

`quantity` formats bytes as the Kubernetes quantity a manifest should carry: rounded UP to a
whole MiB, written in `Gi` when that is exact, else in `Mi` (`12Gi`, `12289Mi`). `human`
formats for people (`12.0 GiB`).
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from runbook.errors import UsageError

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

_BINARY = {"ki": KiB, "mi": MiB, "gi": GiB, "ti": TiB, "pi": 1024**5, "ei": 1024**6}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15, "e": 10**18}
_SIZE = re.compile(
    r"^\s*(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$"
)


class SizeError(UsageError):
    """A size that is not one (exit 2, like any bad input)."""


def parse_size(text: str | int | float, what: str = "size") -> int:
    """Bytes in `text` (see the module docstring for the spellings), rounded up to a byte.

    Raises SizeError (one line, naming `what`) for anything else, and for a negative size.
    """
    if isinstance(text, bool):
        raise SizeError(f"{what}: {text!r} is not a size")
    if isinstance(text, int):
        number = Decimal(text)
    elif isinstance(text, float):
        if not math.isfinite(text):
            raise SizeError(f"{what}: {text!r} is not a size")
        number = Decimal(repr(text))
    else:
        match = _SIZE.match(text)
        if not match:
            raise SizeError(f"{what}: {text!r} is not a size (e.g. 12Gi, 4GiB, 512Mi, 1.5G)")
        try:
            number = Decimal(match["num"]) * _multiplier(match["unit"], text, what)
        except InvalidOperation:
            raise SizeError(f"{what}: {text!r} is not a size") from None
    if number < 0:
        raise SizeError(f"{what}: {text!r} is negative")
    try:
        return int(number.to_integral_value(rounding=ROUND_CEILING))
    except (InvalidOperation, OverflowError):
        raise SizeError(f"{what}: {text!r} is out of range") from None


def _multiplier(unit: str, text: str, what: str) -> Decimal:
    if unit in ("", "B", "b") or unit.lower() in ("byte", "bytes"):
        return Decimal(1)
    if unit == "m":  # Kubernetes milli (lowercase only: `M` is mega)
        return Decimal("0.001")
    lower = unit.lower()
    if lower.endswith("b") and len(lower) > 1:  # 4GiB, 4GB
        lower = lower[:-1]
    if lower in _BINARY:
        return Decimal(_BINARY[lower])
    if lower in _DECIMAL:
        return Decimal(_DECIMAL[lower])
    raise SizeError(f"{what}: {text!r}: unknown unit {unit!r} (use Ki, Mi, Gi, Ti, k, M, G, T)")


def round_up_mib(value: int) -> int:
    """`value` bytes rounded up to a whole MiB."""
    return -(-max(0, value) // MiB) * MiB


def quantity(value: int) -> str:
    """Bytes as a Kubernetes memory quantity, rounded up to a whole MiB: `Gi` when exact,
    else `Mi` (`quantity(12 * GiB) == "12Gi"`, `quantity(GiB + 1) == "1025Mi"`)."""
    mib = round_up_mib(value) // MiB
    return f"{mib // 1024}Gi" if mib and mib % 1024 == 0 else f"{mib}Mi"


def human(value: int | float | None, precision: int = 1) -> str:
    """Bytes for people, in binary units (`1.5 GiB`); `-` for None."""
    if value is None:
        return "-"
    number = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(number) < 1024 or unit == "TiB":
            return f"{number:.0f} B" if unit == "B" else f"{number:.{precision}f} {unit}"
        number /= 1024
    raise AssertionError("unreachable")
