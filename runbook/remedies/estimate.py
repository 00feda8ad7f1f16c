"""The pod's host-memory peak, term by term, and the request/limit it calls for (pure).

The incident write-up's arithmetic (§7), each term given or measured::

      per-rank cache  × ranks
    + worker cache    × workers per rank × ranks
    + prefetch depth  × batch buffer × ranks
    + pinned buffers  × ranks
    + tmpfs/shmem                          (the pod's; /dev/shm counts against its memory)
    + other processes                      (launcher, shells, sidecars in the same cgroup)
    = pod peak

    request = peak × request factor (default 1.0), limit = peak × headroom (default 1.2, the
    runbook's `memory_headroom`), both rounded up to a whole MiB.

What each term means when measured (`from_facts`, over the `procmem`, `cgroup` and `kube`
facts): the per-rank cache is the largest rank's anonymous memory (`RssAnon`: everything it
maps, its prefetch queue and pinned buffers included if they were allocated when it was read),
a worker's cache its own anonymous memory (its copy-on-write share with its rank taken out: see
runbook.parsers.procmem), shmem the cgroup's `shmem`. Prefetch depth (batches in flight per
rank: PyTorch's `prefetch_factor × num_workers`), the batch buffer and pinned buffers cannot be
read after the fact: they are given (`--prefetch`, `--batch-buffer`, `--pinned`; default 0) and
add to what was measured. When no process was measured and no per-rank cache given, the
cgroup's own peak is the estimate (said in `basis` and the warnings: at an OOM kill the peak is
the old limit, not the demand).

The guard refuses (`Estimate.refused`, one line with the numbers) a limit at or above the
node's allocatable memory, or above allocatable minus the system headroom (default
max(1 GiB, 5% of allocatable)): a pod limit that large turns a memcg OOM into a node OOM. A
limit below the measured cgroup peak is not refused but warned about: the pod would be
OOM-killed again.

Two entry points:

- ``from_facts(facts, overrides)``: `facts` as a run merges them (``{"cgroup": {...},
  "procmem": {...}, "kube": {...}}``); `overrides` are given values by name (see `NAMES`).
- ``from_params(params, overrides)``: the `memory-limit` proposal's rendered params (strings;
  empty means unknown), as the runbook's remedy entry declares them: `peak_bytes`,
  `limit_bytes`, `anon_bytes`, `shmem_bytes` (the cgroup's), `ranks`, `per_rank_anon_bytes`,
  `workers_per_rank`, `per_worker_anon_bytes`, `other_anon_bytes`, `node_allocatable_bytes`,
  `headroom`; and, when present, any override by its `NAMES` name (`prefetch`,
  `batch_buffer`, `pinned`, `system_reserved`, `request_factor`, ...). Call it when the
  proposal is made; ``Estimate.proposal_params()`` is what the approval shows and the
  playbook gets (`proposed_request_bytes`, `proposed_limit_bytes`, `refused`, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from runbook.errors import UsageError
from runbook.parsers.cgroup import slack
from runbook.units import GiB, human, parse_size, quantity, round_up_mib

#: the inputs by name: (kind, description); kind is `size`, `count` or `factor`
NAMES: dict[str, tuple[str, str]] = {
    "ranks": ("count", "ranks in the pod"),
    "per_rank_cache": ("size", "per-rank cache (anonymous memory of one rank)"),
    "workers": ("count", "DataLoader workers per rank"),
    "worker_cache": ("size", "one worker's own memory"),
    "prefetch": ("count", "batches in flight per rank"),
    "batch_buffer": ("size", "one batch's host buffer"),
    "pinned": ("size", "pinned host buffers per rank"),
    "shm": ("size", "tmpfs/shmem of the pod"),
    "other": ("size", "other processes in the cgroup"),
    "headroom": ("factor", "limit = peak × headroom"),
    "request_factor": ("factor", "request = peak × factor"),
    "allocatable": ("size", "node allocatable memory"),
    "system_reserved": ("size", "headroom the node keeps for the system"),
    "measured_peak": ("size", "the cgroup's measured peak"),
    "measured_limit": ("size", "the cgroup's current limit"),
}

DEFAULT_HEADROOM = 1.2
DEFAULT_REQUEST_FACTOR = 1.0


class EstimateError(UsageError):
    """Inputs the estimate cannot use (exit 2)."""


@dataclass(frozen=True)
class Input:
    """One input and where it came from: `measured: …`, `given: …`, `default…`, `not given`."""

    value: float | None
    source: str

    @property
    def known(self) -> bool:
        return self.value is not None


def _unknown(source: str = "not given") -> Input:
    return Input(None, source)


@dataclass(frozen=True)
class Inputs:
    ranks: Input = field(default_factory=_unknown)
    per_rank_cache: Input = field(default_factory=_unknown)
    workers: Input = field(default_factory=_unknown)
    worker_cache: Input = field(default_factory=_unknown)
    prefetch: Input = field(default_factory=_unknown)
    batch_buffer: Input = field(default_factory=_unknown)
    pinned: Input = field(default_factory=_unknown)
    shm: Input = field(default_factory=_unknown)
    other: Input = field(default_factory=_unknown)
    headroom: Input = field(default_factory=lambda: Input(DEFAULT_HEADROOM, "default"))
    request_factor: Input = field(default_factory=lambda: Input(DEFAULT_REQUEST_FACTOR, "default"))
    allocatable: Input = field(default_factory=_unknown)
    system_reserved: Input = field(default_factory=_unknown)
    measured_peak: Input = field(default_factory=_unknown)
    measured_limit: Input = field(default_factory=_unknown)

    def get(self, name: str) -> Input:
        value: Input = getattr(self, name)
        return value


@dataclass(frozen=True)
class Term:
    name: str
    formula: str
    bytes: int
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Estimate:
    inputs: Inputs
    terms: tuple[Term, ...]
    peak_bytes: int
    request_bytes: int
    limit_bytes: int
    #: `terms` (the formula) or `cgroup-peak` (nothing per process: the cgroup's own peak)
    basis: str
    allocatable_bytes: int | None
    system_reserved_bytes: int | None
    #: the largest limit the guard accepts (allocatable − system headroom)
    max_limit_bytes: int | None
    #: why the guard refuses the limit (one line with the numbers), or ""
    refused: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def request_quantity(self) -> str:
        return quantity(self.request_bytes)

    @property
    def limit_quantity(self) -> str:
        return quantity(self.limit_bytes)

    @property
    def below_measured_peak(self) -> bool:
        peak = self.inputs.measured_peak.value
        return peak is not None and self.limit_bytes < peak

    def term(self, name: str) -> Term | None:
        return next((t for t in self.terms if t.name == name), None)

    def describe(self) -> tuple[str, ...]:
        """The estimate as lines for a person approving it: each term, the peak and what it
        proposes, the node's bound, the warnings, and the refusal if any."""
        lines = [f"{t.name}: {t.formula} = {human(t.bytes)}" for t in self.terms]
        headroom = self.inputs.headroom.value
        factor = self.inputs.request_factor.value
        lines.append(
            f"pod peak {human(self.peak_bytes)}"
            + (" (the cgroup's own peak)" if self.basis == "cgroup-peak" else "")
            + f": request {self.request_quantity} (× {factor:g}),"
            f" limit {self.limit_quantity} (× {headroom:g})"
        )
        if self.allocatable_bytes is not None and self.max_limit_bytes is not None:
            lines.append(
                f"node allocatable {human(self.allocatable_bytes)} less "
                f"{human(self.system_reserved_bytes)} system headroom: limits up to "
                f"{human(self.max_limit_bytes)} accepted"
            )
        lines.extend(f"warning: {w}" for w in self.warnings)
        if self.refused:
            lines.append(f"refused: {self.refused}")
        return tuple(lines)

    def proposal_params(self) -> dict[str, str]:
        """What a memory-limit proposal carries (strings, as params are)."""
        ranks = self.inputs.ranks.value
        return {
            "estimated_peak_bytes": str(self.peak_bytes),
            "proposed_request_bytes": str(self.request_bytes),
            "proposed_limit_bytes": str(self.limit_bytes),
            "proposed_request": self.request_quantity,
            "proposed_limit": self.limit_quantity,
            "refused": self.refused,
            "node_allocatable_bytes": _str(self.allocatable_bytes),
            "max_limit_bytes": _str(self.max_limit_bytes),
            "ranks": _str(int(ranks) if ranks is not None else None),
            "basis": self.basis,
            "warnings": "; ".join(self.warnings),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "terms": [
                {"name": t.name, "formula": t.formula, "bytes": t.bytes, "sources": list(t.sources)}
                for t in self.terms
            ],
            "peak_bytes": self.peak_bytes,
            "request_bytes": self.request_bytes,
            "limit_bytes": self.limit_bytes,
            "request": self.request_quantity,
            "limit": self.limit_quantity,
            "basis": self.basis,
            "allocatable_bytes": self.allocatable_bytes,
            "system_reserved_bytes": self.system_reserved_bytes,
            "max_limit_bytes": self.max_limit_bytes,
            "measured_peak_bytes": _int(self.inputs.measured_peak.value),
            "measured_limit_bytes": _int(self.inputs.measured_limit.value),
            "below_measured_peak": self.below_measured_peak,
            "refused": self.refused,
            "warnings": list(self.warnings),
            "inputs": {
                name: {"value": self.inputs.get(name).value, "source": self.inputs.get(name).source}
                for name in NAMES
            },
        }


