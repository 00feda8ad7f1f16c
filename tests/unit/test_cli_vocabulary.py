"""One CLI vocabulary, checked over every command click knows (so a command added later is
held to it too): every option has help and an environment variable, `-i` is the inventory
wherever it appears, every command that reports takes `--format json`, and -v/-q are
everywhere."""

from __future__ import annotations

import io
from collections.abc import Iterator

import click
import pytest

from runbook.cli.app import cli
from runbook.redacted_output import RedactingStream

#: commands whose output is not a report: the demo is an interactive walk, graph renders a
#: graph (dot or mermaid)
NOT_REPORTS = {"runbook demo", "runbook graph", "runbook desk serve"}  # desk serve: a server


def _commands() -> Iterator[tuple[str, click.Command]]:
    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        yield path, command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, f"{path} {name}")

    yield from walk(cli, "runbook")


COMMANDS = dict(_commands())
LEAVES = {p: c for p, c in COMMANDS.items() if not isinstance(c, click.Group)}


def _options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]


def test_the_walk_sees_every_command() -> None:
    assert {"runbook run", "runbook sweep", "runbook approvals approve", "runbook audit verify",
            "runbook collect", "runbook runs"} <= set(LEAVES)  # fmt: skip
    assert len(LEAVES) >= 25


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_option_has_help_and_an_environment_variable(path: str) -> None:
    for option in _options(COMMANDS[path]):
        if option.name == "version":
            continue
        assert option.help and option.help.strip(), f"{path} {option.opts[0]}: no help"
        if option.name in ("verbose", "quiet") and path != "runbook":
            continue  # read once, by the root group (RUNBOOK_VERBOSE, RUNBOOK_QUIET)
        envvar = option.envvar
        assert isinstance(envvar, str) and envvar.startswith("RUNBOOK_"), (path, option.opts)
        assert option.show_envvar, (path, option.opts)


def test_shared_options_are_read_from_one_variable_in_every_command() -> None:
    seen: dict[str, set[str]] = {}
    for command in LEAVES.values():
        for option in _options(command):
            if option.name in ("db", "known_hosts", "identities", "as_user"):
                seen.setdefault(option.name, set()).add(str(option.envvar))
    assert seen["db"] == {"RUNBOOK_DB"}
    assert seen["known_hosts"] == {"RUNBOOK_KNOWN_HOSTS"}
    assert seen["identities"] == {"RUNBOOK_IDENTITY"}
    assert seen["as_user"] == {"RUNBOOK_AS"}


def test_other_options_are_named_after_their_command_and_flag() -> None:
    forks = next(o for o in _options(LEAVES["runbook sweep"]) if o.name == "forks")
    assert forks.envvar == "RUNBOOK_SWEEP_FORKS"
    fmt = next(o for o in _options(LEAVES["runbook approvals list"]) if o.name == "fmt")
    assert fmt.envvar == "RUNBOOK_APPROVALS_LIST_FORMAT"  # the flag, not the Python name


def test_dash_i_is_the_inventory_wherever_it_appears() -> None:
    found = []
    for path, command in LEAVES.items():
        for option in _options(command):
            if "-i" in option.opts:
                assert "--inventory" in option.opts, (path, option.opts)
                found.append(path)
            if "--identity" in option.opts:
                assert "-i" not in option.opts and "-i" not in option.secondary_opts, path
    assert {"runbook run", "runbook sweep"} <= set(found)


@pytest.mark.parametrize("path", sorted(set(LEAVES) - NOT_REPORTS))
def test_every_command_that_reports_takes_format_json(path: str) -> None:
    fmt = [o for o in _options(LEAVES[path]) if "--format" in o.opts]
    assert fmt, f"{path}: no --format"
    assert isinstance(fmt[0].type, click.Choice) and "json" in fmt[0].type.choices, path


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_command_takes_verbose_and_quiet(path: str) -> None:
    flags = {flag for o in _options(COMMANDS[path]) for flag in o.opts}
    assert {"-v", "--verbose", "-q", "--quiet"} <= flags, path


def test_bytes_echoed_through_the_redacting_stream_are_written_as_text() -> None:
    # click.echo writes bytes (shell completion's answer) to a stream with no binary buffer
    inner = io.StringIO()
    stream = RedactingStream(inner)  # type: ignore[arg-type]
    click.echo(b"plain,nccl-init-failure\nAuthorization: Bearer abcdef0123456789abcdef", stream)
    stream.flush()
    assert inner.getvalue().startswith("plain,nccl-init-failure\n")
    assert "abcdef0123456789abcdef" not in inner.getvalue()


def test_every_command_that_changes_the_approval_queue_takes_the_textfile_dir() -> None:
    changing = ["runbook run", "runbook resume", "runbook sweep", "runbook verify",
                "runbook approvals approve", "runbook approvals deny",
                "runbook approvals recover", "runbook approvals publish"]  # fmt: skip
    for path in changing:
        option = next(
            (o for o in _options(LEAVES[path]) if "--textfile-dir" in o.opts), None
        )
        assert option is not None, path
        assert option.envvar == "RUNBOOK_TEXTFILE_DIR", path
