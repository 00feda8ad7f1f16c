"""Options several commands share, defined once: the same flag, default, help and
environment variable wherever they appear (so `--format json` or `--var` reads the same in
every command's --help)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from runbook import output
from runbook.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])

#: what each output format is for, in every command's --help
FORMAT_HELP = {
    "text": "text: for people",
    "json": "json: one JSON document on stdout, for scripts",
    "markdown": "markdown: a report to paste into a ticket",
    "yaml": "yaml: for a file to edit",
    "dot": "dot: Graphviz",
    "mermaid": "mermaid: for Markdown renderers",
}


#: options that mean the same in every command, and so are read from one environment variable
#: whichever command takes them (`export RUNBOOK_DB=/srv/runbook/approvals.db` once); every
#: other option is read from RUNBOOK_<COMMAND>_<OPTION> (e.g. RUNBOOK_SWEEP_FORKS)
SHARED_ENV = {
    "db": "RUNBOOK_DB",
    "known_hosts": "RUNBOOK_KNOWN_HOSTS",
    "identities": "RUNBOOK_IDENTITY",
    "ssh_config": "RUNBOOK_SSH_CONFIG",
    "connect_timeout": "RUNBOOK_CONNECT_TIMEOUT",
    "kubectl": "RUNBOOK_KUBECTL",
    "kube_context": "RUNBOOK_CONTEXT",
    "as_user": "RUNBOOK_AS",
    "inventory": "RUNBOOK_INVENTORY",
    "textfile_dir": "RUNBOOK_TEXTFILE_DIR",
}


def format_option(*choices: str, default: str = "text") -> Callable[[F], F]:
    """`--format {choices}`; `default` first in the help."""
    described = "; ".join(FORMAT_HELP[c] for c in choices)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=default,
        show_default=True,
        help=f"Output format ({described}).",
    )


def var_option(help: str = "Set a runbook variable (repeatable).") -> Callable[[F], F]:
    """`--var NAME=VALUE`, repeatable."""
    return click.option("--var", "var_items", multiple=True, metavar="NAME=VALUE", help=help)


#: the job-context flags (job_context_options): each sets the runbook variable of its name
JOB_CONTEXT_VARS = ("pod", "namespace", "cgroup_dir")


def job_context_options(func: F) -> F:
    """`--pod`, `--namespace/-n`, `--cgroup DIR`: the failed job on the node, the same flags
    on every command that walks one (`run`, `collect`); each sets its runbook variable, as
    `--var pod=…`, `--var namespace=…`, `--var cgroup_dir=…` do."""
    for decorator in reversed([
        click.option("--pod", help="Pod of the failed job (sets var pod)."),
        click.option("--namespace", "-n", help="Its namespace (sets var namespace)."),
        click.option("--cgroup", "cgroup_dir", metavar="DIR",
                     help="The pod's memory cgroup directory, v1 or v2 (sets var cgroup_dir)."),
    ]):  # fmt: skip
        func = decorator(func)
    return func


def apply_job_context(variables: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """`variables` with what the job-context flags gave (popped from `flags`); a flag wins
    over the same --var."""
    for name in JOB_CONTEXT_VARS:
        value = flags.pop(name, None)
        if value is not None:
            variables[name] = value
    return variables


def runbook_option() -> Callable[[F], F]:
    """`--runbook ID|FILE` for commands that analyse recorded evidence."""
    return click.option(
        "--runbook",
        "runbook_ref",
        default="nccl-init-failure",
        show_default=True,
        metavar="RUNBOOK",
        help="Runbook to analyse with (a shipped id or a YAML file; see `runbook runbooks`).",
    )


def _verbose(ctx: click.Context, param: click.Parameter, value: int) -> None:
    if value and not output.quiet():
        output.set_verbosity(output.verbosity() + value)
        apply_log_level()


def _quiet(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        output.set_verbosity(-1)
        apply_log_level()


def apply_log_level() -> None:
    import logging

    level = output.verbosity()
    logging.getLogger().setLevel(
        logging.ERROR if level < 0 else logging.DEBUG if level >= 2 else
        logging.INFO if level == 1 else logging.WARNING
    )


def verbosity_options(func: F) -> F:
    """`-v/--verbose` (repeatable) and `-q/--quiet`, on the root group and on every command
    (`runbook -q sweep …` and `runbook sweep … -q` mean the same). -q wins over -v."""
    func = click.option(
        "--quiet",
        "-q",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_quiet,
        help="Only results and errors: no progress, no stage-by-stage walk, no playbook task "
        "lines, no warnings logged.",
    )(func)
    return click.option(
        "--verbose",
        "-v",
        count=True,
        expose_value=False,
        callback=_verbose,
        help="More detail: -v the first lines of each command's output in a guided walk and "
        "informational logs; -vv debug logs.",
    )(func)


def complete_runbook(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[click.shell_completion.CompletionItem]:
    """Shell completion of RUNBOOK: the shipped ids, or a file when it looks like a path."""
    from click.shell_completion import CompletionItem

    if "/" in incomplete or incomplete.startswith(".") or incomplete.endswith((".yaml", ".yml")):
        return [CompletionItem(incomplete, type="file")]
    try:
        from runbook.spec import shipped

        ids = [ref for ref in shipped() if ref.startswith(incomplete)]
    except Exception:  # completion never prints a traceback into the user's shell
        ids = []
    return [CompletionItem(ref) for ref in ids] or [CompletionItem(incomplete, type="file")]


def _option_in_chain(ctx: click.Context | None, *names: str) -> Any:
    while ctx is not None:
        for name in names:
            value = (ctx.obj or {}).get(name) if isinstance(ctx.obj, dict) else None
            value = value or ctx.params.get(name)
            if value:
                return value
        ctx = ctx.parent
    return None


def proposal_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A proposal ID as typed: text (an argument of bytes that are not UTF-8, `$'\\xff'`, is
    refused in one line before it reaches the store)."""
    if value is None:
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = repr(value.encode("utf-8", "surrogateescape"))[2:-1]
        raise UsageError(
            f"no proposal {shown}: a proposal ID is text (see `runbook approvals list`)"
        ) from None
    return value