def _str(value: int | None) -> str:
    return "" if value is None else str(value)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


# --- the arithmetic ----------------------------------------------------------------------------


def default_system_reserved(allocatable: int) -> int:
    """max(1 GiB, 5% of the node's allocatable memory)."""
    return max(GiB, math.ceil(allocatable * 0.05))


def _check(inputs: Inputs) -> None:
    for name, (kind, what) in NAMES.items():
        value = inputs.get(name).value
        if value is None:
            continue
        if value < 0 or not math.isfinite(value):
            raise EstimateError(f"{name}: {value} is not a valid {what}")
        if kind == "count" and value != int(value):
            raise EstimateError(f"{name}: {value} is not a whole number ({what})")
    headroom = inputs.headroom.value
    if headroom is not None and headroom < 1.0:
        raise EstimateError(f"headroom {headroom} is below 1.0: the limit would be under the peak")
    factor = inputs.request_factor.value
    if factor is not None and factor <= 0:
        raise EstimateError(f"request factor {factor} must be above 0")
    ranks = inputs.ranks.value
    if ranks is not None and ranks < 1:
        raise EstimateError("ranks must be at least 1")


def _v(item: Input) -> float:
    return item.value if item.value is not None else 0.0


def _sources(*items: Input) -> tuple[str, ...]:
    return tuple(i.source for i in items)


