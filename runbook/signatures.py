"""The signature catalog (`runbook/data/signatures.yaml`) loaded, checked and compiled: what an
error line is, the root cause it implies, and its causal role.

Pure: the YAML ships inside the package and is read once. `classify(message)` answers for one
line whose launcher prefixes are already removed (`runbook.parsers.lines`).

Roles, strongest first (`ROLE_ORDER`): a `cause` names the root cause on this node; a
`local-error` is the rank's own failure; a `peer-consequence` is a rank that lost a peer; a
`surfaced` line is where the failure came out; `context` and `benign` lines are no anomaly of
the job by themselves.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from runbook.once import once

ROLES = ("cause", "local-error", "peer-consequence", "surfaced", "context", "benign")
ROLE_ORDER = {role: i for i, role in enumerate(ROLES)}
CLASSES = ("nccl", "cuda", "framework", "launcher", "scheduler", "kernel")
ROOT_CAUSES = (
    "host-memory-oom", "gpu-memory-oom", "gpu-hardware", "pcie-error", "shm-exhausted",
    "p2p-unavailable", "rdma-misconfigured", "network-socket", "peer-rank-exited",
    "collective-desync", "rank-stalled", "collective-hung",
)  # fmt: skip
#: a line longer than this is matched on its first MAX_MATCH characters only (a megabyte-long
#: line must cost what a normal one does; every signature sits near a line's start)
MAX_MATCH = 4096


class CatalogError(ValueError):
    """The shipped catalog is malformed (a packaging bug, caught by the tests)."""


@dataclass(frozen=True)
class Signature:
    id: str
    cls: str
    role: str
    cause: str | None
    patterns: tuple[str, ...]
    #: may match a line logged at INFO level (NCCL INFO lines are otherwise never errors)
    info: bool = False
    #: a finer label some rules use (`killed`, `exception`)
    kind: str | None = None
    seen_in: str = ""
    #: literal words, one of which every line a kernel pattern matches holds: the kernel log's
    #: pre-filter hands the parser only lines holding a keyword (runbook/parsers/scan.py)
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Catalog:
    signatures: tuple[Signature, ...]
    compiled: tuple[tuple[Signature, re.Pattern[str]], ...]

    @functools.cached_property
    def any_pattern(self) -> re.Pattern[str]:
        """One alternation of every pattern: a line that misses it is no signature (one
        search). Compiled when first asked (a third of the catalog's load; a run whose logs
        hold no error line never asks)."""
        return re.compile("|".join(f"(?:{p})" for s in self.signatures for p in s.patterns))

    @property
    def kernel_keywords(self) -> tuple[str, ...]:
        """The keywords of every kernel signature, each once."""
        words = (w for s in self.signatures if s.cls == "kernel" for w in s.keywords)
        return tuple(dict.fromkeys(words))

    def by_id(self, sig_id: str) -> Signature:
        for sig in self.signatures:
            if sig.id == sig_id:
                return sig
        raise KeyError(sig_id)

    def classify(self, message: str, *, kernel: bool = False) -> Signature | None:
        """The first signature (in catalog order) whose pattern the message holds, or None.
        Kernel entries match only kernel lines (`kernel=True`) and only they do there."""
        text = message[:MAX_MATCH]
        if not self.any_pattern.search(text):
            return None
        info = "NCCL INFO" in text
        for sig, pattern in self.compiled:
            if (sig.cls == "kernel") != kernel:
                continue
            if info and not sig.info:
                continue
            if pattern.search(text):
                return sig
        return None


def _entry(raw: Any, index: int) -> Signature:
    where = f"signatures[{index}]"
    if not isinstance(raw, dict):
        raise CatalogError(f"{where}: expected a mapping")
    sig_id = raw.get("id")
    if not isinstance(sig_id, str) or not sig_id:
        raise CatalogError(f"{where}.id: expected a name")
    where = f"signature {sig_id!r}"
    role, cls, cause = raw.get("role"), raw.get("class"), raw.get("cause")
    if role not in ROLES:
        raise CatalogError(f"{where}: role {role!r} is not one of {ROLES}")
    if cls not in CLASSES:
        raise CatalogError(f"{where}: class {cls!r} is not one of {CLASSES}")
    if cause is not None and cause not in ROOT_CAUSES:
        raise CatalogError(f"{where}: cause {cause!r} is not a root cause")
    patterns = raw.get("patterns")
    if (
        not isinstance(patterns, list)
        or not patterns
        or not all(isinstance(p, str) and p for p in patterns)
    ):
        raise CatalogError(f"{where}: patterns must be a non-empty list of strings")
    try:
        re.compile("|".join(f"(?:{p})" for p in patterns))
    except re.error:
        for p in patterns:  # name the pattern at fault
            try:
                re.compile(p)
            except re.error as exc:
                raise CatalogError(f"{where}: pattern {p!r}: {exc}") from None
        raise CatalogError(f"{where}: its patterns do not combine") from None
    keywords = raw.get("keywords", [])
    if not isinstance(keywords, list) or not all(isinstance(k, str) and k for k in keywords):
        raise CatalogError(f"{where}: keywords must be a list of non-empty strings")
    if cls == "kernel":
        # the pre-filter must never hide a line a pattern matches: each pattern holds one
        # of the keywords as literal text
        if not keywords:
            raise CatalogError(f"{where}: a kernel signature needs keywords (the pre-filter's)")
        for p in patterns:
            if not any(k in p for k in keywords):
                raise CatalogError(f"{where}: pattern {p!r} holds none of its keywords")
    return Signature(
        id=sig_id,
        cls=cls,
        role=role,
        cause=cause,
        patterns=tuple(patterns),
        info=bool(raw.get("info", False)),
        kind=raw.get("kind"),
        seen_in=str(raw.get("seen_in", "")),
        keywords=tuple(keywords),
    )


def build(data: Any) -> Catalog:
    """A Catalog from the YAML's data; CatalogError naming the first problem."""
    if not isinstance(data, dict) or data.get("format") != 1:
        raise CatalogError("signatures: expected a mapping with format: 1")
    entries = data.get("signatures")
    if not isinstance(entries, list) or not entries:
        raise CatalogError("signatures: expected a non-empty list")
    sigs = tuple(_entry(raw, i) for i, raw in enumerate(entries))
    ids = [s.id for s in sigs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise CatalogError(f"signatures: duplicate ids {dupes}")
    compiled = tuple((s, re.compile("|".join(f"(?:{p})" for p in s.patterns))) for s in sigs)
    return Catalog(sigs, compiled)


@once
def catalog() -> Catalog:
    """The shipped catalog (read once per process)."""
    text = resources.files("runbook").joinpath("data/signatures.yaml").read_text()
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return build(yaml.load(text, Loader=loader))  # noqa: S506 (a safe loader)


def role_rank(role: str | None) -> int:
    """A role's strength: 0 for `cause`; unknown roles rank last."""
    return ROLE_ORDER.get(role or "", len(ROLES))
