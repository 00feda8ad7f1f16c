"""The incident report and sanitized evidence: the file handling around the pure modules
(`runbook.report.sanitize`, `runbook.redact`, `runbook.render.node_markdown`).

`runbook report PATH` takes a run directory (its `bundle/` and `verdict.json`) or a bundle
(analysed here), and renders the verdict as the incident write-up (Markdown) or JSON; with
`sanitize`, one Sanitizer learned from the bundle replaces identifiers in everything it prints.
`sanitize_bundle` writes a sanitized copy of a bundle; `sanitize_results` does the same for
evidence still in memory (`runbook collect --sanitize`). A sanitized copy is itself a bundle.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from runbook import atomic, jsontext
from runbook import bundle as bundle_mod
from runbook.errors import BundleError, UsageError
from runbook.redact import redact, redact_data
from runbook.render import node_markdown as markdown
from runbook.report.sanitize import Sanitizer, observe_order
from runbook.transports.base import CommandResult
from runbook.verdict import Verdict, VerdictError

SANITIZED_NOTE = (
    "_Sanitized: node, pod, namespace, job, image, address, UUID, bus and container "
    "identifiers are replaced with placeholders (`<NODE_1>`, `<POD_UID_1>`, …), credentials "
    "with `<REDACTED>`; the figures, kernel signatures and times are as recorded._"
)
#: files larger than this are read and written in blocks of lines
BLOCK_CHARS = 4 * 1024 * 1024


def _blocks(path: Path) -> Iterator[str]:
    """A file's text in blocks of whole lines."""
    with path.open(encoding="utf-8", errors="replace", newline="") as handle:
        block: list[str] = []
        size = 0
        for line in handle:
            block.append(line)
            size += len(line)
            if size >= BLOCK_CHARS:
                yield "".join(block)
                block, size = [], 0
        if block:
            yield "".join(block)


def _files(root: Path) -> list[str]:
    """The bundle's files (through the bundle reader's walk: bounded, no link followed out)."""
    from runbook.bundle_files import BundleFiles

    names = [
        p.relative_to(root).as_posix()
        for p in BundleFiles(root).walk()
        if not p.is_symlink() and not p.name.startswith(".")
    ]
    return observe_order(names)


def learn(root: Path, sanitizer: Sanitizer | None = None) -> Sanitizer:
    """A Sanitizer that has learned every identifier of the bundle at `root` and numbered them
    in the order a sanitized copy would (so a report and a copy agree)."""
    sanitizer = sanitizer or Sanitizer()
    names = _files(root)
    for name in names:
        for block in _blocks(root / name):
            sanitizer.observe(name, block)
    for name in names:
        sanitizer.path(name)
        for block in _blocks(root / name):
            sanitizer.text(block)
    return sanitizer


def sanitize_bundle(source: Path, target: Path) -> Sanitizer:
    """Write a sanitized copy of the bundle at `source` (a directory) into `target`;
    bundle.yaml last, as every bundle is written. Returns the sanitizer (for the verdict)."""
    sanitizer = Sanitizer()
    names = _files(source)
    for name in names:
        for block in _blocks(source / name):
            sanitizer.observe(name, block)
    atomic.real_dir(target)
    meta = None
    for name in names:
        out_name = sanitizer.path(name)
        out = target.joinpath(*bundle_mod.safe_member_name(out_name).parts)
        if name == "bundle.yaml":
            meta = out, sanitizer.text((source / name).read_text(errors="replace"))
            continue
        chunks = (sanitizer.text(block) for block in _blocks(source / name))
        atomic.write_chunks(out, chunks, within=target)
    if meta is not None:
        bundle_mod.parse_meta(meta[1])  # still a bundle: refuse to write one that is not
        atomic.write_text(meta[0], meta[1], within=target)
    return sanitizer


def sanitize_results(
    meta: bundle_mod.BundleMeta, results: Iterable[CommandResult]
) -> tuple[bundle_mod.BundleMeta, list[CommandResult], Sanitizer]:
    """Evidence collected but not yet written, sanitized: its bundle.yaml, its results (names,
    output, standard error and failure text) and the sanitizer (never written with them)."""
    results = list(results)
    texts: dict[str, str] = {}
    for result in results:
        if not result.collected:
            continue
        texts[result.name] = result.text()
        texts[result.name + ".err"] = result.stderr + (result.failure or "")
    meta_text = yaml.safe_dump(meta.to_yaml(), sort_keys=False)
    texts["bundle.yaml"] = meta_text
    sanitizer = Sanitizer()
    for name in observe_order(texts):
        sanitizer.observe(name, texts[name])
    clean_meta = bundle_mod.parse_meta(sanitizer.text(meta_text))
    clean: list[CommandResult] = []
    for result in results:
        if not result.collected:
            continue
        clean.append(
            replace(
                result,
                name=sanitizer.path(result.name),
                command=sanitizer.text(result.command),
                stdout=sanitizer.text(texts[result.name]),
                stderr=sanitizer.text(result.stderr),
                error=sanitizer.text(result.error) if result.error else result.error,
                source_path=None,
            )
        )
    return clean_meta, clean, sanitizer


