"""Running a remedy's playbook through ansible-runner: check mode with diff, then the real run.

Each run gets its own private data dir (ansible-runner's layout: `env/`, `inventory/`,
`artifacts/<ident>/` with the job's stdout and every event as JSON) under the proposal's
directory, so what Ansible did is kept next to the decision. Events are handed to a callback as
they come (the terminal shows them live) and reduced to a `PlaybookResult`: status, rc, per-host
stats, the tasks that changed or failed, and the diffs Ansible reported (for a check run: exactly
what the real run would change).

Host keys are checked (ANSIBLE_HOST_KEY_CHECKING=True, and the inventory names the known_hosts
file); no agent forwarding; the extravars hold paths and sizes, never credentials.

Nothing handed to Ansible is ever a template: the extra variables and the inventory are written
as owner-only YAML files whose every string is `!unsafe` (runbook.ansible_text), so Jinja in a
manifest, a `--var` or a name read from evidence is text — never run on the controller, not
even by the check-mode run that shows the diff before anyone approved anything.
"""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbook import atomic
from runbook.ansible_text import unsafe_yaml
from runbook.errors import RunbookError


class PlaybookError(RunbookError):
    exit_code = 1


#: the collection the playbooks' roles and module belong to (galaxy.yml)
COLLECTION = ("nccl_runbook", "fleet")
#: what a directory needs to be the collection's content
CONTENT_DIRS = ("playbooks", "roles", "plugins")


def content_dir() -> Path:
    """Where the collection's `playbooks/`, `roles/` and `plugins/` are: `$RUNBOOK_ANSIBLE_DIR`,
    the source checkout, or the installed copy under `<prefix>/share/nccl-runbook`."""
    env = os.environ.get("RUNBOOK_ANSIBLE_DIR")
    candidates = [Path(env)] if env else []
    candidates += [
        Path(__file__).resolve().parents[2],
        Path(sys.prefix) / "share" / "nccl-runbook",
    ]
    for candidate in candidates:
        if all((candidate / name).is_dir() for name in CONTENT_DIRS):
            return candidate
    raise PlaybookError(
        "the remedy playbooks are not installed (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); set RUNBOOK_ANSIBLE_DIR to a checkout of nccl-runbook"
    )


def link_collection(content: Path, scratch: Path) -> str:
    """ANSIBLE_COLLECTIONS_PATH that finds `nccl_runbook.fleet` at ``content`` (through a link
    ``scratch/ansible_collections/nccl_runbook/fleet``) before Ansible's usual places.

    The playbooks name their roles and module by FQCN; wherever the content is (a checkout, the
    installed copy, `$RUNBOOK_ANSIBLE_DIR`), the run uses exactly that copy, not one a user
    may have installed with ansible-galaxy. The usual places stay on the path for the
    collections it depends on (kubernetes.core)."""
    link = scratch.joinpath("ansible_collections", *COLLECTION)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(content.resolve(), target_is_directory=True)
    home = os.environ.get("ANSIBLE_HOME") or os.path.expanduser("~/.ansible")
    usual = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.pathsep.join(
        [os.path.join(home, "collections"), "/usr/share/ansible/collections"]
    )
    return os.pathsep.join([str(scratch), usual])


@dataclass
class TaskOutcome:
    host: str
    task: str
    status: str  # ok | changed | failed | skipped | unreachable
    message: str = ""
    diff: str = ""