def _times(value: float, factor: float) -> int:
    """ceil(value × factor), exact for decimal factors (1.2 is 6/5, not 1.19999…)."""
    return math.ceil(Fraction(str(value)) * Fraction(str(factor)))


def _rank_terms(inputs: Inputs, ranks: Input) -> list[Term]:
    n = _v(ranks)
    cache, workers, wcache = inputs.per_rank_cache, inputs.workers, inputs.worker_cache
    return [
        Term(
            "per-rank cache × ranks",
            f"{human(_v(cache))} × {n:g}",
            _times(_v(cache), n),
            _sources(cache, ranks),
        ),
        Term(
            "worker cache × workers × ranks",
            f"{human(_v(wcache))} × {_v(workers):g} × {n:g}",
            _times(_v(wcache), _v(workers) * n),
            _sources(wcache, workers, ranks),
        ),
    ]


def _extra_terms(inputs: Inputs, ranks: Input, pod_terms: bool) -> list[Term]:
    n = _v(ranks) if ranks.known else 1.0
    prefetch, batch, pinned = inputs.prefetch, inputs.batch_buffer, inputs.pinned
    terms = []
    if prefetch.known or batch.known:
        terms.append(
            Term(
                "prefetch depth × batch buffer × ranks",
                f"{_v(prefetch):g} × {human(_v(batch))} × {n:g}",
                _times(_v(batch), _v(prefetch) * n),
                _sources(prefetch, batch, ranks),
            )
        )
    if pinned.known:
        terms.append(
            Term(
                "pinned buffers × ranks",
                f"{human(_v(pinned))} × {n:g}",
                _times(_v(pinned), n),
                _sources(pinned, ranks),
            )
        )
    if pod_terms:
        shm, other = inputs.shm, inputs.other
        terms.append(Term("tmpfs/shmem", human(_v(shm)), int(_v(shm)), (shm.source,)))
        if other.known:
            terms.append(Term("other processes", human(_v(other)), int(_v(other)), (other.source,)))
    return terms


def _guard(limit: int, allocatable: int | None, reserved: int | None) -> str:
    if allocatable is None:
        return ""
    if limit >= allocatable:
        return (
            f"proposed limit {human(limit)} ({quantity(limit)}) is at or above the node's "
            f"allocatable {human(allocatable)}: reduce the peak first (reduce-loader-memory)"
        )
    if reserved is not None and limit > allocatable - reserved:
        most = max(0, allocatable - reserved)
        return (
            f"proposed limit {human(limit)} ({quantity(limit)}) exceeds the node's allocatable "
            f"{human(allocatable)} less {human(reserved)} system headroom "
            f"({human(most)}): reduce the peak first (reduce-loader-memory)"
        )
    return ""


