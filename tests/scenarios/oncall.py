"""The on-call engineer at the keyboard: the installed `runbook` command driven through one
incident, every command's output kept (tests/scenarios/test_oncall_path.py asserts on it).

:func:`follow` types, for one :class:`Scenario`, what an on-call engineer types after a page:

1. ``runbook run nccl-init-failure --target … --var …`` on a pseudo-terminal: the guided walk,
   then the approval prompt, where the engineer is called away (^C: the run stops, resumable);
2. ``runbook approvals list``, ``approvals show ID``, ``approvals preview ID`` (check mode);
3. ``runbook resume RUN_DIR`` on a pseudo-terminal: the prompt again; *approve* (or *skip*, to
   approve from the queue in 4), and *no* to running the recovery check at once;
4. ``runbook approvals approve ID``: the playbook runs on the node (or, already run at the
   prompt, is refused: a proposal never runs twice);
5. ``runbook verify …`` as the tool printed it (``check that the fix held: …`` or ``later:
   …``), else ``runbook verify ID`` as the docs say;
6. ``runbook report RUN_DIR`` and ``runbook runs``;
7. the same run for a script (``--no-input --format json``) and ``approvals deny ID --reason``
   of what it queued; ``approvals list --state all``.

A Slurm job's scenario starts with ``run … --job slurm:ID --slurm-via ssh://LOGIN`` instead (a
job's proposals are queued, never prompted). Nothing is asserted here: a step that fails is
kept with its exit status and output, and the steps after it go on with what there is.

:func:`printed_commands` collects every command the outputs tell the engineer to type, and
:func:`parse_commands` parses each with the CLI's own click parser (in a subprocess of the
venv's Python, so no option callback touches the test process), never running one.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pexpect

RUNBOOK = str(Path(sys.executable).with_name("runbook"))
#: the longest one command may take (a guided run's check and real Ansible runs through a
#: node-agent double took 40 s on a loaded 2-core machine): a hang is cut off, not waited on
STEP_TIMEOUT = 120.0
#: the approval prompt (choices offered), the recovery check's offer, a denial's reason
APPROVE_PROMPT = r"\n  (approve / deny / skip|deny / skip): "
OFFER_PROMPT = r"\[y/N\]: "
REASON_PROMPT = r"\n  reason: "
#: the head line of a proposal as shown before its prompt
PROPOSAL_HEAD = re.compile(r"^(p[0-9a-f]{6,})  (\S+) on (\S+)  \[", re.M)
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")


@dataclass(frozen=True)
class Scenario:
    """One node as the field has it, and how the engineer reaches it."""

    id: str
    #: one line: how the node is configured (for the report's table)
    what: str
    #: the node's own host name (also its alias in ~/.ssh/config, where it has one)
    node: str
    #: `--target` as typed ("" for a job's scenario)
    target: str = ""
    #: the node's name as typed: what every display and file name must call it
    name: str = ""
    #: what the node lacks (tests/scenarios/fleet.py LACKABLE)
    lacks: frozenset[str] = frozenset()
    #: where the A/B is approved: at the resumed run's prompt, or from the queue
    decide: str = "prompt"
    #: flags typed after the target (key, known_hosts, …)
    extra: tuple[str, ...] = ()
    #: the jump host the address goes through (alias), if any
    jump: str | None = None
    #: `--job` and `--slurm-via`, for a job's scenario
    job: tuple[str, str] | None = None
    #: whether the verdict proposes the A/B (a change to approve), or only advice
    proposes: bool = True

    @property
    def is_job(self) -> bool:
        return self.job is not None


@dataclass
class Prompt:
    """One approval prompt the engineer saw and answered."""

    proposal: str
    kind: str
    node: str
    offered: tuple[str, ...]
    answer: str
    #: what the terminal showed from the proposal's head line to the question
    shown: str


@dataclass
class Step:
    """One command typed, and what came back."""

    name: str
    argv: list[str]
    rc: int | None
    stdout: str
    stderr: str = ""
    seconds: float = 0.0
    prompts: list[Prompt] = field(default_factory=list)
    offers: list[str] = field(default_factory=list)

    @property
    def out(self) -> str:
        return self.stdout + ("\n" + self.stderr if self.stderr else "")

    @property
    def typed(self) -> str:
        return shlex.join(["runbook", *self.argv[1:]])

    def show(self, limit: int = 4000) -> str:
        """For assertion messages: what was typed and the end of what came back."""
        text = self.out
        if len(text) > limit:
            text = "…" + text[-limit:]
        return f"$ {self.typed}\n(exit {self.rc}, {self.seconds:.1f} s)\n{text}"


@dataclass
class Transcript:
    """Everything one scenario's engineer typed and saw, in order."""

    scenario: Scenario
    steps: dict[str, Step] = field(default_factory=dict)
    run_dir: str | None = None
    proposal: str | None = None
    #: the A/B's calls of all_reduce_perf on the node, after the approval (before verify)
    ab_calls: list[dict[str, Any]] = field(default_factory=list)
    #: names under the state dir once done: remedies/<…>, runs/<…>
    remedy_dirs: list[str] = field(default_factory=list)
    #: the queue at the end (`approvals list --state all --format json`)
    queue: list[dict[str, Any]] = field(default_factory=list)
    #: the second run's JSON document (`--no-input --format json`), if it parsed
    run_json: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)

    def step(self, name: str) -> Step:
        if name not in self.steps:
            raise AssertionError(
                f"{self.scenario.id}: no step {name!r} ran; "
                f"steps: {list(self.steps)}; errors: {self.errors}"
            )
        return self.steps[name]

    def proposal_state(self, pid: str | None = None) -> dict[str, Any] | None:
        pid = pid or self.proposal
        return next((p for p in self.queue if p.get("id") == pid), None)

    def everything(self) -> str:
        return "\n".join(
            f"### {s.name} (exit {s.rc}, {s.seconds:.1f} s)\n$ {s.typed}\n{s.out}"
            for s in self.steps.values()
        )