@dataclass
class PlaybookResult:
    playbook: str
    check: bool
    status: str  # successful | failed | timeout | canceled
    rc: int
    stats: dict[str, Any] = field(default_factory=dict)
    tasks: list[TaskOutcome] = field(default_factory=list)
    artifact_dir: str = ""
    stdout: str = ""
    #: the signal (^C, SIGTERM, SIGHUP) that cancelled the playbook midway, if one did
    interrupted: int | None = None

    @property
    def ok(self) -> bool:
        """Ansible says successful, and it ran on a host: a play whose pattern matched no host
        exits 0 having done nothing, which is not a success."""
        return self.reason is None

    @property
    def hosts(self) -> list[str]:
        """The hosts the play ran on (ansible's `processed` stats)."""
        return sorted((self.stats or {}).get("processed") or {})

    @property
    def reason(self) -> str | None:
        """Why the run is not a success, in one line; None when it is."""
        if self.interrupted is not None:
            return f"interrupted (signal {self.interrupted})"
        if self.status != "successful" or self.rc != 0:
            first = self.failed[0] if self.failed else None
            where = f": {first.host}: {first.task}" if first else ""
            said = f" — {first.message[:200]}" if first and first.message else ""
            return f"the playbook {self.status} (rc {self.rc}){where}{said}"
        if not self.hosts:
            return "the playbook ran on no host (its inventory or limit matched none)"
        return None

    @property
    def changed(self) -> list[TaskOutcome]:
        return [t for t in self.tasks if t.status == "changed"]

    @property
    def failed(self) -> list[TaskOutcome]:
        return [t for t in self.tasks if t.status in ("failed", "unreachable")]

    def diff_text(self) -> str:
        return "\n".join(t.diff for t in self.tasks if t.diff)

    def as_dict(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook,
            "check": self.check,
            "status": self.status,
            "rc": self.rc,
            "stats": self.stats,
            "changed": [f"{t.host}: {t.task}" for t in self.changed],
            "failed": [f"{t.host}: {t.task}: {t.message}" for t in self.failed],
            "diff": self.diff_text(),
            "artifact_dir": self.artifact_dir,
            **({"reason": self.reason} if self.reason is not None else {}),
            **({"interrupted_by": self.interrupted} if self.interrupted is not None else {}),
        }


def render_diff(diff: Any) -> str:
    """Ansible's `diff` result (a dict or a list of dicts with before/after or prepared) as
    unified-diff text."""
    items = diff if isinstance(diff, list) else [diff]
    out: list[str] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("prepared"):
            out.append(str(item["prepared"]).rstrip("\n"))
            continue
        before, after = item.get("before"), item.get("after")
        if before is None and after is None:
            continue
        if not isinstance(before, str) or not isinstance(after, str):
            import json

            before = json.dumps(before, indent=2, sort_keys=True, default=str) + "\n"
            after = json.dumps(after, indent=2, sort_keys=True, default=str) + "\n"
        if before == after:
            continue
        lines = difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=str(item.get("before_header") or "before"),
            tofile=str(item.get("after_header") or "after"),
        )
        out.append("".join(lines).rstrip("\n"))
    return "\n".join(out)


_STATUS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
    "runner_item_on_failed": "failed",
}


def _outcome(event: Mapping[str, Any]) -> TaskOutcome | None:
    kind = event.get("event")
    if kind not in _STATUS:
        return None
    data = event.get("event_data") or {}
    res = data.get("res") or {}
    status = _STATUS[str(kind)]
    if status == "ok" and res.get("changed"):
        status = "changed"
    if status == "failed" and data.get("ignore_errors"):
        status = "ok"
    message = str(res.get("msg") or res.get("stderr") or "").strip()
    diff = render_diff(res.get("diff")) if res.get("diff") else ""
    return TaskOutcome(
        host=str(data.get("host") or ""),
        task=str(data.get("task") or ""),
        status=status,
        message=" ".join(message.split())[:500],
        diff=diff,
    )