def compute(inputs: Inputs) -> Estimate:
    """The estimate of `inputs` (EstimateError if there is nothing to estimate from)."""
    _check(inputs)
    ranks = inputs.ranks
    warnings: list[str] = []
    if inputs.per_rank_cache.known or inputs.worker_cache.known:
        basis = "terms"
        if not ranks.known:
            ranks = Input(1, "default: 1 (no rank count measured or given)")
            warnings.append("rank count unknown: 1 assumed (give --ranks)")
        terms = _rank_terms(inputs, ranks)
    elif inputs.measured_peak.known:
        basis = "cgroup-peak"
        measured = _v(inputs.measured_peak)
        terms = [
            Term(
                "measured cgroup peak",
                human(measured),
                int(measured),
                (inputs.measured_peak.source,),
            )
        ]
        old_limit = inputs.measured_limit.value
        if old_limit is not None and measured >= old_limit - slack(int(old_limit)):
            warnings.append(
                f"the cgroup peak {human(measured)} is its limit {human(old_limit)}: the demand "
                "that reached it is higher; measure the ranks (procmem) or give --per-rank-cache"
            )
        else:
            warnings.append("no per-process measurement: the cgroup's own peak is the estimate")
    else:
        raise EstimateError(
            "nothing to estimate from: no process measured, no --per-rank-cache, no cgroup peak"
        )
    terms += _extra_terms(inputs, ranks, pod_terms=basis == "terms")
    peak = sum(t.bytes for t in terms)
    headroom = inputs.headroom.value if inputs.headroom.value is not None else DEFAULT_HEADROOM
    factor = inputs.request_factor.value or DEFAULT_REQUEST_FACTOR
    limit = round_up_mib(_times(peak, headroom))
    request = round_up_mib(_times(peak, factor))
    if request > limit:
        warnings.append(f"request factor {factor:g} above headroom {headroom:g}: request capped")
        request = limit
    allocatable = _int(inputs.allocatable.value)
    reserved = _int(inputs.system_reserved.value)
    if allocatable is not None and reserved is None:
        reserved = default_system_reserved(allocatable)
    max_limit = None if allocatable is None or reserved is None else max(0, allocatable - reserved)
    if allocatable is None:
        warnings.append("node allocatable unknown: the limit was not checked against the node")
    measured_peak = inputs.measured_peak.value
    if measured_peak is not None and limit < measured_peak:
        warnings.append(
            f"proposed limit {human(limit)} is below the measured cgroup peak "
            f"{human(measured_peak)}: the pod would be OOM-killed again"
        )
    return Estimate(
        inputs=replace(inputs, ranks=ranks),
        terms=tuple(terms),
        peak_bytes=peak,
        request_bytes=request,
        limit_bytes=limit,
        basis=basis,
        allocatable_bytes=allocatable,
        system_reserved_bytes=reserved,
        max_limit_bytes=max_limit,
        refused=_guard(limit, allocatable, reserved),
        warnings=tuple(warnings),
    )


# --- where the inputs come from ----------------------------------------------------------------


