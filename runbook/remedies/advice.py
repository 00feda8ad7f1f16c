"""`reduce-loader-memory` advice with numbers (pure): which term of the estimate dominates the
pod's peak, and what halving the loader workers, the prefetch depth or the per-rank cache
would save, in bytes and as the new peak and limit (recomputed by the estimate itself, so the
advice and the proposal never disagree). Each option says whether its limit would pass the
node guard that refused the current one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from runbook.remedies.estimate import Estimate, Input, Term, compute
from runbook.units import human, quantity


@dataclass(frozen=True)
class Option:
    change: str
    saves_bytes: int
    peak_bytes: int
    limit_bytes: int
    #: the guard's refusal of the new limit, "" when it would pass
    refused: str

    @property
    def text(self) -> str:
        fits = " (passes the node guard)" if not self.refused else " (still refused)"
        return (
            f"{self.change}: saves {human(self.saves_bytes)}, peak {human(self.peak_bytes)}, "
            f"limit {quantity(self.limit_bytes)}{fits}"
        )


@dataclass(frozen=True)
class Advice:
    dominant: Term | None
    #: the dominant term's share of the peak, 0..1
    share: float
    options: tuple[Option, ...]

    def lines(self) -> tuple[str, ...]:
        out = []
        if self.dominant is not None:
            out.append(
                f"largest term: {self.dominant.name} = {human(self.dominant.bytes)} "
                f"({self.share:.0%} of the peak)"
            )
        out.extend(o.text for o in self.options)
        return tuple(out)


def _halved(item: Input, what: str, whole: bool) -> Input:
    value = item.value or 0.0
    half = float(int(value // 2)) if whole else value / 2
    return Input(half, f"{what} halved from {value:g}" if whole else f"{what} halved")


def _option(estimate: Estimate, change: str, **inputs: Input) -> Option:
    new = compute(replace(estimate.inputs, **inputs))
    return Option(
        change=change,
        saves_bytes=estimate.peak_bytes - new.peak_bytes,
        peak_bytes=new.peak_bytes,
        limit_bytes=new.limit_bytes,
        refused=new.refused,
    )


def advise(estimate: Estimate) -> Advice:
    """The dominant term and the what-ifs that apply (a term that is zero has none)."""
    positive = [t for t in estimate.terms if t.bytes > 0]
    dominant = max(positive, key=lambda t: t.bytes) if positive else None
    share = dominant.bytes / estimate.peak_bytes if dominant and estimate.peak_bytes else 0.0
    i = estimate.inputs
    options: list[Option] = []
    if estimate.basis == "terms":
        workers = i.workers.value or 0.0
        if workers >= 1 and (i.worker_cache.value or 0) > 0:
            options.append(
                _option(
                    estimate,
                    f"halve the DataLoader workers ({workers:g} → {int(workers // 2)} per rank)",
                    workers=_halved(i.workers, "workers", whole=True),
                )
            )
        prefetch = i.prefetch.value or 0.0
        if prefetch >= 1 and (i.batch_buffer.value or 0) > 0:
            options.append(
                _option(
                    estimate,
                    f"halve the prefetch depth ({prefetch:g} → {int(prefetch // 2)} batches)",
                    prefetch=_halved(i.prefetch, "prefetch", whole=True),
                )
            )
        if (i.per_rank_cache.value or 0) > 0:
            options.append(
                _option(
                    estimate,
                    "halve the per-rank cache (dataset cache, index, vocabulary per rank)",
                    per_rank_cache=_halved(i.per_rank_cache, "per-rank cache", whole=False),
                )
            )
    return Advice(dominant, share, tuple(options))
