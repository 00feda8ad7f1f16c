"""`runbook signatures test FILE BUNDLE`: which lines of a bundle each entry of a user signature
catalog matches, before it is used (`signatures.user_catalog` in the config, or `--signatures
FILE` on analyze, run and npd; resume reads with the one its run recorded); and the
`--signatures` option those commands share.

A line is shown under every entry whose pattern it holds, and marked when the analysis would
read it as another entry (an earlier user entry, or for a line no user entry takes first, a
shipped one): in the catalog the first entry that matches wins. Registered by
runbook/cli/app.py through `COMMANDS`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from runbook.cli.options import format_option

F = TypeVar("F", bound=Callable[..., Any])

#: matches shown per entry in text (every match is counted)
SHOWN = 20
#: matches kept per entry (a signature matching a storm's every line says so by its count)
KEPT = 1000


def signatures_option(command: F) -> F:
    """`--signatures FILE`: a user signature catalog for this command."""
    return click.option(
        "--signatures",
        "signatures_file",
        type=click.Path(dir_okay=False),
        help="A user signature catalog (the format of runbook/data/signatures.yaml), tried "
        "before the shipped one (default: signatures.user_catalog in the config).",
    )(command)


def use_signatures(ctx: click.Context | None, signatures_file: str | None) -> None:
    """Merge the user catalog (the flag's, else the config's) before the shipped one; a bad
    catalog is a one-line usage error naming its file and line."""
    from runbook import config, signatures

    path: Path | None = Path(signatures_file) if signatures_file else None
    if path is None:
        config_file = ((ctx.find_root().obj or {}) if ctx else {}).get("config")
        path = config.user_catalog(Path(config_file) if config_file else None)
    signatures.use_user_catalog(path)


def _kernel_message(line: str) -> str:
    from runbook.parsers._common import TimeRef, parse_kernel_prefix

    stamp = parse_kernel_prefix(line, TimeRef(None))
    return (stamp.message if stamp is not None else line).strip()


def _lines(bundle: Any) -> Iterator[tuple[str, int, str, str, bool]]:
    """(source, line number, raw line, text to match, kernel?) of every line of the bundle's
    application, NCCL and kernel logs (launcher prefixes or the kernel stamp removed)."""
    from runbook.parsers import applog, dmesg
    from runbook.parsers import lines as prefixes

    for name in sorted(bundle.names()):
        kernel = name == dmesg.SOURCE
        if not kernel and not name.startswith(applog.PREFIXES):
            continue
        result = bundle.read(name)
        if not result.collected:
            continue
        for number, raw in enumerate(result.lines(), 1):
            text = _kernel_message(raw) if kernel else prefixes.strip(raw[:8192]).text.strip()
            yield name, number, raw, text, kernel


def matches(catalog_file: str, bundle_path: str) -> list[dict[str, Any]]:
    """Each entry of the user catalog with the lines of the bundle it matches, in the
    catalog's order: `{id, class, role, cause, count, lines: [{source, line, text, taken_by}]}`
    (`taken_by`: the entry the analysis reads the line as, when it is another)."""
    from runbook import signatures
    from runbook.bundle import Bundle

    user = signatures.load_user(catalog_file)
    merged = signatures.merged(user)
    compiled = dict(merged.compiled[: len(user)])
    out: list[dict[str, Any]] = [
        {"id": s.id, "class": s.cls, "role": s.role, "cause": s.cause, "count": 0, "lines": []}
        for s in user
    ]
    bundle = Bundle.open(bundle_path)
    try:
        for source, number, raw, text, kernel in _lines(bundle):
            clipped = text[: signatures.MAX_MATCH]
            taken: str | None = None
            for entry, sig in zip(out, user, strict=True):
                if (sig.cls == "kernel") != kernel or not compiled[sig].search(clipped):
                    continue
                if taken is None:
                    first = merged.classify(text, kernel=kernel)
                    taken = first.id if first is not None else ""
                entry["count"] += 1
                if len(entry["lines"]) < KEPT:
                    entry["lines"].append(
                        {"source": source, "line": number, "text": raw[:300],
                         "taken_by": taken if taken != sig.id else None}
                    )  # fmt: skip
    finally:
        bundle.close()
    return out


def _text(entries: list[dict[str, Any]]) -> str:
    out = []
    for e in entries:
        cause = e["cause"] or "no cause"
        head = f"{e['id']} ({e['class']}, {e['role']}, {cause}): "
        out.append(head + (f"{e['count']} line(s)" if e["count"] else "no line"))
        for m in e["lines"][:SHOWN]:
            taken = (
                f"  [read as {m['taken_by'] or 'no error'}]" if m["taken_by"] is not None else ""
            )
            out.append(f"  {m['source']}:{m['line']}: {m['text']}{taken}")
        if e["count"] > SHOWN:
            out.append(f"  … {e['count'] - SHOWN} more")
    return "\n".join(out)


@click.group("signatures")
def signatures_group() -> None:
    """User signature catalogs: try one on a bundle before using it."""


@signatures_group.command("test")
@click.argument("catalog_file", metavar="FILE", type=click.Path(dir_okay=False))
@click.argument("bundle", type=click.Path())
@format_option("text", "json", default="text")
def test(catalog_file: str, bundle: str, fmt: str) -> None:
    """Show which lines of BUNDLE (its application, NCCL and kernel logs) each entry of the
    signature catalog FILE matches, as source:line and text.

    FILE is checked as `analyze --signatures FILE` checks it: a bad regular expression, an
    unknown role, class or cause, a missing or duplicate id is one line naming the file and
    line (exit 2).

    \b
    runbook signatures test my-signatures.yaml bundle.tar.gz"""
    entries = matches(catalog_file, bundle)
    if fmt == "json":
        click.echo(json.dumps({"catalog": catalog_file, "signatures": entries}, indent=2))
    else:
        click.echo(_text(entries) if entries else f"{catalog_file}: no signature in it")


COMMANDS = [signatures_group]