def clean(text: str) -> str:
    return _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


class Terminal:
    """The CLI on a pseudo-terminal (stdin a TTY: it prompts), 250 columns wide."""

    def __init__(self, env: dict[str, str], cwd: Path, timeout: float = STEP_TIMEOUT) -> None:
        self.env, self.cwd, self.timeout = env, cwd, timeout

    def session(self, name: str, args: list[str], answer: str) -> Step:
        """Run `runbook ARGS`; at each approval prompt of the A/B answer `answer` (approve,
        skip, deny or interrupt: ^C), any other proposal skip; decline the recovery check's
        offer. Approve where only deny/skip is offered becomes skip (recorded as offered)."""
        argv = [RUNBOOK, *args]
        started = time.monotonic()
        child = pexpect.spawn(argv[0], argv[1:], env=self.env, cwd=str(self.cwd),
                              encoding="utf-8", timeout=self.timeout, dimensions=(60, 250),
                              codec_errors="replace")  # fmt: skip
        seen: list[str] = []
        step = Step(name, argv, None, "")
        try:
            while True:
                index = child.expect([APPROVE_PROMPT, OFFER_PROMPT, REASON_PROMPT, pexpect.EOF])
                seen.append(child.before + (child.after if isinstance(child.after, str) else ""))
                if index == 3:
                    break
                if index == 1:
                    step.offers.append(
                        clean(child.before).splitlines()[-1:][0] if child.before else ""
                    )
                    child.sendline("n")
                    continue
                if index == 2:
                    child.sendline("not while the job is rescheduled")
                    continue
                shown = clean("".join(seen))
                heads = list(PROPOSAL_HEAD.finditer(shown))
                head = heads[-1] if heads else None
                offered = tuple(clean(child.match.group(1)).split(" / "))
                kind = head.group(2) if head else "?"
                wanted = answer if kind == "nccl-ib-disable-ab" else "skip"
                given = wanted if wanted in offered or wanted == "interrupt" else "skip"
                step.prompts.append(
                    Prompt(
                        head.group(1) if head else "?",
                        kind,
                        head.group(3) if head else "?",
                        offered,
                        given,
                        shown[head.start() :] if head else shown[-3000:],
                    )
                )
                if given == "interrupt":
                    # as a person does, a moment after the question: a SIGINT that lands while
                    # input() is only about to wait on the terminal is noted and then waited
                    # through (the read blocks until a key; seen 3 times in ~40 runs)
                    time.sleep(0.3)
                    child.sendintr()
                else:
                    child.sendline(given[0])
        except pexpect.TIMEOUT:
            seen.append(str(child.before))
            # what the command's session was doing when it was given up on (a hang, for the
            # report): every process of the terminal's session, its state and wait channel
            ps = subprocess.run(["ps", "-s", str(child.pid), "-o", "pid,ppid,stat,wchan:24,args"],
                                capture_output=True, text=True, check=False)  # fmt: skip
            step.stderr = f"(no answer within {self.timeout} s: killed)\n{ps.stdout}"
        finally:
            child.close(force=True)
        step.rc = (
            child.exitstatus
            if child.exitstatus is not None
            else (128 + child.signalstatus if child.signalstatus else None)
        )
        step.stdout = clean("".join(seen))
        step.seconds = time.monotonic() - started
        return step