def run_playbook(
    playbook: str,
    *,
    inventory: Mapping[str, Any],
    extravars: Mapping[str, Any],
    private_dir: Path,
    check: bool,
    on_task: Callable[[TaskOutcome], None] | None = None,
    timeout: float = 3600.0,
    limit: str | None = None,
    kubectl: str | None = None,
) -> PlaybookResult:
    """Run `playbooks/<playbook>` once (check mode with `check`), always with --diff.
    `kubectl`: the kubectl Ansible must find first on its PATH, as `kubectl` (Plan.kubectl)."""
    import ansible_runner  # slow to import: only when a remedy really runs

    content = content_dir()
    path = content / "playbooks" / playbook
    if not path.is_file():
        raise PlaybookError(f"no playbook {playbook!r} in {content / 'playbooks'}")
    program = None if kubectl is None else _kubectl_program(kubectl)
    inventory_file = _write_inputs(private_dir, inventory, extravars)
    # ssh control sockets need a short path (108 bytes); the private dir can be deep
    control = tempfile.mkdtemp(prefix="rbcp")
    collections = Path(tempfile.mkdtemp(prefix="rbcol"))
    envvars = _ansible_env(link_collection(content, collections), control)
    if program is not None:
        envvars["PATH"] = _kubectl_first(program, control) + os.pathsep + envvars["PATH"]
    outcomes: list[TaskOutcome] = []

    def handler(event: dict[str, Any]) -> bool:
        outcome = _outcome(event)
        if outcome is not None:
            outcomes.append(outcome)
            if on_task is not None:
                on_task(outcome)
        return True

    cmdline = "--diff --check" if check else "--diff"
    stop = _Cancel()
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private_dir),
            project_dir=str(content / "playbooks"),
            playbook=playbook,
            inventory=str(inventory_file),
            cmdline=cmdline,
            envvars=envvars,
            limit=limit,
            event_handler=handler,
            quiet=True,
            timeout=int(timeout),
            ident="check" if check else "apply",
            # without a cancel_callback ansible-runner installs its own SIGINT and SIGTERM
            # handlers and never puts ours back: ^C at every later prompt was swallowed
            cancel_callback=stop.requested,
        )
    except Exception as exc:  # ansible-runner raises bare exceptions for setup problems
        raise PlaybookError(f"ansible-runner could not start {playbook}: {exc}") from exc
    finally:
        stop.restore()
        shutil.rmtree(control, ignore_errors=True)
        shutil.rmtree(collections, ignore_errors=True)  # the link only, never what it points to
    artifacts = private_dir / "artifacts" / ("check" if check else "apply")
    return PlaybookResult(
        playbook=playbook,
        check=check,
        status=str(runner.status),
        rc=int(runner.rc if runner.rc is not None else -1),
        stats=dict(runner.stats or {}),
        tasks=outcomes,
        artifact_dir=str(artifacts),
        stdout=_stdout(artifacts),
        interrupted=stop.signum,
    )


def _kubectl_program(kubectl: str) -> Path:
    """The program `kubectl` (a path, or a name PATH finds) is; PlaybookError when none."""
    found = shutil.which(kubectl)
    if found is None:
        raise PlaybookError(f"kubectl {kubectl!r}: no such program (the run's --kubectl)")
    return Path(found).resolve()


def _kubectl_first(program: Path, into: str) -> str:
    """A directory (inside `into`) holding one link, `kubectl`, to `program`: first on
    ansible-playbook's PATH, it is the one the kubectl connection runs."""
    bindir = Path(into) / "kubectl-bin"
    bindir.mkdir(mode=0o700)
    (bindir / "kubectl").symlink_to(program)
    return str(bindir)


def _write_inputs(
    private_dir: Path, inventory: Mapping[str, Any], extravars: Mapping[str, Any]
) -> Path:
    """The inventory and extra vars where ansible-runner reads them as they are (env/extravars
    as `-e @file`), owner-only and replaced by rename (never written through a link)."""
    private_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    inventory_file = private_dir / "inventory" / "hosts.yml"
    for path, data in ((private_dir / "env" / "extravars", extravars), (inventory_file, inventory)):
        atomic.write_text(path, unsafe_yaml(data), mode=0o600, within=private_dir)
    return inventory_file


def _ansible_env(collections_path: str, control_dir: str) -> dict[str, str]:
    """ansible-playbook's environment: this interpreter's bin first on PATH, host keys
    checked, no retry files or colour, pipelining, and the caller's Ansible directories."""
    bindir = str(Path(sys.executable).parent)
    envvars = {
        "PATH": bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        "ANSIBLE_COLLECTIONS_PATH": collections_path,
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": control_dir,
        "ANSIBLE_PIPELINING": "True",
    }
    for name in ("ANSIBLE_HOME", "ANSIBLE_LOCAL_TEMP", "ANSIBLE_REMOTE_TEMP"):
        if os.environ.get(name):
            envvars[name] = os.environ[name]
    return envvars


def _stdout(artifacts: Path) -> str:
    try:
        return (artifacts / "stdout").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


class _Cancel:
    """While a playbook runs, ^C, SIGTERM and SIGHUP cancel it (ansible-runner stops
    ansible-playbook and reports `canceled`) instead of leaving it orphaned; the signal is
    kept in the result, so the caller records the outcome and then stops (Desk raises
    runbook.interrupt.Interrupted). The process's own handlers are put back afterwards."""

    def __init__(self) -> None:
        import signal

        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        try:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(signum) is signal.SIG_IGN:
                    continue
                self._previous[signum] = signal.signal(signum, self._note)
        except ValueError:  # not the main thread: signals are not ours to handle
            pass

    def _note(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum

    def requested(self) -> bool:
        return self.signum is not None

    def restore(self) -> None:
        import signal

        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
