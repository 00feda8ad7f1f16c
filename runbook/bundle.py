"""The evidence bundle (DESIGN §4, format 1): reading, writing, and safe unpacking.

A bundle is a directory — or a `.tar.gz` of one — holding `bundle.yaml` and raw evidence files,
each optionally beside `F.rc` (exit status) and `F.err` (standard error). Reading never guesses:
a missing file is "not collected".

Unpacking a `.tar.gz` refuses absolute names, `..`, links and devices, and bounds the unpacked
size (a decompression bomb stops with a BundleError, nothing written outside the target).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
import re
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from runbook import atomic
from runbook.bundle_files import (
    MAX_MULTI_BYTES,
    MAX_SIDE_BYTES,
    MAX_WHOLE_BYTES,
    BundleFiles,
    Read,
)
from runbook.errors import BundleError, disk_full_as_error
from runbook.redact import redact, redact_lines
from runbook.transports import framing
from runbook.transports.base import CommandResult
from runbook.transports.framing import is_multi as is_multi  # where callers look it up

FORMAT = 1
MAX_UNPACKED_BYTES = 4 * 1024**3
MAX_MEMBERS = 20000
#: said in a file's `.err` when its output was cut at the capture bound (transports/base.py)
TRUNCATED_NOTE = "output truncated: only the first part was kept (capture bound)"
#: replayed files larger than this are streamed by parsers rather than read whole
LAZY_BYTES = 16 * 1024 * 1024
#: files one multi-file probe (`app/*.log`) reads at most (a node runs tens of ranks)
MAX_MULTI_FILES = 1024


def safe_member_name(name: str) -> PurePosixPath:
    """A bundle-relative path, or BundleError for anything that could escape the bundle."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name or "\0" in name:
        raise BundleError(f"unsafe path in bundle: {name!r}")
    return path