def complete_proposal(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[click.shell_completion.CompletionItem]:
    """Shell completion of a proposal ID from the approval store the command would open
    (--db, RUNBOOK_DB, the config's), pending ones first; read-only, and nothing on error."""
    from pathlib import Path

    from click.shell_completion import CompletionItem

    try:
        from runbook import config as config_mod
        from runbook.remedies.store import Store

        config = _option_in_chain(ctx, "config", "config_file")
        cfg = config_mod.load(Path(config) if config else None, db=_option_in_chain(ctx, "db"))
        if isinstance(cfg.db, Path) and not cfg.db.exists():
            return []
        with Store(cfg.db, readonly=True) as store:
            proposals = store.list(states=None)
    except Exception:  # completion never prints a traceback into the user's shell
        return []
    order = {"pending": 0, "running": 1}
    proposals.sort(key=lambda p: (order.get(p.state, 2), p.id))
    return [
        CompletionItem(p.id, help=f"{p.kind} on {p.node} [{p.state}]")
        for p in proposals
        if p.id.startswith(incomplete)
    ]


def textfile_dir_option(func: F) -> F:
    """`--textfile-dir DIR` on a command that changes the approval queue or sweeps: where
    node_exporter's textfile collector reads. Set for the command's run only, it reaches every
    configuration the command loads (runbook.config.flag_settings), the ones deep in a job run
    included, and nothing after it."""

    @functools.wraps(func)
    def command(*args: Any, textfile_dir: str | None = None, **kwargs: Any) -> Any:
        if not textfile_dir:
            return func(*args, **kwargs)
        from runbook import config as config_mod

        settings = config_mod.flag_settings.get()
        token = config_mod.flag_settings.set({**settings, "textfile_dir": textfile_dir})
        try:
            return func(*args, **kwargs)
        finally:
            config_mod.flag_settings.reset(token)

    option = click.option(
        "--textfile-dir", "textfile_dir", type=click.Path(file_okay=False),
        help="node_exporter's textfile collector directory: the approval queue's metrics "
        "(runbook-approvals.prom) and a sweep's runbook.prom are replaced there atomically "
        "(default: metrics.textfile_dir in the config).",
    )  # fmt: skip
    return cast(F, option(command))


def load_config(ctx: click.Context, *, db: str | None = None, notifies: bool = True) -> Any:
    """The configuration (runbook.config.Config) the root group's --config names, else the
    default file, with `db` (a command's --db) over it: how every command reads it. A command
    that sends no notice (`notifies` False) warns of a bad notify setting and goes on."""
    from pathlib import Path

    from runbook import config as config_mod

    config = (ctx.find_root().obj or {}).get("config")
    loaded = config_mod.load(Path(config) if config else None, db=db, notifies=notifies)
    for warning in loaded.warnings:
        click.echo(f"runbook: warning: {warning}", err=True)
    return loaded


# -- runbook variables ---------------------------------------------------------------------------

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


# -- where a command goes: a node, a job ---------------------------------------------------------

#: the target flags (target_options) by their Python names, as TargetSpec.from_flags reads them
TARGET_KEYS = (
    "identities",
    "known_hosts",
    "accept_new_host_keys",
    "jump",
    "connect_timeout",
    "ssh_config",
    "nsenter",
    "kubectl",
    "kube_context",
    "debug_image",
    "debug_namespace",
)


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
        click.option(
            "--debug-image",
            metavar="IMAGE",
            envvar="RUNBOOK_DEBUG_IMAGE",
            help="Image of the debug pod of kubectl-debug:// targets (needs sh, nsenter and "
            "setsid; default: kubernetes.debug_image in the config, else "
            "docker.io/library/debian:bookworm-slim).",
        ),
        click.option(
            "--debug-namespace",
            metavar="NAMESPACE",
            envvar="RUNBOOK_DEBUG_NAMESPACE",
            help="Namespace of the debug pod of kubectl-debug:// targets (default: "
            "kubernetes.debug_namespace in the config, else default).",
        ),
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


def sanitize_map_path(sanitize: bool, sanitize_map: str | None) -> Path | None:
    if sanitize_map and not sanitize:
        raise UsageError("--sanitize-map needs --sanitize")
    return Path(sanitize_map) if sanitize_map else None


JOB_KEYS = (
    "job",
    "hosts_from_file",
    "inventory",
    "slurm_via",
    "ssh_user",
    "agent_namespace",
    "agent_selector",
    "kube_debug",
    "forks",
    "timeout_per_host",
)


def job_option_decorators() -> list[Any]:
    return [
        click.option(
            "--job",
            metavar="KIND/NAMESPACE/NAME | slurm:JOBID",
            help="Diagnose a whole job: a Kubernetes Job, PyTorchJob, TFJob or MPIJob, or a "
            "Slurm job; every node it ran on is read at once.",
        ),
        click.option(
            "--hosts-from-file",
            type=click.Path(dir_okay=False),
            help="A job's nodes, one per line: a target or inventory name, then optional "
            "NAME=VALUE runbook variables (ranks=0,1 app_log_dir=...).",
        ),
        click.option(
            "--inventory",
            "-i",
            type=click.Path(),
            help="Ansible inventory naming how to reach a job's hosts (Slurm host names, "
            "names in --hosts-from-file).",
        ),
        click.option(
            "--slurm-via",
            metavar="TARGET",
            default="local",
            show_default=True,
            help="Where to run scontrol (e.g. ssh://login-1).",
        ),
        click.option(
            "--ssh-user",
            default="root",
            show_default=True,
            help="SSH user for a job's hosts not in --inventory.",
        ),
        click.option(
            "--agent-namespace",
            default="kube-system",
            show_default=True,
            help="Namespace of the node-agent pods (Kubernetes jobs).",
        ),
        click.option(
            "--agent-selector",
            default="app=node-agent",
            show_default=True,
            help="Label selector of the node-agent pods (Kubernetes jobs).",
        ),
        click.option(
            "--kube-debug",
            is_flag=True,
            help="Reach each node of a Kubernetes job through a debug pod made for the run "
            "(kubectl-debug://NODE, deleted after it) instead of its node agent.",
        ),
        click.option(
            "--forks",
            type=click.IntRange(1, 1024),
            default=32,
            show_default=True,
            help="Nodes of a job read at once.",
        ),
        click.option(
            "--timeout-per-host",
            type=click.FloatRange(min=0.5),
            default=120.0,
            show_default=True,
            help="Seconds one node of a job may take, connect included.",
        ),
    ]


def job_options(func: F) -> F:
    """--job, --hosts-from-file and how to reach a job's nodes (`run` of a whole job)."""
    for decorator in reversed(job_option_decorators()):
        func = decorator(func)
    return func


#: --db wherever the approval store is named (approvals, run, sweep, verify)
DB_HELP = (
    "Approval store: a SQLite file, or postgresql://USER@HOST:PORT/DBNAME shared by several "
    "machines (the password from PGPASSWORD or PGPASSFILE, never in the URL)."
)
