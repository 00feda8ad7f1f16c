"""The `runbook` command line: the root group, and `main` (exit codes, one-line errors). Each
command is in a module of this package named for what it works on (node, runbooks, demo,
sweep, resume, approvals, verify, …): it parses flags, calls runbook.session, and renders.

Exit codes: 0 the command ran (whatever it found), 1 refused or failed (an approval refused,
a remedy that failed, an audit chain broken, a memory limit the guard refuses), 2 usage or bad
input, 3 the target is unreachable or refused (host key, authentication), 130 interrupted
(^C), 143 terminated (SIGTERM), 129 hung up (SIGHUP): see runbook/interrupt.py.
Every error is one line on stderr; a traceback reaching a user is a bug (`--debug` shows it).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

import click

from runbook import __version__
from runbook.errors import RunbookError
from runbook.output import verbosity

log = logging.getLogger("runbook")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="runbook")
@click.option("--debug", is_flag=True, help="Log debug detail and show tracebacks.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    envvar="RUNBOOK_CONFIG",
    help="Configuration file (default ~/.config/nccl-runbook/config.yaml).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, config_file: str | None) -> None:
    """Decision-tree runbooks for failed NCCL/GPU training jobs.

    Walks first application error → rank lifecycle → cgroup memory → NVIDIA/kernel logs →
    GPU and PCIe → SHM/P2P → RDMA/Socket → nccl-tests on a node, names the earliest anomaly,
    and proposes fixes that run only after a human approves.

    \b
    Start with:  runbook demo
    """
    ctx.obj = {"debug": debug, "config": config_file}
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not debug and verbosity():  # `runbook -v …` / `runbook -q …`, parsed before this body
        from runbook.cli.options import apply_log_level

        apply_log_level()
    # paramiko logs a traceback for each failed banner; our errors say it in one line
    logging.getLogger("paramiko").setLevel(logging.DEBUG if debug else logging.CRITICAL)
    from runbook.redact import RedactingFilter

    for handler in logging.getLogger().handlers:  # never a secret in a log (STYLE §10)
        handler.addFilter(RedactingFilter())


def _register_subcommands() -> None:
    from runbook.cli.approvals import approvals, audit

    cli.add_command(approvals)
    cli.add_command(audit)
    from runbook.cli.estimate import estimate_memory

    cli.add_command(estimate_memory)
    # modules that add their own commands: each exposes COMMANDS (a list of click commands)
    import importlib

    for name in (
        "runbook.cli.node", "runbook.cli.runbooks", "runbook.cli.demo", "runbook.cli.sweep",
        "runbook.cli.verify", "runbook.cli.resume", "runbook.cli.listing", "runbook.cli.npd",
        "runbook.cli.setup", "runbook.cli.desk", "runbook.cli.signatures",
    ):  # fmt: skip
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        for command in getattr(module, "COMMANDS", []):
            cli.add_command(command)


_register_subcommands()


def _everywhere() -> None:
    """What every command has, set once after registration (so a command added later gets it
    too): -v/-q, and an environment variable for every option, shown in --help — the shared
    ones (runbook.cli.options.SHARED_ENV, e.g. RUNBOOK_DB) by one name for every command, the
    rest RUNBOOK_<COMMAND>_<OPTION> (click's auto_envvar_prefix, given in _main)."""
    from runbook.cli.options import SHARED_ENV, verbosity_options

    def walk(command: click.Command, path: tuple[str, ...]) -> None:
        verbosity_options(command)
        for param in command.params:
            if not isinstance(param, click.Option) or param.name in ("help", "version"):
                continue
            if param.name in ("verbose", "quiet"):
                # read once, by the root group: a subcommand reading it too would count -v twice
                param.envvar = f"RUNBOOK_{param.name.upper()}" if not path else None
            elif param.envvar is None:
                # named after the flag users type (--format), not its Python name (fmt)
                flag = max(param.opts, key=len).lstrip("-")
                param.envvar = SHARED_ENV.get(param.name or "") or "_".join(
                    ("RUNBOOK", *path, flag)
                ).upper().replace("-", "_")
            param.show_envvar = param.envvar is not None
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(cli, ())


_everywhere()


def main(argv: Sequence[str] | None = None) -> int:
    from runbook.interrupt import stop_signals
    from runbook.redacted_output import redacted_output

    # SIGTERM and SIGHUP end a command as ^C does (runbook/interrupt.py); whatever it prints is
    # redacted as files are (runbook/redacted_output.py)
    with stop_signals(), redacted_output():
        return _main(argv)


def console() -> NoReturn:
    """The installed `runbook` command (and `python -m runbook`): main(), then exit without
    tearing the interpreter down object by object.

    By the time a command returns there is nothing left to do but free memory: a walk leaves
    its parsed facts, compiled templates and some three hundred modules behind, and freeing
    them one by one at shutdown took 40-60 ms of a one-second guided run. So, once main() has
    returned: what shutdown does that matters is done here (atexit handlers run, stdout and
    stderr flushed), then the process ends with os._exit. Only when no thread other than
    daemons is left and no profiler or tracer watches (they write their results after the
    program ends); else (a worker still running, stdout that cannot be flushed, a profile
    being taken) the normal exit, which waits for them and reports as Python does."""
    code = main()
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    alone = all(t.daemon or t is threading.main_thread() for t in threading.enumerate())
    if alone and not watched:
        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed pipe: let the normal exit report it
            sys.exit(code)
        os._exit(code)
    sys.exit(code)


def _stopped(exc: BaseException) -> int:
    """One line for a command stopped by a signal; its exit code (128 + the signal)."""
    from runbook.interrupt import as_interrupted
    from runbook.redact import redact

    stopped = as_interrupted(exc)
    click.echo(f"runbook: {redact(stopped.one_line())}", err=True)
    return stopped.exit_code


def _main(argv: Sequence[str] | None) -> int:
    from runbook.interrupt import settle
    from runbook.output import set_verbosity
    from runbook.redact import redact

    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    set_verbosity(0)  # -v/-q of this invocation only (tests call main more than once)
    try:
        rc = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="runbook",
            standalone_mode=False,
            auto_envvar_prefix="RUNBOOK",
        )
        if isinstance(rc, int):  # click returns an Exit's code instead of raising it here
            return rc
    except click.exceptions.Exit as exc:
        return int(exc.exit_code or 0)
    except click.exceptions.Abort as exc:
        settle()
        # click turns an EOFError escaping a command into Abort too; that is a bug, not ^C
        if isinstance(exc.__cause__, EOFError):
            if debug:
                raise exc.__cause__ from None
            click.echo("runbook: internal error: unexpected end of stream (EOFError)", err=True)
            return 1
        if isinstance(exc.__context__, KeyboardInterrupt):  # click's wrapping of ^C, SIGTERM
            return _stopped(exc)
        click.echo("runbook: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return 2
    except RunbookError as exc:
        if debug:
            log.exception("error")
        click.echo(f"runbook: {redact(exc.one_line())}", err=True)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # ^C, SIGTERM, SIGHUP (Interrupted): one line, 128 + N
        settle()
        return _stopped(exc)
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the last guard: a bug, still one line (with --debug, the trace)
        if debug:
            raise
        click.echo(
            redact(f"runbook: internal error: {type(exc).__name__}: {exc} (re-run with --debug)"),
            err=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
