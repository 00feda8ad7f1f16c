"""`runbook setup-collections`: the Ansible collections the fix playbooks use, installed where
this installation's ansible-playbook finds them (runbook.collection_deps says how and why)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runbook.cli.options import format_option

if TYPE_CHECKING:
    from runbook.collection_deps import CollectionState


@click.command("setup-collections")
@click.option(
    "--wheel",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Unpack from this ansible-*.whl (fetched beforehand, for a machine without an "
    "index) instead of downloading it with pip.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Install nothing: say what is installed, exit 1 when a collection is missing.",
)
@format_option("text", "json", default="text")
def setup_collections(wheel: Path | None, check: bool, fmt: str) -> None:
    """Install the Ansible collections the fix playbooks need (kubernetes.core).

    They are unpacked from the wheel of one pinned release of the `ansible` package, fetched
    with pip from the index pip uses (Ansible Galaxy is not needed), into this installation's
    site-packages, where its ansible-playbook and ansible-lint find them. Run once after
    `pip install`; a collection already there is left alone. --format json:
    {"ok", "collections": [{"name", "version", "path", "installed_now"}]}."""
    from runbook import collection_deps

    found = collection_deps.states() if check else collection_deps.install(wheel=wheel)
    _show(found, fmt)
    if any(s.version is None for s in found):
        raise click.exceptions.Exit(1)


def _show(found: list[CollectionState], fmt: str) -> None:
    if fmt == "json":
        collections = [
            {"name": s.name, "version": s.version, "path": str(s.path),
             "installed_now": s.installed_now}
            for s in found
        ]  # fmt: skip
        ok = all(s.version is not None for s in found)
        click.echo(json.dumps({"ok": ok, "collections": collections}, indent=2))
        return
    for state in found:
        click.echo(state.line())


COMMANDS = [setup_collections]
