"""Coverage of the error texts the stack can print (runbook/data/coverage/): each string of the
extracted lists (tests/tools/coverage_extract.py) classified by the rules of classes.yaml, a
sample of it rendered as the line a log holds, and what the product's own reader makes of that
line. docs/coverage.md is generated from this; tests/unit/test_coverage.py holds it to the data.

    .venv/bin/python tests/tools/coverage.py            # rewrite docs/coverage.md
    .venv/bin/python tests/tools/coverage.py --check    # exit 1 when the doc is stale

A rule (classes.yaml) is tried in order for a string of its source; the first whose `match`
(a regular expression searched in the text) holds, and whose optional `kind` and `file` (a
regular expression that each of the string's file paths must hold) agree, classifies it:

    signature: ID    the reader reads the string's sample as catalog entry ID (or
                     `generic-error`: an error line no entry names); its class is that entry's
                     role and cause. `none`: the reader reads the line as no error at all (an
                     INFO line), and the rule's `role`, `cause` and `why` say what it is.
    unclassified: R  deliberately not classified, for the reason R.
    fill: [...]      values for the format's conversions in order (`%s`, `%d`, `{name}`, `{}`),
                     where the default ones would not make the line it really is.
    raises: RE       (c10d) the C++ error class the site raises must match: it decides the
                     Python exception the line starts with (PYTHON_EXCEPTION).

Kernel formats (kernel.yaml) carry their own sample and the record the kernel parser must make
of it (`reads_as`); their rules give role, cause and why.
"""

from __future__ import annotations

import argparse
import collections
import functools
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: the checkout's package

from runbook import signatures  # noqa: E402
from runbook.parsers import applog, dmesg  # noqa: E402
from runbook.parsers.lines import strip  # noqa: E402