@dataclass(frozen=True)
class BundleMeta:
    node: str
    collected_at: str
    format: int = FORMAT
    pod: str | None = None
    namespace: str | None = None
    ranks: int | None = None
    page_size: int = 4096
    labels: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_yaml(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": self.format,
            "node": self.node,
            "collected_at": self.collected_at,
        }
        for key in ("pod", "namespace", "ranks"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.page_size != 4096:
            data["page_size"] = self.page_size
        if self.labels:
            data["labels"] = dict(self.labels)
        data.update(self.extra)
        return data


class _MetaLoader(yaml.SafeLoader):
    """bundle.yaml as written by write_bundle: no anchors or aliases. An alias would let a
    few hundred bytes stand for gigabytes (`node: *lol9`, the billion laughs) once a value is
    turned into text."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "aliases are not allowed in bundle.yaml", event.start_mark
            )
        return super().compose_node(parent, index)


def parse_meta(text: str, source: str = "bundle.yaml") -> BundleMeta:
    try:
        data = yaml.load(text, Loader=_MetaLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise BundleError(f"{source}: not YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise BundleError(f"{source}: nested too deeply to be a bundle.yaml") from None
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        # PyYAML's safe constructors on a tag its value does not fit (`node: !!int x`)
        raise BundleError(f"{source}: not YAML: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict):
        raise BundleError(f"{source}: expected a mapping")
    if data.get("format") != FORMAT:
        raise BundleError(f"{source}: unknown bundle format {data.get('format')!r} (expected 1)")
    known = {"format", "node", "collected_at", "pod", "namespace", "ranks", "page_size", "labels"}
    page_size = data.get("page_size", 4096)
    if not isinstance(page_size, int) or page_size <= 0:
        raise BundleError(f"{source}: page_size must be a positive integer")
    labels = data.get("labels") or {}
    if not isinstance(labels, dict):
        raise BundleError(f"{source}: labels must be a mapping")
    collected_at = data.get("collected_at", "")
    if isinstance(collected_at, dt.datetime | dt.date):
        collected_at = collected_at.isoformat()
    return BundleMeta(
        node=str(data.get("node") or "unknown"),
        collected_at=str(collected_at),
        pod=None if data.get("pod") is None else str(data["pod"]),
        namespace=None if data.get("namespace") is None else str(data["namespace"]),
        ranks=data.get("ranks") if isinstance(data.get("ranks"), int) else None,
        page_size=page_size,
        labels={str(k): str(v) for k, v in labels.items()},
        extra={k: v for k, v in data.items() if k not in known},
    )


class Bundle:
    """A bundle directory opened for reading (a `.tar.gz` is unpacked to a private temp dir)."""

    def __init__(
        self,
        root: Path,
        meta: BundleMeta,
        cleanup: tempfile.TemporaryDirectory[str] | None,
        files: BundleFiles | None = None,
    ):
        self.root = root
        self.meta = meta
        self._cleanup = cleanup
        #: every read of the bundle's files goes through this (confined, bounded)
        self.files = files or BundleFiles(root)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Bundle:
        source = Path(path)
        cleanup = None
        if source.is_file() and (source.name.endswith((".tar.gz", ".tgz"))):
            cleanup = tempfile.TemporaryDirectory(prefix="runbook-bundle-")
            try:
                root = unpack(source, Path(cleanup.name))
            except BaseException:
                cleanup.cleanup()
                raise
        elif source.is_dir():
            root = source
        elif not source.exists():
            raise BundleError(f"{source}: no such bundle")
        else:
            raise BundleError(f"{source}: not a bundle directory or .tar.gz")
        files = BundleFiles(root)
        try:
            meta = parse_meta(files.meta(shown=source).decode("utf-8", errors="replace"))
        except BundleError:
            if cleanup:
                cleanup.cleanup()
            raise
        return cls(root, meta, cleanup, files)

    def _side(self, name: str) -> str | None:
        """A member's `.rc` or `.err` (bounded), None when there is none or it cannot be
        read safely."""
        try:
            path = self.files.locate(name)
            if path is None:
                return None
            return self.files.read(path, MAX_SIDE_BYTES).data.decode("utf-8", errors="replace")
        except BundleError:
            return None

    def read(self, name: str, command: str = "") -> CommandResult:
        """The evidence file `name` as a CommandResult (collected=False when absent; a file
        that points outside the bundle or is not a regular file: collected=False with the
        reason as its error)."""
        try:
            safe_member_name(name)
            path = self.files.locate(name)
            if path is None:
                return CommandResult(name, command, collected=False)
            lazy = path.stat().st_size > LAZY_BYTES
            read = self.files.scan_window(path) if lazy else self.files.read(path, MAX_WHOLE_BYTES)
        except (BundleError, OSError) as exc:
            error = exc.one_line() if isinstance(exc, BundleError) else str(exc)
            return CommandResult(name, command, collected=False, error=error)
        stderr = self._side(name + ".err") or ""
        exited, timed_out, ended = _status(self._side(name + ".rc"), stderr)
        return CommandResult(
            name,
            command,
            duration=_timed_out_after(stderr) if timed_out else 0.0,
            stdout="" if lazy else read.data.decode("utf-8", errors="replace"),
            stderr=_noted(stderr, read.note(name)),
            exited=exited,
            timed_out=timed_out,
            error=ended,
            truncated=read.truncated,
            source_path=str(path) if lazy else None,
            source_offset=read.offset if lazy else 0,
        )

    def _succeeded(self, name: str) -> bool:
        """No `.rc` (a file given as it is), or exit 0: a `.rc` of `timeout` or with no status
        recorded is a command that did not finish, not a file to read."""
        rc = self._side(name + ".rc")
        return rc is None or rc.strip() == "0"

    def read_multi(self, pattern: str, command: str = "", *, token: str) -> CommandResult:
        """Every file matching a multi-file probe name (`app/*.log`), framed with `token` as the
        live probe frames them (transports/framing.py), so both split the same way. A file the
        probe did not read (a link, a FIFO: only its `.err` was written) is framed as skipped
        again, so the replayed walk says what the live one said."""
        safe_member_name(pattern)
        # a file recorded as failed (its .rc non-zero: `cat` of an absent v1 file on a v2
        # host) is left out, as the live probe leaves out a file it cannot read; so is one
        # that points outside the bundle or is not a regular file (said in stderr)
        names = sorted(
            p.relative_to(self.root).as_posix()
            for p in self.root.glob(pattern)
            if p.suffix not in (".rc", ".err")
        )
        records: list[framing.Record] = []
        notes = []
        truncated = len(names) > MAX_MULTI_FILES
        if truncated:
            notes.append(f"{pattern}: {len(names)} files, only the first {MAX_MULTI_FILES} read")
        left = MAX_MULTI_BYTES
        for rel in names[:MAX_MULTI_FILES]:
            try:
                path = self.files.locate(rel)
                if path is None or not self._succeeded(rel):
                    continue
                read: Read = self.files.read(path, min(MAX_WHOLE_BYTES, left))
                left -= len(read.data)
            except BundleError as exc:
                notes.append(exc.one_line())
                continue
            truncated = truncated or read.truncated
            notes += [n for n in (read.note(rel),) if n]
            text = read.data.decode("utf-8", errors="replace")
            records.append(framing.Record("file", PurePosixPath(rel).name, text, 0))
        records += self._skipped(pattern, names)
        stderr = "".join(f"runbook: {n}\n" for n in notes)
        if not records:
            first = notes[0] if notes else None
            return CommandResult(pattern, command, collected=False, error=first)
        records.sort(key=lambda r: r.name)
        return CommandResult(
            pattern,
            command,
            stdout=framing.frame(records, token),
            stderr=stderr,
            exited=0,
            truncated=truncated,
        )

    def _skipped(self, pattern: str, names: list[str]) -> list[framing.Record]:
        """The files of `pattern` recorded as not read: a `.err` alone, its file absent."""
        found = []
        kept = set(names)
        for path in sorted(self.root.glob(pattern + ".err"))[:MAX_MULTI_FILES]:
            rel = path.relative_to(self.root).as_posix().removesuffix(".err")
            base = PurePosixPath(rel).name
            if rel in kept or not framing.fnmatch_name(base, PurePosixPath(pattern).name):
                continue
            err = self._side(rel + ".err") or ""
            reason = next(
                (code for code, why in framing.SKIPPED.items() if f"not read: {why}" in err),
                "other",
            )
            found.append(framing.Record("skip", base, reason=reason))
        return found

    def names(self) -> list[str]:
        """Every evidence file in the bundle (not bundle.yaml, .rc or .err)."""
        found = []
        for path in self.files.walk():
            if path.suffix in (".rc", ".err") or path == self.root / "bundle.yaml":
                continue
            found.append(path.relative_to(self.root).as_posix())
        return sorted(found)

    def close(self) -> None:
        if self._cleanup is not None:
            self._cleanup.cleanup()
            self._cleanup = None


def unpack(archive: Path, target: Path) -> Path:
    """Unpack a bundle archive safely into `target`; returns the bundle root inside it."""
    total = 0
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = []
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise BundleError(f"{archive}: more than {MAX_MEMBERS} files")
                safe_member_name(member.name.rstrip("/"))
                if not (member.isfile() or member.isdir()):
                    raise BundleError(f"{archive}: {member.name!r} is not a plain file")
                total += member.size
                if total > MAX_UNPACKED_BYTES:
                    raise BundleError(f"{archive}: unpacks to more than {MAX_UNPACKED_BYTES} bytes")
                members.append(member)
            tar.extractall(target, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BundleError(f"{archive}: unreadable archive: {exc}") from None
    if (target / "bundle.yaml").is_file():
        return target
    entries = [p for p in target.iterdir() if p.is_dir()]
    if len(entries) == 1 and (entries[0] / "bundle.yaml").is_file():
        return entries[0]
    return target


def _status(rc: str | None, stderr: str) -> tuple[int | None, bool, str | None]:
    """A file's exit status, timed-out flag and error, as its `.rc` recorded them (write_result
    and the collection module write them so): no `.rc` is a file given as it is (exit 0); a
    number is the exit status; `timeout` is a command stopped by its time limit; an empty one
    is a command that left no exit status (it could not start, the channel dropped), whose why
    is the `runbook: …` note in `.err`. Never read as exit 0: a hung nvidia-smi's empty
    output is not a node without a fault."""
    if rc is None:
        return 0, False, None
    text = rc.strip()
    if text.lstrip("-").isdigit() and len(text) < 6:
        return int(text), False, None
    if text == "timeout":
        return None, True, None
    notes = [line.removeprefix("runbook: ") for line in stderr.splitlines()
             if line.startswith("runbook: ") and TRUNCATED_NOTE not in line]  # fmt: skip
    return None, False, (notes[0] if notes else f"no exit status recorded (.rc: {text[:40]!r})")


_TIMED_OUT_AFTER = re.compile(r"^runbook: timed out after ([0-9]+(?:\.[0-9]+)?)s$", re.M)


def _timed_out_after(stderr: str) -> float:
    """The seconds a timed-out command ran, as its `.err` note says (0 when it does not)."""
    found = _TIMED_OUT_AFTER.findall(stderr)
    return float(found[-1]) if found else 0.0


def _noted(stderr: str, note: str | None) -> str:
    """`stderr` with runbook's note about the read appended (when there is one)."""
    if not note:
        return stderr
    return stderr + ("\n" if stderr and not stderr.endswith("\n") else "") + f"runbook: {note}\n"


