"""The `runbook` command line: parse flags, call the library, render. Nothing else.

Exit codes: 0 the command ran (whatever it found), 1 refused or failed (an approval refused,
a remedy that failed, an audit chain broken, a memory limit the guard refuses), 2 usage or bad
input, 3 the target is unreachable or refused (host key, authentication), 130 interrupted
(^C), 143 terminated (SIGTERM), 129 hung up (SIGHUP): see runbook/interrupt.py.
Every error is one line on stderr; a traceback reaching a user is a bug (`--debug` shows it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console

from runbook import __version__
from runbook.cli.options import (
    complete_runbook,
    format_option,
    load_config,
    runbook_option,
    textfile_dir_option,
    var_option,
)
from runbook.errors import RunbookError, UsageError
from runbook.output import count, output_console, verbosity

if TYPE_CHECKING:  # imported when a command runs: `runbook --help` stays fast
    from runbook.executor import RunResult

log = logging.getLogger("runbook")

F = TypeVar("F", bound=Callable[..., Any])

_VAR = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)


def parse_vars(items: Sequence[str]) -> dict[str, Any]:
    """`--var k=v`: integers and decimals are typed, everything else stays a string (no YAML
    guessing: `--var flag=no` must not become False)."""
    result: dict[str, Any] = {}
    for item in items:
        match = _VAR.match(item)
        if not match:
            raise UsageError(f"--var {item!r}: expected NAME=VALUE with NAME an identifier")
        name, value = match.groups()
        if re.fullmatch(r"-?\d+", value):
            result[name] = int(value)
        elif re.fullmatch(r"-?\d+\.\d+", value):
            result[name] = float(value)
        else:
            result[name] = value
    return result


def _new_run_dir(runbook_id: str, root: Path | None) -> Path:
    from runbook.rundir import new_path

    return new_path("runs", runbook_id, root=root)


def target_options(func: F) -> F:
    """Flags shared by every command that opens a target."""
    decorators = [
        click.option(
            "--identity",
            "identities",
            multiple=True,
            type=click.Path(dir_okay=False),
            help="SSH private key (repeatable); default: the agent and ~/.ssh keys.",
        ),
        click.option(
            "--known-hosts",
            type=click.Path(dir_okay=False),
            help="known_hosts file to verify host keys (default ~/.ssh/known_hosts).",
        ),
        click.option(
            "--accept-new-host-keys",
            is_flag=True,
            help="Trust and record a host key seen for the first time (a changed key "
            "is still refused).",
        ),
        click.option(
            "--jump", metavar="[USER@]HOST[:PORT]", help="SSH bastion to reach the target through."
        ),
        click.option(
            "--connect-timeout",
            type=click.FloatRange(min=0.1),
            default=None,
            help="Seconds to connect and authenticate (default: the ssh config's "
            "ConnectTimeout, else 10).",
        ),
        click.option(
            "--ssh-config",
            metavar="FILE",
            envvar="RUNBOOK_SSH_CONFIG",
            help="OpenSSH client config to resolve ssh:// names with, as `ssh NAME` does "
            "(default ~/.ssh/config; `none` for none). Command-line values win over it.",
        ),
        click.option(
            "--nsenter",
            type=click.IntRange(min=1),
            is_flag=False,
            flag_value=1,
            default=None,
            metavar="[PID]",
            help="Run every command inside PID's namespaces "
            "(nsenter --target PID --mount --uts --ipc --net --pid); --nsenter alone means PID 1.",
        ),
        click.option(
            "--kubectl",
            default="kubectl",
            show_default=True,
            help="kubectl binary for kubectl:// targets.",
        ),
        click.option("--context", "kube_context", help="kubectl context for kubectl:// targets."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def sanitize_options(func: F) -> F:
    """--sanitize and --sanitize-map (runbook.report.sanitize)."""
    func = click.option(
        "--sanitize-map",
        type=click.Path(dir_okay=False),
        metavar="FILE",
        help="With --sanitize: also write placeholder → original here (mode 0600), "
        "never into the output.",
    )(func)
    return click.option(
        "--sanitize",
        is_flag=True,
        help="Replace node, pod, namespace, job and image names, IPs, UUIDs, bus IDs, MACs "
        "and container IDs with stable placeholders (<NODE_1>, <POD_UID_1>, …).",
    )(func)


def _sanitize_map(sanitize: bool, sanitize_map: str | None) -> Path | None:
    if sanitize_map and not sanitize:
        raise UsageError("--sanitize-map needs --sanitize")
    return Path(sanitize_map) if sanitize_map else None


def job_options(func: F) -> F:
    from runbook.cli.job import job_option_decorators

    for decorator in reversed(job_option_decorators()):
        func = decorator(func)
    return func


def _target_record(target: str, kw: dict[str, Any]) -> Any:
    """The target as the approval store keeps it (to re-check the node, and for Ansible)."""
    from runbook.remedies.plans import Target
    from runbook.targets import recorded_config_path

    return Target(
        url=target,
        ssh_config=recorded_config_path(kw.get("ssh_config")),
        identities=tuple(str(Path(p).resolve()) for p in kw.get("identities") or ()),
        known_hosts=str(Path(kw["known_hosts"]).resolve()) if kw.get("known_hosts") else None,
        jump=kw.get("jump"),
        connect_timeout=float(kw.get("connect_timeout") or 10.0),
        nsenter=kw.get("nsenter"),
        kubectl=kw.get("kubectl") or "kubectl",
        kube_context=kw.get("kube_context"),
    )


def _open(target: str, kw: dict[str, Any]) -> Any:
    from runbook.targets import TargetOptions, open_target

    options = TargetOptions(
        identities=tuple(Path(p) for p in kw.pop("identities", ()) or ()),
        known_hosts=Path(kw["known_hosts"]) if kw.get("known_hosts") else None,
        accept_new_host_keys=kw.pop("accept_new_host_keys", False),
        jump=kw.pop("jump", None),
        connect_timeout=kw.pop("connect_timeout", None),
        ssh_config=kw.pop("ssh_config", None),
        nsenter=kw.pop("nsenter", None),
        kubectl=kw.pop("kubectl", "kubectl"),
        kube_context=kw.pop("kube_context", None),
    )
    kw.pop("known_hosts", None)
    return open_target(target, options)


class _Opening:
    """A target being opened in a thread while the caller loads the runbook and its config:
    the SSH handshake (and paramiko's import) waits on the network while the runbook's
    templates are checked, instead of after them. `result()` is the transport or the error
    opening it raised; `discard()` (the caller failed first) returns at once, and whatever
    the thread opens is closed by it (a bad runbook is reported without waiting out a
    connect timeout)."""

    def __init__(self, target: str, kw: dict[str, Any]) -> None:
        import threading

        self._lock = threading.Lock()
        self._discarded = False
        self._transport: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._open, args=(target, dict(kw)), name="open-target", daemon=True
        )
        self._thread.start()

    def _open(self, target: str, kw: dict[str, Any]) -> None:
        try:
            transport = _open(target, kw)
        except BaseException as exc:  # handed to the caller's thread by result()
            self._error = exc
            return
        with self._lock:
            if not self._discarded:
                self._transport = transport
                return
        transport.close()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._transport

    def discard(self) -> None:
        with self._lock:
            self._discarded = True
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()


def _replay_context(transport: Any, variables: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """For a replayed bundle: its node name and context (runbook.bundle.replay_defaults)."""
    from runbook.bundle import replay_defaults
    from runbook.transports.replay import ReplayTransport

    if isinstance(transport, ReplayTransport):
        meta = transport.bundle.meta
        return meta.node, replay_defaults(meta, variables)
    return None, {}


def guided_walk(
    runbook: Any,
    transport: Any,
    variables: dict[str, Any],
    directory: Any,
    console: Console,
    *,
    verbose: bool,
    resume: Any = None,
) -> RunResult:
    """The walk of `run`, `resume` and `demo`: stage by stage on `console`, into `directory`;
    a replayed bundle lends its node name and context. `resume`: a restored conductor."""
    from runbook.executor import execute
    from runbook.render.console import GuidedConsole

    node, context = _replay_context(transport, variables)
    return execute(
        runbook,
        transport,
        variables=variables,
        context=context,
        observer=GuidedConsole(console, verbose=verbose),
        run_dir=directory,
        node=node,
        resume=resume,
    )


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


@cli.command()
@click.argument("runbook_ref", metavar="RUNBOOK", shell_complete=complete_runbook)
@click.option(
    "--target",
    "-t",
    help="local | ssh://[user@]host[:port] | kubectl://NAMESPACE/POD | replay://BUNDLE",
)
@click.option(
    "--var",
    "var_items",
    multiple=True,
    metavar="NAME=VALUE",
    help="Set a runbook variable (repeatable).",
)
@click.option(
    "--no-input", is_flag=True, help="Never prompt (cron, CI); proposals are only listed."
)
@click.option(
    "--run-dir", type=click.Path(file_okay=False), help="Where to keep this run's artifacts."
)
@format_option("text", "json", default="text")
@click.option("--db", type=click.Path(dir_okay=False), help="Approval store for the proposals.")
@click.option("--as", "as_user", metavar="NAME", help="Record NAME as the approver at prompts.")
@textfile_dir_option
@job_options
@target_options
@click.pass_context
def run(
    ctx: click.Context,
    /,
    runbook_ref: str,
    target: str | None,
    var_items: tuple[str, ...],
    no_input: bool,
    run_dir: str | None,
    fmt: str,
    db: str | None,
    as_user: str | None,
    **kw: Any,
) -> None:
    """Walk RUNBOOK (a shipped id or a YAML file) over a target, guided stage by stage.

    Each proposal is queued in the approval store; on a terminal it then stops at a prompt
    showing its evidence and the Ansible check-mode diff: approve, deny (with a reason) or
    skip (leave it queued, audited). --no-input, or no terminal, never approves.

    Interrupted anywhere (^C: exit 130, SIGTERM: 143, SIGHUP: 129, or killed), the run
    directory stays consistent and `runbook resume RUN_DIR` continues it from the last
    completed stage, asking only the approvals not yet answered.

    With --job (or --hosts-from-file) instead of --target: the whole failed job — every node
    it ran on, read-only and at once — merged into one job verdict on one clock-corrected
    time axis.

    \b
    runbook run nccl-init-failure --target ssh://root@gpu-node-07 --var pod=trainer-0
    runbook run nccl-init-failure --job pytorchjob/ml/llama-ft
    runbook run nccl-init-failure --job slurm:48211 --slurm-via ssh://login-1 --inventory inv/
    runbook run nccl-init-failure --hosts-from-file job-hosts.txt"""
    from runbook.cli.job import JOB_KEYS, run_job_command

    job_kw = {key: kw.pop(key) for key in JOB_KEYS}
    if job_kw["job"] or job_kw["hosts_from_file"]:
        if target:
            raise UsageError("give --target for one node, or --job/--hosts-from-file for a job")
        run_job_command(ctx, runbook_ref, var_items, run_dir, fmt, db, job_kw, kw)
        return
    if not target:
        raise UsageError("give --target (one node), or --job/--hosts-from-file (a whole job)")
    from runbook.cli.resume import approvals_phase
    from runbook.interrupt import as_interrupted
    from runbook.rundir import RECORD, RunDirectory, new_record, read_runbook
    from runbook.targets import scheme_of

    scheme_of(target)  # an unknown scheme is a usage error before anything starts
    opening = _Opening(target, kw)
    try:
        runbook, runbook_file = read_runbook(runbook_ref)
        variables = parse_vars(var_items)
        cfg = load_config(ctx, db=db)
        saved_target = _target_record(target, kw)
        # what `runbook resume` needs to walk the same runbook over the same target (no secret)
        record = new_record(
            runbook_file,
            saved_target.as_dict(),
            variables,
            accept_new_host_keys=bool(kw.get("accept_new_host_keys")),
            db=str(Path(db).resolve()) if db else None,
            config=str(Path(ctx.obj["config"]).resolve()) if ctx.obj.get("config") else None,
            as_user=as_user,
            no_input=no_input,
        )
    except BaseException:
        opening.discard()
        raise
    transport = opening.result()
    directory: RunDirectory | None = None
    try:
        try:
            directory = RunDirectory(
                Path(run_dir) if run_dir else _new_run_dir(runbook.id, None), exclusive=True
            )
            directory.write_json(RECORD, record.as_dict())
            result = guided_walk(
                runbook,
                transport,
                variables,
                directory,
                output_console(stderr=fmt == "json"),
                verbose=verbosity() > 0,
            )
        finally:
            transport.close()
        interactive = not no_input and fmt == "text" and sys.stdin.isatty()
        approvals_phase(
            output_console(stderr=fmt == "json"),
            cfg,
            directory,
            record,
            runbook,
            result.verdict,
            interactive=interactive,
            as_user=as_user,
        )
    except (KeyboardInterrupt, click.exceptions.Abort) as exc:
        if directory is None:
            raise
        # the run directory is consistent wherever this came (runbook/interrupt.py)
        raise as_interrupted(exc, hint=f"resume with: runbook resume {directory.path}") from None
    finally:
        if directory is not None:
            directory.close()
    if fmt == "json":
        click.echo(json.dumps(result.verdict.to_json(), indent=2, default=str))
    else:
        click.echo(f"\nrun directory: {result.run_dir}", err=False)


@cli.command()
@click.argument("bundle", type=click.Path())
@runbook_option()
@format_option("text", "json", "markdown", default="text")
@var_option()
def analyze(bundle: str, runbook_ref: str, fmt: str, var_items: tuple[str, ...]) -> None:
    """Analyse a recorded evidence BUNDLE (a directory or .tar.gz) offline."""
    from runbook.executor import execute
    from runbook.render import node_markdown as markdown
    from runbook.render.console import render_verdict
    from runbook.spec import load_file, resolve
    from runbook.transports.replay import ReplayTransport

    runbook = load_file(resolve(runbook_ref))
    transport = ReplayTransport(bundle)
    try:
        variables = parse_vars(var_items)
        node, context = _replay_context(transport, variables)
        result = execute(runbook, transport, variables=variables, context=context, node=node)
    finally:
        transport.close()
    if fmt == "json":
        click.echo(json.dumps(result.verdict.to_json(), indent=2, default=str))
    elif fmt == "markdown":
        click.echo(markdown.render(result.verdict), nl=False)
    else:
        render_verdict(output_console(), result.verdict)


@cli.command()
@click.option("--target", "-t", required=True, help="Where to collect from (as for `run`).")
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(file_okay=False),
    help="Bundle directory to write.",
)
@click.option(
    "--runbook",
    "runbook_ref",
    default="nccl-init-failure",
    show_default=True,
    help="Whose stages say what to collect.",
)
@click.option("--pod", help="Pod of the failed job (sets var pod).")
@click.option("--namespace", "-n", help="Its namespace (sets var namespace).")
@click.option(
    "--cgroup", "cgroup_dir", help="The pod's memory cgroup directory (sets var cgroup_dir)."
)
@var_option()
@format_option("text", "json", default="text")
@sanitize_options
@target_options
def collect(
    target: str,
    output: str,
    runbook_ref: str,
    pod: str | None,
    namespace: str | None,
    cgroup_dir: str | None,
    var_items: tuple[str, ...],
    fmt: str,
    sanitize: bool,
    sanitize_map: str | None,
    **kw: Any,
) -> None:
    """Collect every stage's evidence into a bundle (DESIGN §4), deciding nothing.

    With --sanitize the bundle holds placeholders (<NODE_1>, <POD_UID_1>, …) instead of
    identifiers, and still analyses to the same verdict. --format json: {"bundle", "node",
    "sanitized", "files", "failed": [names]}."""
    from runbook.bundle import BundleMeta
    from runbook.executor import execute
    from runbook.report.incident import check_map_path, write_collected
    from runbook.spec import load_file, resolve
    from runbook.timestamps import now_iso

    runbook = load_file(resolve(runbook_ref))
    variables = parse_vars(var_items)
    for key, value in (("pod", pod), ("namespace", namespace), ("cgroup_dir", cgroup_dir)):
        if value is not None:
            variables[key] = value
    out = Path(output)
    if (out / "bundle.yaml").exists():
        raise UsageError(f"{out} already holds a bundle; choose another --output")
    map_path = _sanitize_map(sanitize, sanitize_map)
    if map_path is not None:
        check_map_path(map_path, out)
    transport = _open(target, kw)
    try:
        result = execute(runbook, transport, variables=variables, collect_all=True)
    finally:
        transport.close()
    extra = {"cgroup_dir": cgroup_dir} if cgroup_dir else {}
    offset = result.results.get("timezone.txt")
    if offset is not None and offset.ok and offset.stdout.strip():
        extra["utc_offset"] = offset.stdout.strip()
    meta = BundleMeta(
        node=result.node, collected_at=now_iso(), pod=pod, namespace=namespace, extra=extra
    )
    node = write_collected(out, meta, result.results.values(), sanitize=sanitize, map_path=map_path)
    failed_names = sorted(name for name, r in result.results.items() if r.failure)
    failed = len(failed_names)
    if fmt == "json":
        click.echo(json.dumps({
            "bundle": str(out.resolve()),
            "node": node,
            "sanitized": sanitize,
            "files": len(result.results),
            "failed": failed_names,
        }, indent=2))
        return
    click.echo(
        f"wrote {out}{' (sanitized)' if sanitize else ''}: {count(len(result.results), 'file')} "
        f"from {node}"
        + (f" ({failed} not collected or failed)" if failed else "")
    )


@cli.command()
@click.argument("path", metavar="BUNDLE_OR_RUN_DIR", type=click.Path(exists=True))
@format_option("markdown", "json", default="markdown")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), help="Write the report here (not stdout)."
)
@click.option(
    "--runbook",
    "runbook_ref",
    default="nccl-init-failure",
    show_default=True,
    help="For a bundle: the runbook to analyse it with.",
)
@var_option()
@sanitize_options
def report(
    path: str,
    fmt: str,
    output: str | None,
    runbook_ref: str,
    var_items: tuple[str, ...],
    sanitize: bool,
    sanitize_map: str | None,
) -> None:
    """The incident report of a run directory (its bundle/ and verdict.json) or a bundle:
    conclusion first, evidence chain, the numbers, timeline, ruled out, fixes. A job's run
    directory (`run --job`) gives the job report: ranks, nodes, cross-node timeline.

    \b
    runbook report ~/.local/state/nccl-runbook/runs/20260304T104000Z-nccl-init-failure-3f9c0a
    runbook report ./bundle --sanitize --output incident.md"""
    from runbook.report.incident import build_report, check_map_path, write_private

    map_path = _sanitize_map(sanitize, sanitize_map)
    if map_path is not None:
        check_map_path(map_path, *([Path(output)] if output else []))
    variables = parse_vars(var_items)
    built = build_report(
        Path(path), fmt=fmt, sanitize=sanitize, runbook_ref=runbook_ref, variables=variables
    )
    if map_path is not None and built.sanitizer is not None:
        write_private(map_path, built.sanitizer.mapping())
    if output:
        from runbook import atomic

        # replaced by rename: a link at the output's name is replaced, never written through
        atomic.write_text(Path(output), built.text, mode=0o644)
    else:
        click.echo(built.text, nl=False)


@cli.command()
@click.argument("runbook_ref", metavar="RUNBOOK", shell_complete=complete_runbook)
@format_option("text", "json", default="text")
def validate(runbook_ref: str, fmt: str) -> None:
    """Check RUNBOOK (a shipped id or a YAML file); print every problem with its line (exit 2
    if any error). --format json: one object, {"runbook", "file", "ok", "issues": [...]}."""
    from runbook.spec import inspect_text, resolve

    path = Path(runbook_ref)
    if not path.exists():
        path = resolve(runbook_ref)  # a shipped id, or one line naming what there is
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise UsageError(f"cannot read {runbook_ref}: {reason}") from None
    issues = inspect_text(text, str(path))
    errors = [i for i in issues if getattr(i, "severity", "error") == "error"]
    if fmt == "json":
        click.echo(json.dumps({
            "runbook": runbook_ref,
            "file": str(path),
            "ok": not errors,
            "issues": [
                {"line": i.line, "severity": i.severity, "path": i.path, "message": i.message}
                for i in issues
            ],
        }, indent=2))  # fmt: skip
    else:
        for issue in issues:
            click.echo(str(issue), err=True)
    if errors:
        raise click.exceptions.Exit(2)
    if fmt == "text":
        click.echo(f"{runbook_ref}: ok" + (f" ({count(len(issues), 'warning')})" if issues else ""))


@cli.command()
@click.argument("runbook_ref", metavar="RUNBOOK", shell_complete=complete_runbook)
@format_option("dot", "mermaid", default="mermaid")
def graph(runbook_ref: str, fmt: str) -> None:
    """Print RUNBOOK's decision graph (Graphviz dot or Mermaid)."""
    from runbook.graph import render_dot, render_mermaid
    from runbook.spec import load_file, resolve

    runbook = load_file(resolve(runbook_ref))
    click.echo(render_dot(runbook) if fmt == "dot" else render_mermaid(runbook), nl=False)


@cli.command()
@click.option(
    "--run-dir", type=click.Path(file_okay=False), help="Keep the demo run's artifacts here."
)
@click.option(
    "--no-input", is_flag=True, help="Stop after the verdict: list the proposals, never prompt."
)
def demo(run_dir: str | None, no_input: bool) -> None:
    """A guided run of the shipped nccl-init-failure runbook over a built-in replayed incident
    (the host-memory OOM that surfaced as ncclCommInitRank failure), then, on a terminal, the
    approval prompt for each proposed fix of the incident's workload manifest (check-mode
    diff; approve, deny or skip). No cluster, GPU or root.

    The demo keeps its own approval store and a copy of the manifest in a scratch folder:
    your queue, your config and your files are never touched."""
    from runbook import config as config_mod
    from runbook.cli.resume import approvals_phase
    from runbook.demo import incident_bundle, workload_manifest
    from runbook.rundir import RECORD, RunDirectory, new_record, read_runbook
    from runbook.transports.replay import ReplayTransport

    runbook, runbook_file = read_runbook("nccl-init-failure")
    console = output_console()
    scratch = Path(tempfile.mkdtemp(prefix="runbook-demo-"))
    manifest = scratch / "workload.yaml"
    manifest.write_text(workload_manifest(), encoding="utf-8")
    settings = scratch / "config.yaml"
    settings.write_text(f"approvals:\n  db: {json.dumps(str(scratch / 'approvals.db'))}\n")
    # its own store, and nowhere to publish: RUNBOOK_TEXTFILE_DIR or RUNBOOK_WEBHOOK_URL in the
    # environment must not carry the demo's proposals to a real dashboard or on-call channel
    cfg = dataclasses.replace(
        config_mod.load(settings), textfile_dir=None, notify=config_mod.Notify()
    )
    root = Path(run_dir) if run_dir else scratch / "run"
    variables: dict[str, Any] = {"manifest": str(manifest)}
    with incident_bundle() as path:
        target = f"replay://{path}"
        transport = ReplayTransport(path)
        console.print(
            f"[bold]runbook demo[/]: {runbook.title}, over replay of a recorded incident "
            f"on node {transport.bundle.meta.node}"
        )
        directory = RunDirectory(root)
        try:
            record = new_record(
                runbook_file,
                _target_record(target, {}).as_dict(),
                variables,
                config=str(settings),
                no_input=no_input,
            )
            directory.write_json(RECORD, record.as_dict())
            result = guided_walk(
                runbook, transport, variables, directory, console, verbose=verbosity() > 0
            )
            transport.close()
            interactive = not no_input and sys.stdin.isatty() and sys.stdout.isatty()
            approvals_phase(
                console,
                cfg,
                directory,
                record,
                runbook,
                result.verdict,
                interactive=interactive,
                as_user=None,
            )
        finally:
            directory.close()
            transport.close()
    db = shlex.quote(str(cfg.db))
    console.print(f"\nrun directory: {root}")
    console.print(
        "\n[bold]next[/]:\n"
        f"  runbook report {shlex.quote(str(root))}            # the incident report (markdown)\n"
        f"  runbook approvals list --db {db}   # the demo's queue\n"
        f"  runbook approvals show ID --db {db}\n"
        f"  cat {shlex.quote(str(manifest))}   # the demo's manifest (a fix approved here "
        "patched it)\n"
        "  runbook run nccl-init-failure --target ssh://root@NODE --var pod=POD --var namespace=NS"
        "   # a real node",
        soft_wrap=True,
    )


def _register_subcommands() -> None:
    from runbook.cli.approvals import approvals, audit

    cli.add_command(approvals)
    cli.add_command(audit)
    from runbook.cli.estimate import estimate_memory

    cli.add_command(estimate_memory)
    # modules that add their own commands: each exposes COMMANDS (a list of click commands)
    import importlib

    for name in (
        "runbook.cli.sweep", "runbook.cli.verify", "runbook.cli.resume", "runbook.cli.listing",
        "runbook.cli.npd",
    ):
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