def _number(name: str, value: Any) -> float | None:
    """An override's value as a number (sizes parsed: `12Gi`), None for None/""."""
    if value is None or value == "":
        return None
    kind = NAMES[name][0]
    if kind == "size":
        return float(parse_size(value, name.replace("_", "-")))
    if isinstance(value, bool):
        raise EstimateError(f"{name}: {value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise EstimateError(f"{name}: {value!r} is not a number") from None
    return number


def _apply(
    measured: Mapping[str, Input], overrides: Mapping[str, Any] | None, given: Callable[[str], str]
) -> Inputs:
    values = dict(measured)
    for name, value in (overrides or {}).items():
        if name not in NAMES:
            raise EstimateError(f"unknown estimate input {name!r} (known: {', '.join(NAMES)})")
        number = _number(name, value)
        if number is not None:
            label = given(name)
            if not label.startswith(("default", "given", "measured")):
                label = f"given: {label}"
            values[name] = Input(number, label)
    return Inputs(**values)


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _dig(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def measured_inputs(facts: Mapping[str, Any]) -> dict[str, Input]:
    """What the facts of a run (or a bundle) measured, each with its source: the processes
    first (ranks, their workers, the rest), then the cgroup and the node."""
    cgroup = _mapping(facts.get("cgroup"))
    procmem = _mapping(facts.get("procmem"))
    out = _process_inputs(procmem)
    out.update(_shm_input(cgroup, procmem))
    out.update(_cgroup_inputs(cgroup, rank_measured="per_rank_cache" in out))
    alloc = _num(_dig(facts, "kube", "node", "allocatable_memory_bytes"))
    if alloc is not None:
        out["allocatable"] = Input(alloc, "measured: node.json status.allocatable.memory")
    return out


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _process_inputs(procmem: Mapping[str, Any]) -> dict[str, Input]:
    """The rank count, the largest rank's and worker's own memory, the most workers under
    one rank and the other processes' memory, from the procmem facts."""
    out: dict[str, Input] = {}
    procs = [p for p in (_dig(procmem, "processes") or []) if isinstance(p, Mapping)]
    ranks = [p for p in procs if p.get("role") == "rank"]
    workers = [p for p in procs if p.get("role") == "worker"]
    others = [p for p in procs if p.get("role") == "other"]
    if ranks:
        out.update(_rank_inputs(ranks, _dig(procmem, "workers_per_rank") or {}))
    if workers:
        top = max(workers, key=lambda p: _num(p.get("own_anon_bytes")) or 0)
        own = _num(top.get("own_anon_bytes"))
        if own is not None:
            how = {
                "pss": "smaps_rollup Pss_Anon less its share of the rank's pages",
                "rss-difference": "status RssAnon less its rank's",
                "rss": "status VmRSS less its rank's",
            }.get(str(_dig(procmem, "method")), "own anonymous memory")
            out["worker_cache"] = Input(
                own, f"measured: /proc/{top.get('pid')} {how} (largest of {len(workers)} workers)"
            )
    other = _num(_dig(procmem, "other_anon_bytes"))
    if others and other is not None:
        names = ", ".join(sorted({str(p.get("name")) for p in others}))
        out["other"] = Input(other, f"measured: anon of {len(others)} other processes ({names})")
    return out


def _rank_inputs(
    ranks: list[Mapping[str, Any]], per_rank: Mapping[str, Any]
) -> dict[str, Input]:
    out: dict[str, Input] = {}
    pids = ", ".join(str(p.get("pid")) for p in ranks[:8]) + (", …" if len(ranks) > 8 else "")
    many = len(ranks) != 1
    out["ranks"] = Input(
        len(ranks), f"measured: {len(ranks)} rank process{'es' if many else ''} ({pids})"
    )
    biggest = max(ranks, key=lambda p: _num(p.get("own_anon_bytes")) or 0)
    anon = _num(biggest.get("own_anon_bytes"))
    if anon is not None:
        field_ = "RssAnon" if biggest.get("file_bytes") is not None else "VmRSS"
        out["per_rank_cache"] = Input(
            anon,
            f"measured: /proc/{biggest.get('pid')}/status {field_}"
            + (f" (largest of {len(ranks)} ranks)" if many else ""),
        )
    counts = [int(v) for v in per_rank.values() if isinstance(v, int)]
    if counts:
        most = max(counts)
        owner = next(k for k, v in per_rank.items() if v == most)
        out["workers"] = Input(
            most,
            f"measured: {most} workers under rank {owner}"
            + (" (the most of any rank)" if len(counts) > 1 else ""),
        )
    return out


def _shm_input(cgroup: Mapping[str, Any], procmem: Mapping[str, Any]) -> dict[str, Input]:
    """Shared memory charged to the cgroup, else the mapped shmem the processes show."""
    shm = _num(_dig(cgroup, "shmem_bytes"))
    if shm is not None:
        v1_total = "total_shmem" in (_dig(cgroup, "stat") or {})
        key = "total_shmem" if _dig(cgroup, "version") != 2 and v1_total else "shmem"
        return {"shm": Input(shm, f"measured: cgroup/memory.stat {key}")}
    mapped = _num(_dig(procmem, "total_pss_shmem_bytes"))
    if mapped is not None:
        return {"shm": Input(mapped, "measured: Σ smaps_rollup Pss_Shmem (mapped shmem only)")}
    return {}


def _cgroup_inputs(cgroup: Mapping[str, Any], *, rank_measured: bool) -> dict[str, Input]:
    """The cgroup's anonymous memory (only when no rank's own was measured), its peak (or
    its usage when no peak is recorded) and its limit, in the file names of its version."""
    out: dict[str, Input] = {}
    v2 = _dig(cgroup, "version") == 2
    anon = _num(_dig(cgroup, "anon_bytes"))
    if not rank_measured and anon is not None:
        stat_key = "anon" if v2 else "rss"
        out["cgroup_anon"] = Input(anon, f"measured: cgroup/memory.stat {stat_key}")
    peak = _num(_dig(cgroup, "peak_bytes"))
    usage = _num(_dig(cgroup, "usage_bytes"))
    if peak is not None:
        out["measured_peak"] = Input(
            peak, "measured: cgroup/" + ("memory.peak" if v2 else "memory.max_usage_in_bytes")
        )
    elif usage is not None:
        out["measured_peak"] = Input(
            usage,
            "measured: cgroup/"
            + ("memory.current" if v2 else "memory.usage_in_bytes")
            + " (no peak recorded)",
        )
    limit = _num(_dig(cgroup, "limit_bytes"))
    if limit is not None:
        out["measured_limit"] = Input(
            limit, "measured: cgroup/" + ("memory.max" if v2 else "memory.limit_in_bytes")
        )
    return out


def _finish(
    measured: dict[str, Input], overrides: Mapping[str, Any] | None, given: Callable[[str], str]
) -> Estimate:
    cgroup_anon = measured.pop("cgroup_anon", None)
    inputs = _apply(measured, overrides, given)
    if (
        not inputs.per_rank_cache.known
        and cgroup_anon is not None
        and inputs.ranks.known
        and not inputs.worker_cache.known
    ):
        # ranks given, processes not measured: the cgroup's anon shared out
        n = _v(inputs.ranks)
        inputs = replace(
            inputs,
            per_rank_cache=Input(
                math.ceil(_v(cgroup_anon) / n),
                f"{cgroup_anon.source} ÷ {n:g} ranks (workers included)",
            ),
        )
    return compute(inputs)


def from_facts(
    facts: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    *,
    given: Callable[[str], str] = _option,
) -> Estimate:
    """The estimate from a run's merged facts, `overrides` (by `NAMES` name; sizes may be
    strings like `12Gi`) taking precedence; `given(name)` words an override's source
    (default `--name`)."""
    return _finish(measured_inputs(facts), overrides, given)


#: memory-limit params → (input name, source)
_PARAMS: dict[str, tuple[str, str]] = {
    "ranks": ("ranks", "measured: procmem ranks"),
    "per_rank_anon_bytes": ("per_rank_cache", "measured: largest rank's RssAnon (procmem)"),
    "workers_per_rank": ("workers", "measured: most workers under one rank (procmem)"),
    "per_worker_anon_bytes": ("worker_cache", "measured: largest worker's own anon (procmem)"),
    "other_anon_bytes": ("other", "measured: anon of the other processes (procmem)"),
    "shmem_bytes": ("shm", "measured: cgroup memory.stat shmem"),
    "peak_bytes": ("measured_peak", "measured: cgroup peak"),
    "limit_bytes": ("measured_limit", "measured: cgroup limit"),
    "node_allocatable_bytes": ("allocatable", "measured: node allocatable"),
    "headroom": ("headroom", "runbook var memory_headroom"),
}


def from_params(params: Mapping[str, str], overrides: Mapping[str, Any] | None = None) -> Estimate:
    """The estimate from a `memory-limit` proposal's params (see the module docstring): the
    measured inputs the runbook rendered into them, plus any `NAMES` key present in `params`
    or `overrides` as a given value. Raises EstimateError (exit 2) on a value that is not a
    number, and when there is nothing to estimate from."""
    measured: dict[str, Input] = {}
    for key, (name, source) in _PARAMS.items():
        number = _param(params, key, name)
        if number is not None and not (name == "ranks" and number == 0):
            measured[name] = Input(number, source)
    anon = _param(params, "anon_bytes", "measured_peak")
    if anon is not None:
        measured["cgroup_anon"] = Input(anon, "measured: cgroup memory.stat anon")
    given = {k: v for k, v in params.items() if k in NAMES and k not in _PARAMS_NAMES}
    given.update(overrides or {})
    return _finish(measured, given, lambda name: f"params.{name}")


_PARAMS_NAMES = frozenset(name for name, _ in _PARAMS.values()) | frozenset(_PARAMS)


def _param(params: Mapping[str, str], key: str, name: str) -> float | None:
    text = params.get(key)
    if text is None or str(text).strip() in ("", "None"):
        return None
    kind = NAMES[name][0]
    try:
        return float(parse_size(str(text), key)) if kind == "size" else float(str(text))
    except ValueError:
        raise EstimateError(f"param {key}: {text!r} is not a number") from None