def _atomic_write(
    path: Path, data: bytes, within: Path | None = None, *, durable: bool = True
) -> None:
    atomic.write_bytes(path, data, within=within, durable=durable)


def split_multi(result: CommandResult, token: str) -> list[CommandResult]:
    """A multi-file probe's output as one result per file, named `DIR/NAME` after the probe's
    directory (`app/*.log` + the frame of `rank-3.log` → `app/rank-3.log`). Only the frames
    that carry `token` cut it (transports/framing.py): what a file holds stays in that file.

    A file is kept only once, and only under a name the probe's pattern matches that is no
    `.rc` or `.err` of another; a file the probe did not read (a link, a FIFO) is a result not
    collected, its reason in its stderr (the bundle keeps it as the file's `.err`). A file
    whose end never came is cut where the output was: timed out, failed or at the capture
    bound, as the probe was. The probe's standard error goes with the file a line names; a
    line naming none of them goes with the last file."""
    framed = framing.parse(result.stdout, token)
    directory = PurePosixPath(result.name).parent
    pattern = PurePosixPath(result.name).name
    notes = result.stderr.splitlines(keepends=True)
    unnamed = list(notes)
    kept: list[tuple[framing.Record, str, list[str]]] = []  # (record, member name, own notes)
    seen: set[str] = set()
    for record in framed.records:
        if record.kind == "more":
            unnamed.append(
                f"runbook: more files match {record.name} than the {framing.MAX_FILES} read\n"
            )
            continue
        name = str(directory / record.name) if str(directory) != "." else record.name
        refused = _refused_member(record.name, name, pattern, seen)
        if refused:
            unnamed.append(f"runbook: {refused}\n")
            continue
        seen.add(name)
        own = [n for n in notes if _names(n, record.name)]
        unnamed = [n for n in unnamed if n not in own]
        kept.append((record, name, own))
    if framed.outside:
        unnamed.append(f"runbook: {framed.outside} characters outside any file left out\n")
    split = []
    for i, (record, name, own) in enumerate(kept):
        last = i == len(kept) - 1
        stderr = "".join(own + (unnamed if last else []))
        if record.kind == "skip":
            why = framing.SKIPPED.get(record.reason, framing.SKIPPED["other"])
            split.append(
                CommandResult(
                    name,
                    result.command,
                    stderr=f"runbook: not read: {why}\n{stderr}",
                    error=f"not read: {why}",
                    collected=False,
                    duration=result.duration,
                )
            )
            continue
        whole = record.status is not None
        split.append(
            CommandResult(
                name,
                result.command,
                stdout=record.text,
                stderr=stderr,
                exited=record.status if whole else _cut_status(result),
                duration=result.duration,
                timed_out=not whole and result.timed_out,
                error=None if whole else result.error,
                truncated=result.truncated and (not whole or bool(own)),
            )
        )
    return split


