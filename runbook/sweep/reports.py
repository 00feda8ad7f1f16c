"""The four reports of a sweep under one directory, each replaced atomically (a reader — the
textfile collector, a CI job — never sees half a file): sweep.json, sweep.md, junit.xml,
runbook.prom; and runbook.prom again into node_exporter's textfile directory when one is
configured (runbook.metrics.write_textfile: the same temporary + fsync + rename).

The reports quote evidence (a node's first anomaly, its findings), so they are its owner's
alone: files 0600, and each directory created on the way to them 0700 (the state directory
and its `sweeps/` too, when a sweep or analyze-dir is the first command to make them). A
directory that exists keeps its mode: `--report DIR` is the user's to share. The textfile
directory's copy of runbook.prom (host names and causes, no evidence) stays readable by
node_exporter."""

from __future__ import annotations

import json
import os
from pathlib import Path

from runbook import atomic, metrics
from runbook.errors import disk_full_as_error
from runbook.render import sweep_junit, sweep_markdown, sweep_prometheus
from runbook.sweep.results import SweepResult

NAMES = ("sweep.json", "sweep.md", "junit.xml", "runbook.prom")


def _replace(path: Path, text: str) -> None:
    # the temporary name must not end in .prom: the textfile collector reads every *.prom
    atomic.write_text(path, text, suffix=".tmp", mode=0o600)


def _owner_only_dirs(directory: Path) -> None:
    """`directory` and every missing directory above it created 0700 (whatever the umask)."""
    missing = []
    for path in (directory, *directory.parents):
        if path.exists():
            break
        missing.append(path)
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)  # a umask only narrows it
        except FileExistsError:
            continue


def render_json(sweep: SweepResult) -> str:
    """sweep.json: the summary indented, then one host per line. Each host goes through the
    C encoder (json's indenting encoder is pure Python: 8 MB of verdicts for 200 hosts cost
    seconds that way, tens of milliseconds this way)."""
    data = sweep.as_dict()
    hosts = data.pop("hosts")
    head = json.dumps(data, indent=2, default=str)
    lines = ",\n".join("    " + json.dumps(h, default=str, ensure_ascii=False) for h in hosts)
    return head[:-2] + ',\n  "hosts": [\n' + lines + ("\n" if lines else "") + "  ]\n}\n"


def render_prom(sweep: SweepResult, places: list[Path]) -> str:
    """runbook.prom, carrying over the last success the files it replaces at `places` hold."""
    previous = sweep_prometheus.previous_success(metrics.read_previous(places))
    return sweep_prometheus.render(sweep, previous=previous)


def write_reports(
    sweep: SweepResult, directory: Path, *, textfile_dir: Path | None = None
) -> dict[str, Path]:
    """Each report replaced whole; a full disk is a DiskFullError, and the reports of the
    last sweep that fitted stay as they were. `textfile_dir`: its runbook.prom is read for
    the last success to carry over, and replaced by the same text after the reports (a
    failure there is a warning, runbook.oncall.write_metrics: not the sweep's outcome)."""
    places = [directory / "runbook.prom"]
    if textfile_dir is not None:
        places.append(textfile_dir / metrics.SWEEP_FILE)
    rendered = {
        "sweep.json": render_json(sweep),
        "sweep.md": sweep_markdown.render(sweep),
        "junit.xml": sweep_junit.render(sweep),
        "runbook.prom": render_prom(sweep, places),
    }
    written = {}
    with disk_full_as_error(directory):
        _owner_only_dirs(directory)
        for name in NAMES:
            path = directory / name
            _replace(path, rendered[name])
            written[name] = path
    if textfile_dir is not None:
        from runbook.oncall import write_metrics

        copy = write_metrics(textfile_dir, metrics.SWEEP_FILE, rendered["runbook.prom"])
        if copy is not None:
            written["textfile"] = copy
    return written
