"""Every command the documentation shows runs as written, and no help text sends a reader to a
file the repository does not have.

The commands are taken from the code in README.md, docs/*.md and the READMEs of the roles,
the examples and molecule (indented or fenced lines that start with `runbook …`,
`.venv/bin/runbook …` or `ansible-playbook …`, with `\\` continuations joined; pipes, `&&`,
`;`, redirections and comments split off). Each `runbook` command is parsed by the CLI's own
click parser (the command resolved and its context made, never invoked), so a renamed flag or
a command that no longer exists fails here; placeholders (NODE, ID, RUN_DIR, p3f9c0a1d) are
fine where they parse. Every argument that names a file of the repository (a path under one of
its top-level entries, an `@extra-vars` file) must exist, unless an earlier command of the same
block writes it. Whether each `ansible-playbook` command passes `--syntax-check` is
tests/ansible/test_collection.py's test."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from runbook.cli.app import cli

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [
        REPO / "README.md",
        REPO / "molecule" / "README.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "roles").glob("*/README.md"),
        *(REPO / "examples").glob("*/README.md"),
    ]
)
#: a line of code that is a shell command (after an optional `$ ` prompt, `sudo` and variable
#: assignments): `runbook …` or one of the other programs the docs show being run
COMMAND = re.compile(
    r"^(?:\$\s+)?(?:sudo\s+)?(?:[A-Za-z_]\w*=\S*(?:\s+|$))*"
    r"(?:$|(?:\S*/)?(?:runbook|python3?|ansible-[a-z]+|kubectl|bash|buildah|docker|git|molecule"
    r"|promtool|export|eval|systemctl|crontab|cp)(?:\s|$))"
)
#: where shell syntax ends one simple command and starts the next
SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")"}
REDIRECTS = {">", ">>", "<", "2>", "&>"}
#: options whose value is a file the command writes (so a later command may read it)
WRITES = {"-o", "--output", "--report", "--run-dir"}


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    block: int  # the code block it is in, within its file
    text: str


def tracked_top_level() -> set[str]:
    proc = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    return {line.split("/", 1)[0] for line in proc.stdout.splitlines() if line}


def code_lines(doc: Path) -> Iterator[tuple[int, int, str]]:
    """(line number, block number, text) of each line of code: in a ``` fence, or indented by
    four or more spaces past a blank line (Markdown's indented code, also inside lists)."""
    fenced = False
    in_block = False
    block = 0
    previous_blank = True
    for number, line in enumerate(doc.read_text().splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            block += 1
            previous_blank = False
            continue
        if fenced:
            yield number, block, line
            continue
        indented = len(line) - len(line.lstrip(" ")) >= 4 and stripped != ""
        if indented and (in_block or previous_blank):
            if not in_block:
                block += 1
            in_block = True
            yield number, block, line
        elif stripped:
            in_block = False
        previous_blank = stripped == ""


def documented_commands() -> list[DocCommand]:
    found = []
    for doc in DOCS:
        lines = list(code_lines(doc))
        for i, (number, block, line) in enumerate(lines):
            text = line.strip()
            if not text or not COMMAND.match(text):
                continue
            text = re.sub(r"^\$\s+", "", text)
            following = iter(lines[i + 1 :])
            while text.endswith(("\\", "&&", "|")):
                nxt = next(following, None)
                if nxt is None:
                    break
                text = text.removesuffix("\\") + " " + nxt[2].strip()
            found.append(DocCommand(f"{doc.relative_to(REPO)}:{number}", block, text))
    return found


def simple_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell line, each as argv, redirections dropped (their target
    is kept as a written file by the caller). Comments go; quotes are honoured."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def written_files(argv: list[str]) -> set[str]:
    out = set()
    for i, arg in enumerate(argv[:-1]):
        if arg in REDIRECTS or arg in WRITES:
            out.add(argv[i + 1].lstrip("./"))
    return out


def without_redirects(argv: list[str]) -> list[str]:
    """argv without redirections, and without the `sudo` and `VAR=value` words before the
    program."""
    while argv and (argv[0] == "sudo" or re.match(r"^[A-Za-z_]\w*=", argv[0])):
        argv = argv[1:]
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in REDIRECTS:
            skip = True
            if kept and kept[-1].isdigit():  # `2>` lexed as `2`, `>`
                kept.pop()
        else:
            kept.append(arg)
    return kept


def named_paths(argv: list[str]) -> Iterator[str]:
    """Every argument, `@file` and `--opt=value` / `key=value` value: candidates for a path."""
    for arg in argv[1:]:
        for piece in dict.fromkeys((arg, arg.split("=", 1)[-1])):
            yield piece[1:] if piece.startswith("@") else piece


def is_runbook(argv0: str) -> bool:
    return argv0 == "runbook" or argv0.endswith("/runbook")


def parse_with_click(args: list[str]) -> str | None:
    """None when the CLI's parser takes `runbook ARGS`, else what it says. Commands are resolved
    and their contexts made (every option and argument converted and checked), nothing runs."""
    if not args:
        return None  # `runbook` alone prints its help (the shell-completion lines)
    try:
        ctx = cli.make_context("runbook", list(args))
        command: click.Command = cli
        while isinstance(command, click.Group):
            # what click's own Group.invoke hands the subcommand
            rest = [*ctx._protected_args, *ctx.args]
            if not rest:
                break
            name, sub, rest = command.resolve_command(ctx, rest)
            assert name is not None and sub is not None
            ctx = sub.make_context(name, rest, parent=ctx)
            command = sub
    except click.exceptions.Exit:
        return None  # --help, --version
    except click.ClickException as exc:
        return exc.format_message()
    return None


@pytest.fixture
def lenient_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path argument that must exist (BUNDLE_OR_RUN_DIR, …) takes a placeholder: whether a
    repository path exists is checked separately."""
    monkeypatch.setattr(click.Path, "convert", lambda self, value, param, ctx: value)


def test_the_documentation_shows_the_commands_this_test_reads() -> None:
    commands = documented_commands()
    texts = [c.text for c in commands]
    # the README's quick start, a guided run, the approvals, a role README's playbook run
    assert any(t.startswith("python3 -m venv .venv &&") for t in texts), texts
    assert any(t.startswith("runbook approvals show p3f9c0a1d") for t in texts), texts
    assert any(t.startswith("runbook run nccl-init-failure --target ssh://") for t in texts)
    assert any(t.startswith("ansible-playbook playbooks/shm-size-limit.yml") for t in texts)
    assert len(commands) > 70, len(commands)


def test_every_documented_runbook_command_parses_with_the_cli_parser(lenient_paths: None) -> None:
    failures = []
    parsed = 0
    for command in documented_commands():
        try:
            pipeline = simple_commands(command.text)
        except ValueError as exc:
            failures.append(f"{command.where}: cannot be split ({exc}): {command.text}")
            continue
        for argv in pipeline:
            argv = without_redirects(argv)
            if not argv or not is_runbook(argv[0]):
                continue
            parsed += 1
            problem = parse_with_click(argv[1:])
            if problem:
                failures.append(f"{command.where}: {command.text}\n    -> {problem}")
    assert failures == [], "\n".join(failures)
    assert parsed > 45, parsed


def test_a_renamed_flag_in_a_documented_command_is_caught(lenient_paths: None) -> None:
    assert parse_with_click(["approvals", "show", "p3f9c0a1d"]) is None
    assert parse_with_click(["run", "nccl-init-failure", "--target", "local"]) is None
    assert "No such option" in (parse_with_click(["run", "--no-such-flag"]) or "")
    assert "No such command" in (parse_with_click(["no-such-command"]) or "")
    assert parse_with_click(["approvals", "approve"]) is not None  # ID is required


def test_every_repository_file_a_documented_command_names_exists() -> None:
    top = tracked_top_level()
    written: dict[tuple[str, int], set[str]] = {}
    failures = []
    for command in documented_commands():
        doc = command.where.split(":", 1)[0]
        seen = written.setdefault((doc, command.block), set())
        try:
            pipeline = simple_commands(command.text)
        except ValueError:
            continue  # reported by the parsing test
        for argv in pipeline:
            for path in named_paths(without_redirects(argv)):
                clean = path.removeprefix("./")
                first = clean.split("/", 1)[0]
                extra_vars = f"@{path}" in argv
                if not ((first in top and clean != first) or extra_vars):
                    continue
                if (
                    clean.rstrip("/") in seen
                    or (REPO / clean).exists()
                    or ((REPO / doc).parent / clean).exists()
                ):
                    continue
                failures.append(f"{command.where}: {clean} is not in the repository: "
                                f"{command.text}")  # fmt: skip
            seen |= written_files(argv)
    assert failures == [], "\n".join(failures)


def test_an_extra_vars_file_no_command_writes_is_caught(tmp_path: Path) -> None:
    argv = simple_commands("ansible-playbook playbooks/shm-size-limit.yml -e @proposal-vars.yml")
    assert [p for p in named_paths(argv[0]) if f"@{p}" in argv[0]] == ["proposal-vars.yml"]
    assert not (REPO / "proposal-vars.yml").exists()
    block = simple_commands("runbook collect-plan nccl-init-failure -o plan.yml # the probes")
    assert written_files(block[0]) == {"plan.yml"}


def all_commands() -> Iterator[tuple[str, click.Command]]:
    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        yield path, command
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, f"{path} {name}")

    yield from walk(cli, "runbook")


#: what a help text names as a file or section of the repository: a path under one of its
#: top-level entries, a Markdown file, or a design document's section (§)
CITED = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+|[\w.-]+\.md|[A-Z][A-Z_]+(?:\.md)?\s+§\s*\d+)"
)


def help_texts() -> Iterator[tuple[str, str]]:
    for path, command in all_commands():
        ctx = click.Context(
            command, info_name=path, terminal_width=10_000, max_content_width=10_000
        )
        yield path, command.get_help(ctx)


def test_no_help_text_cites_a_file_or_section_the_repository_does_not_have() -> None:
    top = tracked_top_level()
    failures = []
    checked = 0
    for path, text in help_texts():
        for cited in CITED.findall(text):
            if "§" in cited:
                failures.append(f"{path}: cites {cited!r}, a document the repository lacks")
                continue
            first = cited.split("/", 1)[0]
            if cited.endswith(".md") and "/" not in cited:
                # sweep.md, incident.md: files a command writes, not repository files
                continue
            if first not in top:
                continue
            checked += 1
            if not (REPO / cited.rstrip(".,;:")).exists():
                failures.append(f"{path}: names {cited}, which is not in the repository")
    assert failures == [], "\n".join(failures)
    assert sum(1 for _ in all_commands()) > 20


def test_a_cited_design_section_would_be_caught() -> None:
    assert CITED.findall("Collect evidence into a bundle (DESIGN §4), deciding nothing.") == [
        "DESIGN §4"
    ]
    assert CITED.findall("see docs/recovery.md (examples/scheduling/x.cron)") == [
        "docs/recovery.md",
        "examples/scheduling/x.cron",
    ]