def _refused_member(base: str, name: str, pattern: str, seen: set[str]) -> str | None:
    """Why a file of a multi-file probe cannot be kept under `name`, or None."""
    try:
        safe_member_name(name)
    except BundleError:
        return f"a file named {base!r} was left out: not a safe name"
    if "/" in base or not framing.fnmatch_name(base, pattern):
        return f"a file named {base!r} was left out: the probe's pattern does not match it"
    if base.endswith((".rc", ".err")):
        return f"a file named {base!r} was left out: it would stand for another's .rc or .err"
    if name in seen:
        return f"a second file named {base!r} was left out"
    return None


def _names(note: str, base: str) -> bool:
    """Whether a line of standard error names the file `base` (`/x/rank-1.log`, not
    `rank-11.log`)."""
    return re.search(rf"(?<![\w.-]){re.escape(base)}(?![\w.-])", note) is not None


def _cut_status(result: CommandResult) -> int | None:
    """The exit status of a file whose end never came: none when the probe timed out or
    failed; 0 when the capture bound cut it (it was read); else the probe's own."""
    if result.timed_out or result.error:
        return None
    return 0 if result.truncated else result.exited


#: output longer than this is redacted and written block by block, not as one string
_STREAM_CHARS = 1024 * 1024


def _lines_of(text: str) -> Iterator[str]:
    """The lines of `text` with their ends, one at a time (no copy of the whole)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end == -1 else end + 1
        yield text[start:end]
        start = end


def _copy_redacted(result: CommandResult, path: Path, root: Path, *, durable: bool) -> None:
    """Output too large to redact in one piece (a file-backed replay, or a capture at its
    bound), written block by block with its credentials redacted."""
    with contextlib.ExitStack() as stack:
        if result.source_path is not None and not result.stdout:
            src: Iterable[str] = stack.enter_context(
                io.TextIOWrapper(result.open_source(), encoding="utf-8", errors="replace",
                                 newline="")
            )  # fmt: skip
        else:
            src = _lines_of(result.stdout)
        atomic.write_chunks(path, redact_lines(src), within=root, durable=durable)


def write_result(root: Path, result: CommandResult, *, durable: bool = True) -> None:
    """One evidence file plus its `.rc` and (non-empty) `.err`, as DESIGN §4 lays out. Output
    cut at the capture bound is said in `.err`, so a replay knows the file is not whole.
    `durable=False`: not fsynced (a guided run's evidence; runbook/atomic.py)."""
    if not result.collected:
        if result.stderr:  # a file a multi-file probe did not read: why, as its `.err`
            _write_note(root, result, durable=durable)
        return
    path = root.joinpath(*safe_member_name(result.name).parts)
    with disk_full_as_error(root):
        big = len(result.stdout) > _STREAM_CHARS
        atomic.real_dir(path.parent, within=root)  # no directory link placed in the bundle
        if big or (result.source_path is not None and not result.stdout):
            _copy_redacted(result, path, root, durable=durable)  # credentials never written
        else:
            _atomic_write(
                path,
                redact(result.stdout).encode("utf-8", errors="replace"),
                root,
                durable=durable,
            )
        rc = "" if result.exited is None else str(result.exited)
        rc = "timeout" if result.timed_out else rc
        _atomic_write(path.with_name(path.name + ".rc"), f"{rc}\n".encode(), root, durable=durable)
        err = result.stderr
        for note in (result.failure, TRUNCATED_NOTE if result.truncated else None):
            if note and note not in err:
                err = _noted(err, note)
        if err:
            err_path = path.with_name(path.name + ".err")
            _atomic_write(
                err_path, redact(err).encode("utf-8", errors="replace"), root, durable=durable
            )


def _write_note(root: Path, result: CommandResult, *, durable: bool) -> None:
    """The `.err` alone of a file that was not collected (its content never read)."""
    path = root.joinpath(*safe_member_name(result.name + ".err").parts)
    with disk_full_as_error(root):
        atomic.real_dir(path.parent, within=root)
        data = redact(result.stderr).encode("utf-8", errors="replace")
        _atomic_write(path, data, root, durable=durable)


def write_bundle(root: Path, meta: BundleMeta, results: Iterable[CommandResult]) -> Path:
    """Write a bundle directory; bundle.yaml last, so a crash or a full disk leaves no half
    bundle that looks whole."""
    with disk_full_as_error(root):
        atomic.real_dir(root)  # a link placed at the bundle's name is refused
        for result in results:
            write_result(root, result)
        _atomic_write(
            root / "bundle.yaml", redact(yaml.safe_dump(meta.to_yaml(), sort_keys=False)).encode()
        )
    return root


def context_of(meta: BundleMeta) -> Mapping[str, Any]:
    """Parser context from bundle.yaml; an optional `utc_offset` (`date +%z`) places the
    node's naive log times."""
    ctx: dict[str, Any] = {
        "node": meta.node,
        "collected_at": meta.collected_at,
        "page_size": meta.page_size,
        "labels": meta.labels,
        "pod": meta.pod,
        "namespace": meta.namespace,
    }
    if isinstance(meta.extra.get("utc_offset"), str):
        ctx["utc_offset"] = meta.extra["utc_offset"]
    return ctx


#: optional bundle.yaml keys that become variable defaults when the bundle is replayed
REPLAY_VARS = ("nodes", "cgroup_dir")


def replay_defaults(
    meta: BundleMeta, variables: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The variables and parser context a walk of a replayed bundle gets: its pod, namespace,
    ranks and REPLAY_VARS as defaults of the variables of the same names (what the collector
    was told; `variables` win and are left as they were), and its bundle.yaml as context."""
    merged = dict(variables)
    defaults: dict[str, Any] = {"pod": meta.pod, "namespace": meta.namespace}
    if meta.ranks is not None:
        defaults["ranks"] = meta.ranks
    for key in REPLAY_VARS:
        if key in meta.extra and isinstance(meta.extra[key], str | int | float):
            defaults[key] = meta.extra[key]
    for key, value in defaults.items():
        if value not in (None, "") and key not in merged:
            merged[key] = value
    return merged, dict(context_of(meta))
