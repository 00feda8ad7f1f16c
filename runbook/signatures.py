"""The signature catalog (`runbook/data/signatures.yaml`) loaded, checked and compiled: what an
error line is, the root cause it implies, and its causal role.

The YAML ships inside the package and is read once. `classify(message)` answers for one
line whose launcher prefixes are already removed (`runbook.parsers.lines`).

A user catalog (`signatures.user_catalog` in the config, or `--signatures FILE`) is a file in
the same format, checked when it is loaded (each problem one line naming the file and line:
`sigs.yaml:12: signature 'x': role 'fatal' is not one of …`) and merged before the shipped
entries: a line both match is the user's. `use_user_catalog(path)` sets it for the process.

Roles, strongest first (`ROLE_ORDER`): a `cause` names the root cause on this node; a
`local-error` is the rank's own failure; a `peer-consequence` is a rank that lost a peer; a
`surfaced` line is where the failure came out; `context` and `benign` lines are no anomaly of
the job by themselves.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from runbook.errors import UsageError
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
    """The shipped catalog is malformed (a packaging bug, caught by the tests), or a user
    catalog entry is; `index` and `key` say which entry and field (for a line number)."""

    def __init__(self, message: str, *, index: int | None = None, key: str | None = None):
        super().__init__(message)
        self.index = index
        self.key = key


class UserCatalogError(UsageError):
    """A user catalog that does not load or validate: one line, `FILE:LINE: problem`."""


#: the fields an entry may have (a user catalog's unknown field is a typo, refused)
FIELDS = ("id", "class", "role", "cause", "patterns", "info", "kind", "seen_in", "keywords")


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
        raise CatalogError(f"{where}: expected a mapping", index=index)
    sig_id = raw.get("id")
    if not isinstance(sig_id, str) or not sig_id:
        raise CatalogError(f"{where}.id: expected a name", index=index, key="id")
    where = f"signature {sig_id!r}"
    role, cls, cause = raw.get("role"), raw.get("class"), raw.get("cause")
    if role not in ROLES:
        raise CatalogError(
            f"{where}: role {role!r} is not one of {', '.join(ROLES)}", index=index, key="role"
        )
    if cls not in CLASSES:
        raise CatalogError(
            f"{where}: class {cls!r} is not one of {', '.join(CLASSES)}", index=index, key="class"
        )
    if cause is not None and cause not in ROOT_CAUSES:
        raise CatalogError(
            f"{where}: cause {cause!r} is not a root cause (one of {', '.join(ROOT_CAUSES)})",
            index=index,
            key="cause",
        )
    patterns = raw.get("patterns")
    if (
        not isinstance(patterns, list)
        or not patterns
        or not all(isinstance(p, str) and p for p in patterns)
    ):
        raise CatalogError(
            f"{where}: patterns must be a non-empty list of strings", index=index, key="patterns"
        )
    try:
        re.compile("|".join(f"(?:{p})" for p in patterns))
    except re.error:
        for p in patterns:  # name the pattern at fault
            try:
                re.compile(p)
            except re.error as exc:
                raise CatalogError(
                    f"{where}: pattern {p!r}: {exc}", index=index, key="patterns"
                ) from None
        raise CatalogError(
            f"{where}: its patterns do not combine", index=index, key="patterns"
        ) from None
    keywords = raw.get("keywords", [])
    if not isinstance(keywords, list) or not all(isinstance(k, str) and k for k in keywords):
        raise CatalogError(
            f"{where}: keywords must be a list of non-empty strings", index=index, key="keywords"
        )
    if cls == "kernel":
        # the pre-filter must never hide a line a pattern matches: each pattern holds one
        # of the keywords as literal text
        if not keywords:
            raise CatalogError(
                f"{where}: a kernel signature needs keywords (the pre-filter's)",
                index=index,
                key="class",
            )
        for p in patterns:
            if not any(k in p for k in keywords):
                raise CatalogError(
                    f"{where}: pattern {p!r} holds none of its keywords",
                    index=index,
                    key="patterns",
                )
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


def _entries(data: Any, *, allow_empty: bool = False) -> tuple[Signature, ...]:
    """The entries of a catalog's YAML data, checked; CatalogError naming the first problem."""
    if not isinstance(data, dict) or data.get("format") != 1:
        raise CatalogError("signatures: expected a mapping with format: 1", key="format")
    entries = data.get("signatures")
    if not isinstance(entries, list) or not (entries or allow_empty):
        raise CatalogError("signatures: expected a non-empty list", key="signatures")
    sigs = tuple(_entry(raw, i) for i, raw in enumerate(entries))
    seen: set[str] = set()
    for index, sig in enumerate(sigs):
        if sig.id in seen:
            raise CatalogError(f"signature {sig.id!r}: duplicate id", index=index, key="id")
        seen.add(sig.id)
    return sigs


