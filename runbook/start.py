"""The `runbook` command's first module: what must happen before the rest is imported (the
dataclasses' compiled methods, runbook/dataclass_cache.py), then the CLI."""

from __future__ import annotations

from runbook import dataclass_cache


def console() -> None:
    dataclass_cache.install()
    from runbook.cli.app import console as run

    run()