def run_cli(
    name: str, args: list[str], env: dict[str, str], cwd: Path, timeout: float = STEP_TIMEOUT
) -> Step:
    """`runbook ARGS` with no terminal (stdin /dev/null), stdout and stderr kept apart."""
    argv = [RUNBOOK, *args]
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out = None, (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else ""
        err = f"(no answer within {timeout} s: killed)"
    return Step(name, argv, rc, clean(out), clean(err), time.monotonic() - started)


RESUME_HINT = re.compile(r"runbook resume (\S+)")
RUN_DIR_LINE = re.compile(r"^run directory: (\S+)", re.M)
VERIFY_HINT = re.compile(r"(?:check that the fix held(?:, on the live node)?|later): (runbook "
                         r"verify [^\n]+)")  # fmt: skip


def _queue(env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    step = run_cli("(queue)", ["approvals", "list", "--state", "all", "--format", "json"], env, cwd)
    try:
        data = json.loads(step.stdout)
    except json.JSONDecodeError:
        return []
    return data if isinstance(data, list) else []


def _ab(
    queue: list[dict[str, Any]], *, state: str | None = None, exclude: frozenset[str] = frozenset()
) -> str | None:
    for p in queue:
        if (
            p.get("kind") == "nccl-ib-disable-ab"
            and p.get("id") not in exclude
            and (state is None or p.get("state") == state)
        ):
            return str(p["id"])
    return None


def follow(
    scenario: Scenario,
    *,
    env: dict[str, str],
    workdir: Path,
    variables: dict[str, str],
    node_calls: Any,
) -> Transcript:
    """Type the scenario's incident (module docstring) and keep every answer."""
    t = Transcript(scenario)
    term = Terminal(env, workdir)
    var_args = [a for k, v in variables.items() for a in ("--var", f"{k}={v}")]
    if scenario.job:
        ref, via = scenario.job
        where = ["--job", ref, "--slurm-via", via]
    else:
        where = ["--target", scenario.target]
    run_args = ["run", "nccl-init-failure", *where, *scenario.extra, *var_args]

    def keep(step: Step) -> Step:
        t.steps[step.name] = step
        return step

    run = keep(term.session("run", run_args, "interrupt"))
    hint = RESUME_HINT.search(run.out) or RUN_DIR_LINE.search(run.out)
    t.run_dir = hint.group(1) if hint else None
    queue = _queue(env, workdir)
    t.proposal = _ab(queue)
    keep(run_cli("approvals list", ["approvals", "list"], env, workdir))
    if t.proposal is None:
        t.errors.append("the run queued no nccl-ib-disable-ab proposal")
    else:
        keep(run_cli("approvals show", ["approvals", "show", t.proposal], env, workdir))
        keep(run_cli("approvals preview", ["approvals", "preview", t.proposal], env, workdir))
    if t.run_dir:
        answer = "approve" if scenario.decide == "prompt" else "skip"
        keep(term.session("resume", ["resume", t.run_dir], answer))
    else:
        t.errors.append("the run printed no run directory")
    if t.proposal is not None:
        keep(run_cli("approvals approve", ["approvals", "approve", t.proposal], env, workdir))
        t.ab_calls = list(node_calls())
        printed = [m.group(1) for s in t.steps.values() for m in VERIFY_HINT.finditer(s.out)]
        if printed:
            args = shlex.split(printed[-1])[1:]
        else:
            args = ["verify", t.proposal]
        keep(run_cli("verify", args, env, workdir))
    if t.run_dir:
        keep(run_cli("report", ["report", t.run_dir], env, workdir))
    keep(run_cli("runs", ["runs"], env, workdir))
    again = keep(
        run_cli("run --format json", [*run_args, "--no-input", "--format", "json"], env, workdir)
    )
    try:
        t.run_json = json.loads(again.stdout)
    except json.JSONDecodeError:
        t.errors.append("`run --format json` printed no JSON document")
    second = _ab(_queue(env, workdir), state="pending", exclude=frozenset({t.proposal or ""}))
    if second:
        keep(
            run_cli(
                "approvals deny",
                ["approvals", "deny", second, "--reason", "not while the job is rescheduled"],
                env,
                workdir,
            )
        )
    keep(
        run_cli("approvals list --state all", ["approvals", "list", "--state", "all"], env, workdir)
    )
    t.queue = _queue(env, workdir)
    state = Path(env["RUNBOOK_STATE_DIR"])
    t.remedy_dirs = (
        sorted(p.name for p in (state / "remedies").glob("*"))
        if (state / "remedies").is_dir()
        else []
    )
    return t


# --------------------------------------------------------------------------------------------
# the commands the outputs tell the engineer to type

#: a command begins at `runbook ` and ends at the line's end or at what closes a quote, a code
#: span, a parenthesis, or starts a comment or a second command (` / approve ID`)
_COMMAND = re.compile(r"(?<![\w/.-])runbook ((?:[a-z][\w-]*)(?: [^\s`'\")#;|]+)*)")
#: what may come right before a command: nothing (a line of its own), a colon ("resume with:
#: runbook …"), a quote or code span, a parenthesis, a shell prompt, an arrow
_LEADS = frozenset(":`\"'(=$;,>→")
_SHORTHAND = re.compile(r" / ((?:approve|deny|show|preview) \S+)")
#: a flag named as advice with a placeholder for its value ("give --cgroup DIR", "(…; --var
#: pod=NAME)", "--target ssh://…"): the command that printed it must take it
_FLAG_HINT = re.compile(
    r"(?<![\w-])(--[a-z][\w-]*)[ =]([A-Z][A-Z_]*\b|[a-z_]+=[A-Z][A-Z_]*\b|ssh://\S*?…)"
)


@dataclass(frozen=True)
class Printed:
    """A command the tool told the engineer to type: where, and as argv after `runbook`."""

    scenario: str
    step: str
    line: str
    argv: tuple[str, ...]


def printed_commands(t: Transcript) -> list[Printed]:
    """Every command the transcript's outputs tell the engineer to type: lines and fragments
    starting `runbook …` (next steps, "resume with", "verify with", "queued: runbook approvals
    show ID / approve ID"), and each flag named as advice ("give --cgroup DIR", "collect next:
    …; --var pod=NAME") as the command that printed it would take it."""
    found: list[Printed] = []
    for step in t.steps.values():
        for line in step.out.splitlines():
            for match in _COMMAND.finditer(line):
                before = line[: match.start()].rstrip()
                if before and before[-1] not in _LEADS:
                    continue  # prose ("re-run the runbook for a fresh proposal")
                text = match.group(1).split(" / ")[0].rstrip(".,:;")
                try:
                    argv = tuple(shlex.split(text))
                except ValueError:
                    argv = tuple(text.split())
                found.append(Printed(t.scenario.id, step.name, line.strip(), argv))
                for short in _SHORTHAND.finditer(match.group(0)):
                    found.append(
                        Printed(
                            t.scenario.id,
                            step.name,
                            line.strip(),
                            (argv[0], *short.group(1).split()),
                        )
                    )
            base = _base_command(step)
            if "runbook " in line or line.lstrip().startswith("$ ") or base is None:
                continue  # a full command (above), or a probe's own command line
            for flag, value in _FLAG_HINT.findall(line):
                found.append(Printed(t.scenario.id, step.name, line.strip(), (*base, flag, value)))
    return found


def _base_command(step: Step) -> tuple[str, ...] | None:
    """The command (after `runbook`) whose advice a hint is: the step's own command, with its
    subcommand and positional arguments, and --target/--job as typed."""
    args = step.argv[1:]
    if not args:
        return None
    if args[0] in ("run", "resume", "report", "approvals"):
        # a walk's advice (also as `report` and `approvals show` repeat it) is for the next
        # walk: `run RUNBOOK --target T`
        return ("run", "nccl-init-failure", "--target", "ssh://NODE")
    if args[0] == "verify":
        return ("verify", "ID")
    return None


_PARSER = r"""
import json, sys
import click
from runbook.cli.app import cli

def parse(argv):
    ctx = cli.make_context("runbook", list(argv))
    cmd = cli
    while isinstance(cmd, click.Group):
        args = [*getattr(ctx, "_protected_args", []), *ctx.args]
        name, sub, rest = cmd.resolve_command(ctx, args)
        ctx = sub.make_context(name, rest, parent=ctx)
        cmd = sub
    return ctx.command_path

out = []
for line in sys.stdin:
    argv = json.loads(line)
    try:
        out.append({"ok": True, "command": parse(argv)})
    except click.exceptions.Exit as exc:
        out.append({"ok": exc.exit_code == 0, "error": f"exit {exc.exit_code}"})
    except click.ClickException as exc:
        out.append({"ok": False, "error": f"{type(exc).__name__}: {exc.format_message()}"})
    except Exception as exc:
        out.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
json.dump(out, sys.stdout)
"""


def parse_commands(argvs: list[tuple[str, ...]], env: dict[str, str]) -> list[dict[str, Any]]:
    """Each argv (after `runbook`) through the CLI's own click group, parsed and never run:
    ``{"ok": True, "command": "runbook approvals show"}`` or ``{"ok": False, "error": …}``."""
    proc = subprocess.run(
        [sys.executable, "-c", _PARSER],
        input="".join(json.dumps(list(a)) + "\n" for a in argvs),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"the parser did not run: {proc.stderr[-2000:]}")
    result: list[dict[str, Any]] = json.loads(proc.stdout)
    return result


# --------------------------------------------------------------------------------------------
# what no output may hold

LEAKS = (
    ("template text", re.compile(r"\{\{|\{%|\bundefined\b")),
    ("a traceback", re.compile(r"Traceback \(most recent call last\)|internal error")),
)


def leaks(text: str) -> list[str]:
    """Each line of `text` holding raw template text or a traceback, with what it holds."""
    found = []
    for line in text.splitlines():
        for what, pattern in LEAKS:
            if pattern.search(line):
                found.append(f"{what}: {line.strip()[:300]}")
    return found