def write_private(path: Path, data: Mapping[str, Any]) -> None:
    """Write JSON readable by its owner only (mode 0600, whatever the file was before), by
    rename: a link at its name is replaced, its target never written or chmodded."""
    atomic.write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n", mode=0o600)


def check_map_path(map_path: Path, *outputs: Path) -> None:
    """The mapping must never land in (or as) what it sanitized."""
    resolved = map_path.resolve()
    for output in outputs:
        out = output.resolve()
        if resolved == out or resolved.is_relative_to(out):
            raise UsageError(
                f"--sanitize-map {map_path} is inside the sanitized output {output}: "
                "keep the mapping apart from what it sanitizes"
            )


@dataclass
class Report:
    text: str
    #: the node verdict; None for a job run directory (its verdict is job.json's mapping)
    verdict: Verdict | None
    sanitizer: Sanitizer | None


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / "verdict.json").is_file() and (path / "bundle").is_dir()


def _is_job_dir(path: Path) -> bool:
    """`run --job`'s directory: job.json (the job verdict) and each node's run under nodes/."""
    return path.is_dir() and (path / "job.json").is_file()


def _job_report(path: Path, *, fmt: str, sanitize: bool) -> Report:
    """The job's report from job.json, as `run --job` wrote job.md; sanitized with one
    Sanitizer that learned every node's bundle (so a node is <NODE_2> everywhere)."""
    from runbook.render.job_markdown import job_markdown

    try:
        data = jsontext.loads((path / "job.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{path / 'job.json'}: unreadable job verdict: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("job"), dict):
        raise BundleError(f"{path / 'job.json'}: not a job verdict (no job)")
    try:
        data = redact_data(data)
    except RecursionError:  # parsed, but deeper than what reads it can follow
        raise BundleError(f"{path / 'job.json'}: nested too deeply to be a job verdict") from None
    sanitizer = None
    if sanitize:
        sanitizer = Sanitizer()
        for bundle_path in sorted((path / "nodes").glob("*/bundle")):
            opened = bundle_mod.Bundle.open(bundle_path)
            try:
                learn(opened.root, sanitizer)
            finally:
                opened.close()
        for node in data.get("nodes") or ():
            if isinstance(node, dict) and node.get("node"):
                sanitizer.learn("NODE", str(node["node"]))
        data = sanitizer.data(data)
    if fmt == "json":
        text = json.dumps(data, indent=2, default=str) + "\n"
    else:
        text = job_markdown(data)
        if sanitize:
            text += "\n" + SANITIZED_NOTE + "\n"
    return Report(redact(text), None, sanitizer)


def build_report(
    path: Path,
    *,
    fmt: str = "markdown",
    sanitize: bool = False,
    runbook_ref: str = "nccl-init-failure",
    variables: Mapping[str, Any] | None = None,
) -> Report:
    """The incident report of a run directory, a job run directory or a bundle (directory or
    .tar.gz)."""
    if _is_job_dir(path):
        return _job_report(path, fmt=fmt, sanitize=sanitize)
    if _is_run_dir(path):
        try:
            data = jsontext.loads((path / "verdict.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BundleError(f"{path / 'verdict.json'}: unreadable verdict: {exc}") from None
        try:
            # the typed verdict says which field of a hand-edited or damaged file is wrong
            verdict = Verdict.from_json(redact_data(data))
        except VerdictError as exc:
            raise BundleError(f"{path / 'verdict.json'}: not a verdict: {exc.one_line()}") from None
        except RecursionError:  # parsed, but deeper than what reads it can follow
            raise BundleError(f"{path / 'verdict.json'}: too deep to be a verdict") from None
        bundle_path = path / "bundle"
    else:
        from runbook.session import analyze

        verdict = analyze(path, runbook_ref, variables or {}).verdict
        bundle_path = path
    sanitizer = None
    if sanitize:
        opened = bundle_mod.Bundle.open(bundle_path)
        try:
            sanitizer = learn(opened.root)
        finally:
            opened.close()
        verdict = Verdict.from_json(sanitizer.data(verdict.to_json())).annotated(sanitized=True)
    if fmt == "json":
        text = json.dumps(verdict.to_json(), indent=2, default=str) + "\n"
    else:
        text = markdown.render(verdict)
        if sanitize:
            text += "\n" + SANITIZED_NOTE + "\n"
    return Report(redact(text), verdict, sanitizer)


def write_collected(
    out: Path,
    meta: bundle_mod.BundleMeta,
    results: Iterable[CommandResult],
    *,
    sanitize: bool = False,
    map_path: Path | None = None,
) -> str:
    """Write what `runbook collect` gathered as a bundle at `out`, sanitized if asked (the
    mapping only to `map_path`, mode 0600); returns the node's name as written."""
    if not sanitize:
        bundle_mod.write_bundle(out, meta, results)
        return meta.node
    clean_meta, clean, sanitizer = sanitize_results(meta, results)
    bundle_mod.write_bundle(out, clean_meta, clean)
    if map_path is not None:
        write_private(map_path, sanitizer.mapping())
    return clean_meta.node
