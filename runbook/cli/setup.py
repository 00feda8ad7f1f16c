"""`runbook setup-collections`: the Ansible collections the fix playbooks use, installed where
this installation's ansible-playbook finds them (runbook.collection_deps says how and why)."""

from __future__ import annotations

from pathlib import Path

import click


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
def setup_collections(wheel: Path | None, check: bool) -> None:
    """Install the Ansible collections the fix playbooks need (kubernetes.core).

    They are unpacked from the wheel of one pinned release of the `ansible` package, fetched
    with pip from the index pip uses (Ansible Galaxy is not needed), into this installation's
    site-packages, where its ansible-playbook and ansible-lint find them. Run once after
    `pip install`; a collection already there is left alone."""
    from runbook import collection_deps

    if check:
        found = collection_deps.states()
        for state in found:
            click.echo(state.line())
        if any(s.version is None for s in found):
            raise click.exceptions.Exit(1)
        return
    for state in collection_deps.install(wheel=wheel):
        click.echo(state.line())


COMMANDS = [setup_collections]