DATA = ROOT / "runbook" / "data" / "coverage"
DOC = ROOT / "docs" / "coverage.md"
SOURCES = ("nccl", "pytorch", "cuda", "kernel")
#: a printf conversion (flags, width, precision, length, type) or a pasted name `{name}`/`{}`
CONVERSION = re.compile(
    r"%(?P<pct>%)"
    r"|%[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|j|z|t|L)?(?P<type>[diouxXeEfgGaAcspn])"
    r"|\{(?P<name>\w*)\}"
)
DEFAULT_FILL = {"d": "3", "i": "3", "u": "3", "o": "7", "x": "1f", "X": "1F", "s": "x",
                "p": "0x7f2a4c000000", "c": "c", "n": "",
                **dict.fromkeys("eEfgGaA", "1.0")}  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One extracted string."""

    source: str
    kind: str
    text: str
    releases: tuple[str, ...]
    files: tuple[str, ...]
    #: kernel formats only: a real line and the parser record it must make
    sample: str | tuple[str, ...] | None = None
    reads_as: str | None = None
    #: c10d only: the C++ error class the site raises (it decides the Python exception)
    raises: str | None = None


@dataclass(frozen=True)
class Rule:
    index: int
    match: re.Pattern[str]
    kind: str | None
    file: re.Pattern[str] | None
    signature: str | None
    role: str | None
    cause: str | None
    why: str | None
    unclassified: str | None
    fill: tuple[str, ...]
    raises: re.Pattern[str] | None = None

    def holds(self, entry: Entry) -> bool:
        if self.kind is not None and entry.kind != self.kind:
            return False
        if self.file is not None and not all(self.file.search(f) for f in entry.files):
            return False
        if self.raises is not None and not self.raises.search(entry.raises or ""):
            return False
        return bool(self.match.search(entry.text))


@dataclass(frozen=True)
class Row:
    """One string, classified."""

    entry: Entry
    rule: Rule | None
    sample: str | None
    #: the reader's answer for the sample: (signature, role, cause), or None (no error line)
    read: tuple[str, str, str | None] | None

    @property
    def signature(self) -> str | None:
        return self.rule.signature if self.rule else None

    @property
    def role(self) -> str | None:
        if self.rule is None or self.rule.unclassified:
            return None
        if self.rule.signature not in (None, "none"):
            return self.read[1] if self.read else None
        return self.rule.role

    @property
    def cause(self) -> str | None:
        if self.rule is None or self.rule.unclassified:
            return None
        if self.rule.signature not in (None, "none"):
            return self.read[2] if self.read else None
        return self.rule.cause


def load_yaml(name: str) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load((DATA / name).read_text(), Loader=loader)


@functools.cache
def entries(source: str) -> tuple[Entry, ...]:
    doc = load_yaml(f"{source}.yaml")
    return tuple(
        Entry(
            source=source,
            kind=s["kind"],
            text=s["text"],
            releases=tuple(s["releases"]),
            files=tuple(s["files"]),
            sample=tuple(s["sample"]) if isinstance(s.get("sample"), list) else s.get("sample"),
            reads_as=s.get("reads_as"),
            raises=s.get("raises"),
        )
        for s in doc["strings"]
    )


@functools.cache
def releases(source: str) -> tuple[str, ...]:
    return tuple(r["release"] for r in load_yaml(f"{source}.yaml")["releases"])


@functools.cache
def rules() -> dict[str, tuple[Rule, ...]]:
    doc = load_yaml("classes.yaml")
    out: dict[str, tuple[Rule, ...]] = {}
    for source in SOURCES:
        out[source] = tuple(_rule(i, raw) for i, raw in enumerate(doc["rules"][source]))
    return out


def _rule(index: int, raw: dict[str, Any]) -> Rule:
    return Rule(
        index=index,
        match=re.compile(raw["match"]),
        kind=raw.get("kind"),
        file=re.compile(raw["file"]) if raw.get("file") else None,
        signature=raw.get("signature"),
        role=raw.get("role"),
        cause=raw.get("cause"),
        why=raw.get("why"),
        unclassified=raw.get("unclassified"),
        fill=tuple(str(x) for x in raw.get("fill", ())),
        raises=re.compile(raw["raises"]) if raw.get("raises") else None,
    )


def fill(text: str, values: Sequence[str] = ()) -> str:
    """A format string with its conversions filled: `values` in order, then defaults."""
    given = iter(values)

    def one(m: re.Match[str]) -> str:
        if m.group("pct"):
            return "%"
        value = next(given, None)
        if value is not None:
            return value
        if m.group("name") is not None:
            return m.group("name") or "0"
        return DEFAULT_FILL[m.group("type")]

    return CONVERSION.sub(one, text).replace("\\n", " ")


#: what c10d 2.x puts before its messages (ProcessGroupNCCL::logPrefix)
PG_PREFIX = "[PG ID 0 PG GUID 0(default_pg) Rank 3] "
#: how each kind of string reaches a log: the line around the filled text
NCCL_LINE = "gpu-node-7:41235:41310 [3] {file}:412 NCCL WARN {text}"
FRAMES = {
    ("nccl", "warn"): NCCL_LINE,
    ("nccl", "trace"): "gpu-node-7:41235:41310 [3] NCCL INFO {text}",
    ("nccl", "error-string"): (
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, {text}, NCCL version 2.21.5"
    ),
    ("pytorch", "check"): "{exc}: {text}",
    ("pytorch", "throw"): "{exc}: {text}",
    ("pytorch", "message"): "{exc}: {text}",
    ("pytorch", "log-error"): (
        "[rank3]:[E1205 10:14:07.551908 41235 torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1595] {text}"
    ),
    ("cuda", "error-string"): "RuntimeError: CUDA error: {text}",
}


#: the Python exception a c10d error class reaches Python as (torch/csrc/Exceptions.h,
#: c10d's exception.h and its pybind translation); anything else is a RuntimeError
PYTHON_EXCEPTION = {
    "ValueError": "ValueError", "TypeError": "TypeError", "IndexError": "IndexError",
    "NotImplementedError": "NotImplementedError", "invalid_argument": "ValueError",
    "out_of_range": "IndexError", "DistError": "torch.distributed.DistError",
    "DistBackendError": "torch.distributed.DistBackendError",
    "DistStoreError": "torch.distributed.DistStoreError",
    "DistNetworkError": "torch.distributed.DistNetworkError",
    "SocketError": "torch.distributed.DistNetworkError",
    "TimeoutError": "torch.distributed.DistNetworkError",
}  # fmt: skip


def sample_of(entry: Entry, rule: Rule | None) -> str:
    if entry.sample is not None:
        return entry.sample if isinstance(entry.sample, str) else "\n".join(entry.sample)
    text = entry.text
    if entry.source == "pytorch" and text.startswith("{}"):
        text = PG_PREFIX + text[2:]  # c10d's log prefix (logPrefix())
    text = fill(text, rule.fill if rule else ())
    frame = FRAMES[(entry.source, entry.kind)]
    file = entry.files[0].removeprefix("src/") if entry.files else "init.cc"
    exc = PYTHON_EXCEPTION.get(entry.raises or "", "RuntimeError")
    return frame.format(text=text, file=file, exc=exc)


def read_line(line: str) -> tuple[str, str, str | None] | None:
    """What the application-log reader makes of one line: its prefixes removed
    (runbook.parsers.lines), then the catalog entry, role and cause (applog.line_kind, the one
    classification the reader and `classify` share); None for no error line. An NCCL INFO
    line counts only when its entry does at INFO level, as the reader has it."""
    text = strip(line).text.strip()
    sig = applog.signature_of(text)
    if "NCCL INFO" in text and (sig is None or not sig.info):
        return None
    kind = applog.line_kind(text, sig)
    return None if kind is None else (kind[0], kind[1], kind[2])


def kernel_record(line: str, reads_as: str) -> bool:  # a record's lines joined by newlines
    """Whether the kernel parser makes the record `reads_as` of the line: a DmesgFacts field
    (`xids`, `aer`, …) that must be non-empty, or `catalog:ID` for a catalog kernel line, or
    `corrected:` for a corrected AER report it counts."""
    facts = dmesg.parse_dmesg(line.split("\n"))
    if reads_as.startswith("catalog:"):
        return any(h.signature == reads_as.split(":", 1)[1] for h in facts.catalog_hits)
    if reads_as == "corrected":
        return bool(facts.aer_corrected)
    if reads_as == "oom":
        return bool(facts.memcg_ooms or facts.global_ooms)
    return bool(getattr(facts, reads_as))


def classify(entry: Entry) -> Row:
    rule = next((r for r in rules()[entry.source] if r.holds(entry)), None)
    sample = sample_of(entry, rule)
    read = read_line(sample) if entry.source != "kernel" else None
    return Row(entry, rule, sample, read)


@functools.cache
def table() -> tuple[Row, ...]:
    return tuple(classify(e) for source in SOURCES for e in entries(source))


def catalog_role(sig_id: str) -> tuple[str, str | None]:
    if sig_id == "generic-error":
        return applog.GENERIC[1], applog.GENERIC[2]
    sig = signatures.catalog().by_id(sig_id)
    return sig.role, sig.cause


# ---- the document ---------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def counts() -> dict[tuple[str, str, str], dict[str, int]]:
    """Per (source, release, kind): strings, classified, deliberately unclassified, and
    without a rule."""
    out: dict[tuple[str, str, str], dict[str, int]] = {}
    for row in table():
        for rel in row.entry.releases:
            c = out.setdefault((row.entry.source, rel, row.entry.kind), dict.fromkeys(
                ("strings", "classified", "unclassified", "missing"), 0))  # fmt: skip
            c["strings"] += 1
            if row.rule is None:
                c["missing"] += 1
            elif row.rule.unclassified:
                c["unclassified"] += 1
            else:
                c["classified"] += 1
    return out


def count_order(key: tuple[str, str, str]) -> tuple[int, str, int]:
    source, rel, kind = key
    return SOURCES.index(source), kind, releases(source).index(rel)


def _why(row: Row) -> str:
    return (row.rule.why or "") if row.rule else ""


def _class(row: Row) -> str:
    if row.rule is None:
        return "**no rule**"
    if row.rule.unclassified:
        return f"unclassified: {row.rule.unclassified}"
    role = row.role or "no error"
    return f"{role} ({row.cause})" if row.cause else role


def _releases(source: str, rels: Sequence[str]) -> str:
    order = releases(source)
    if list(rels) == list(order):
        return "all"
    return ", ".join(r.removeprefix("v").removesuffix("-1") for r in rels)


def render() -> str:
    lines = [
        "# Coverage: every error text the stack can print, classified",
        "",
        "<!-- Generated by tests/tools/coverage.py from runbook/data/coverage/: do not edit. -->",
        "",
        "What NCCL, PyTorch's c10d, the CUDA runtime and the kernel can print, extracted from "
        "their own source (tests/tools/coverage_extract.py: NCCL's WARN format strings, its "
        "return-code traces and `ncclGetErrorString` texts at each release tag; c10d's "
        "TORCH_CHECK / throw / LOG(ERROR) messages; `cudaGetErrorString` of libcudart; the "
        "kernel formats the kernel parser reads). Each string is classified by a rule of "
        "`runbook/data/coverage/classes.yaml`: the catalog entry "
        "(`runbook/data/signatures.yaml`) the product's own reader picks for a sample of the "
        "line, and so its class (role and cause), or a class with its reason where the line "
        "is no error by itself, or *unclassified* with the reason. "
        "`tests/unit/test_coverage.py` fails when a string has no rule or when the reader "
        "does not read a sample as its rule says.",
        "",
        "## Counts",
        "",
        "| source | release | kind | strings | classified | unclassified (with reason) |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    c = counts()
    for source, rel, kind in sorted(c, key=count_order):
        n = c[(source, rel, kind)]
        lines.append(
            f"| {source} | {rel} | {kind} | {n['strings']} | {n['classified']} "
            f"| {n['unclassified']} |"
        )
    lines += [
        "",
        "Distinct strings over all releases, and how the classified ones read:",
        "",
        "| source | distinct strings | classified | unclassified | by role |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for source in SOURCES:
        rows = [r for r in table() if r.entry.source == source]
        done = [r for r in rows if r.rule and not r.rule.unclassified]
        roles = collections.Counter(r.role or "no error" for r in done)
        by_role = ", ".join(f"{role} {n}" for role, n in sorted(roles.items()))
        lines.append(
            f"| {source} | {len(rows)} | {len(done)} | {len(rows) - len(done)} | {by_role} |"
        )
    reasons = collections.Counter(
        (r.entry.source, r.rule.unclassified) for r in table() if r.rule and r.rule.unclassified
    )
    lines += [
        "",
        "Deliberately unclassified:",
        "",
        "| source | strings | reason |",
        "| --- | ---: | --- |",
    ]
    for (source, reason), count in sorted(reasons.items()):
        lines.append(f"| {source} | {count} | {_cell(reason)} |")
    for source in SOURCES:
        rows = [r for r in table() if r.entry.source == source]
        lines += [
            "",
            f"## {source}",
            "",
            load_yaml(f"{source}.yaml")["origin"] + ".",
            "",
            "| release | kind | string | signature | class | why |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in rows:
            e = row.entry
            sig = row.signature if row.signature and row.signature != "none" else ""
            if e.source == "kernel":
                sig = row.entry.reads_as or ""
            lines.append(
                f"| {_releases(source, e.releases)} | {e.kind} | `{_cell(e.text)}` | {sig} "
                f"| {_cell(_class(row))} | {_cell(_why(row))} |"
            )
    return "\n".join(lines) + "\n"


def problems() -> Iterator[str]:
    """Every way the data and the reader disagree (empty when all holds)."""
    for row in table():
        e = row.entry
        where = f"{e.source} {e.kind} {e.text!r}"
        if row.rule is None:
            yield f"{where}: no rule classifies it"
            continue
        rule = row.rule
        if rule.unclassified:
            continue
        if e.source == "kernel":
            if e.reads_as and not kernel_record(row.sample or "", e.reads_as):
                yield f"{where}: the kernel parser makes no {e.reads_as} of {row.sample!r}"
            continue
        if rule.signature == "none":
            if row.read is not None:
                yield f"{where}: rule {rule.index} says no error line, the reader: {row.read}"
        elif row.read is None or row.read[0] != rule.signature:
            got = row.read[0] if row.read else None
            said = f"rule {rule.index} says {rule.signature}"
            yield f"{where}: {said}, the reader: {got} ({row.sample!r})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/coverage.md is stale")
    ap.add_argument("--problems", action="store_true", help="list the disagreements")
    ns = ap.parse_args(argv)
    if ns.problems:
        found = list(problems())
        print("\n".join(found))
        return 1 if found else 0
    text = render()
    if ns.check:
        if DOC.read_text() != text:
            print("docs/coverage.md is stale: run tests/tools/coverage.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