def _compiled(sigs: tuple[Signature, ...]) -> Catalog:
    compiled = tuple((s, re.compile("|".join(f"(?:{p})" for p in s.patterns))) for s in sigs)
    return Catalog(sigs, compiled)


def build(data: Any) -> Catalog:
    """A Catalog from the YAML's data; CatalogError naming the first problem."""
    return _compiled(_entries(data))


def _load_yaml(text: str) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader)


@once
def shipped() -> Catalog:
    """The shipped catalog (read once per process)."""
    return build(
        _load_yaml(resources.files("runbook").joinpath("data/signatures.yaml").read_text())
    )


def _line_of(root: yaml.Node | None, index: int | None, key: str | None) -> int:
    """The 1-based line of entry `index`'s field `key` (else of the entry; without an entry,
    of the top-level `key`) in the composed YAML `root`; 1 when it is not there."""
    node: yaml.Node | None = root
    if isinstance(root, yaml.MappingNode):
        top = {k.value: (k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode)}
        if index is None:
            node = top[key][0] if key in top else root
        elif "signatures" in top:
            node = top["signatures"][1]
    if index is not None and isinstance(node, yaml.SequenceNode) and index < len(node.value):
        node = node.value[index]
        if key is not None and isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == key:
                    node = v
                    break
    return node.start_mark.line + 1 if node is not None else 1


def load_user(path: str | Path, base: Catalog | None = None) -> tuple[Signature, ...]:
    """The entries of the user catalog at `path`, checked against `base` (the shipped
    catalog: an id of its own is refused, so no shipped entry is silently shadowed);
    UserCatalogError `FILE:LINE: problem` for the first problem: a file that cannot be read
    or parsed, a missing id, an unknown field, role, class or cause, a bad pattern, a
    duplicate id."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserCatalogError(f"{name}: cannot read the signature catalog: {reason}") from None
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        data = _load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserCatalogError(
            f"{name}:{line}: not YAML: {' '.join(str(problem).split())}"
        ) from None
    except RecursionError:
        raise UserCatalogError(f"{name}:1: nested too deeply to be a signature catalog") from None
    try:
        sigs = _entries(data, allow_empty=True)
        raws = data["signatures"]
        for index, raw in enumerate(raws):
            unknown = sorted(set(raw) - set(FIELDS), key=str)
            if unknown:
                raise CatalogError(
                    f"signature {raw['id']!r}: unknown field {unknown[0]!r} (fields: "
                    f"{', '.join(FIELDS)})",
                    index=index,
                    key=str(unknown[0]),
                )
        shipped_ids = {s.id for s in (base or shipped()).signatures}
        for index, sig in enumerate(sigs):
            if sig.id in shipped_ids:
                raise CatalogError(
                    f"signature {sig.id!r}: a shipped signature has this id; give yours "
                    "another (yours are tried first)",
                    index=index,
                    key="id",
                )
    except CatalogError as exc:
        line = _line_of(root, exc.index, exc.key)
        raise UserCatalogError(f"{name}:{line}: {exc}") from None
    return sigs


_user: tuple[Signature, ...] = ()
_user_path: str | None = None


def use_user_catalog(path: str | Path | None) -> None:
    """Merge the user catalog at `path` before the shipped one for this process (None: the
    shipped catalog alone). Checked now: UserCatalogError on the first problem."""
    global _user, _user_path
    sigs = load_user(path) if path is not None else ()
    _user, _user_path = sigs, (str(path) if path is not None else None)
    catalog.cache_clear()
    # the kernel log's pre-filter keeps the catalog's keywords (runbook.parsers.dmesg)
    dmesg = sys.modules.get("runbook.parsers.dmesg")
    for cached in ("catalog_words", "_trigger"):
        clear = getattr(getattr(dmesg, cached, None), "cache_clear", None)
        if clear is not None:
            clear()


def user_catalog_path() -> str | None:
    """The user catalog in use, if any."""
    return _user_path


def merged(user: tuple[Signature, ...]) -> Catalog:
    """A catalog of `user`'s entries, then the shipped ones."""
    return _compiled(user + shipped().signatures) if user else shipped()


@once
def catalog() -> Catalog:
    """The catalog in use: the user's entries (use_user_catalog), then the shipped ones."""
    return merged(_user)


def role_rank(role: str | None) -> int:
    """A role's strength: 0 for `cause`; unknown roles rank last."""
    return ROLE_ORDER.get(role or "", len(ROLES))
