"""The four reports of a sweep under one directory, each replaced atomically (a reader — the
textfile collector, a CI job — never sees half a file): sweep.json, sweep.md, junit.xml,
runbook.prom; and runbook.prom again into node_exporter's textfile directory when one is
configured (runbook.metrics.write_textfile: the same temporary + fsync + rename)."""

from __future__ import annotations

import json
from pathlib import Path

from runbook import atomic, metrics
from runbook.errors import disk_full_as_error
from runbook.render import sweep_junit, sweep_markdown, sweep_prometheus
from runbook.sweep.results import SweepResult

NAMES = ("sweep.json", "sweep.md", "junit.xml", "runbook.prom")


def _replace(path: Path, text: str) -> None:
    # the temporary name must not end in .prom: the textfile collector reads every *.prom;
    # reports are for readers (the node exporter), so 0644
    atomic.write_text(path, text, suffix=".tmp", mode=0o644)


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
        directory.mkdir(parents=True, exist_ok=True)
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
