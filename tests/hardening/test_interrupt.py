"""The tool itself interrupted loses nothing: a guided run stopped by SIGINT, SIGTERM or SIGKILL
in the middle of a stage, between two stages or at an approval prompt leaves a consistent run
directory, and `runbook resume` carries it to the verdict an uninterrupted run gives; a sweep
killed after some hosts finished is re-run with --resume and contacts only the others.

Everything is real: the CLI as a subprocess (signals sent to its pid once a known point is
reached: a probe running on the host, an event line, a progress line, the prompt on a real
pseudo-terminal), OpenSSH test hosts in network namespaces (tests/hosts/), the approval
store, Ansible's check mode and the real playbook run. The walk is runbooks/slow-walk.yaml:
its middle stage's `slow-probe` holds on the host while a hold file exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pexpect
import pytest

from runbook.conductor import Conductor
from runbook.executor import execute
from runbook.rundir import RunDirectory
from runbook.spec import load_file, resolve
from runbook.transports.replay import ReplayTransport
from tests.hardening.runs import RUNBOOKS, Background, Finished, check_run_dir, run_now, until
from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.integration.conftest import cli_env
from tests.integration.test_approvals import checkout  # noqa: F401
from tests.sweep import fleet
from tests.tools import bundles

pytestmark = [pytest.mark.live]

SLOW_WALK = RUNBOOKS / "slow-walk.yaml"
#: the middle stage's probe: says it started, then holds while its hold file exists
SLOW_PROBE = """#!/bin/sh
# test shim: a probe that is still running when the signal comes
: > "$1.started"
while [ -e "$1" ]; do sleep 0.05; done
echo slow done
"""
QUICK_PROBE = "#!/bin/sh\n# test shim: the same probe, never held\necho slow done\n"
STAGES = ["first", "slow", "last"]


def comparable(value: Any) -> Any:
    """A verdict without what differs between two runs of the same walk: the durations, and
    the run directory `--format json` names."""
    if isinstance(value, dict):
        return {
            k: comparable(v)
            for k, v in value.items()
            if k not in ("duration", "duration_s", "run_dir")
        }
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def lines_of(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines file that must be whole: every line complete and valid."""
    raw = path.read_text()
    assert raw.endswith("\n"), f"{path} ends in half a line: {raw[-200:]!r}"
    return [json.loads(line) for line in raw.splitlines()]


def check_finished(run_dir: Path) -> dict[str, Any]:
    """A run directory once the walk is complete, however often it was interrupted: every JSON
    file valid, no temporary, events whole from run-started to run-done, state.json agreeing
    with the verdict on every stage walked. Returns the verdict."""
    left = [p.name for p in run_dir.rglob(".*")]
    assert not left, f"temporaries left: {left}"
    for path in run_dir.rglob("*.json"):
        json.loads(path.read_text())
    events = lines_of(run_dir / "events.jsonl")
    assert events[0]["event"] == "run-started" and events[-1]["event"] == "run-done"
    verdict: dict[str, Any] = json.loads((run_dir / "verdict.json").read_text())
    assert events[-1]["root_cause"] == verdict["root_cause"]
    state = json.loads((run_dir / "state.json").read_text())
    assert state["current"] is None
    walked = {s["id"]: s["status"] for s in verdict["stages"] if s["status"] != "skipped"}
    # a stage its `when` left out (dcgm-diag without --var dcgm_diag=true) is on the path,
    # recorded as skipped, as the verdict lists it
    taken = {k: state["records"][k]["status"] for k in state["path"]}
    assert {k: v for k, v in taken.items() if v != "skipped"} == walked
    assert (run_dir / "bundle" / "bundle.yaml").is_file()
    return verdict


def check_interrupted(run_dir: Path, walked: list[str]) -> None:
    """What an interrupted walk must leave: every JSON file valid, no temporary of an atomic
    write, events in whole lines (started, not done), state.json the last completed stage (and
    every stage the events name in it), no verdict yet, the run's record of how to resume."""
    left = [p.name for p in run_dir.rglob(".*")]
    assert not left, f"temporaries left: {left}"
    for path in run_dir.rglob("*.json"):
        json.loads(path.read_text())
    events = lines_of(run_dir / "events.jsonl")
    assert events[0]["event"] == "run-started"
    assert all(e["event"] != "run-done" for e in events)
    state = json.loads((run_dir / "state.json").read_text())
    assert state["path"] == walked, state["path"]
    assert state["current"] == STAGES[len(walked)]
    logged = [e["stage"] for e in events if e["event"] == "stage"]
    assert logged == walked[: len(logged)] and len(logged) >= len(walked) - 1, logged
    assert not (run_dir / "verdict.json").exists()
    for name in ("first.txt", "first.txt.rc"):
        assert (run_dir / "bundle" / name).is_file()


# --------------------------------------------------------------------------------------------
# a guided run over SSH


@dataclass
class Node:
    host: TestHost
    args: list[str]
    hold: Path
    baseline: dict[str, Any]
    key: Path


@pytest.fixture(scope="module")
def node(host_network: HostNetwork, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One test host dressed with the slow probe, and the verdict of an uninterrupted walk."""
    work = tmp_path_factory.mktemp("interrupt-node")
    factory = HostFactory(host_network)
    try:
        host = factory("intr-node")
        host.write_shim("slow-probe", SLOW_PROBE)
        hold = work / "hold"
        key = host_network.client_key.private_path
        args = [
            "run", str(SLOW_WALK),
            "--target", f"ssh://root@{host.address}:{host.port}",
            "--known-hosts", str(host_network.known_hosts_path),
            "--identity", str(key),
            "--connect-timeout", "5",
            "--var", f"hold={hold}", "--var", "level=high",
            "--no-input",
        ]  # fmt: skip
        run_dir = work / "baseline"
        done = run_now([*args, "--run-dir", str(run_dir)], cli_env(work), work / "cli")
        assert done.rc == 0, done.stderr
        baseline = check_run_dir(run_dir)
        assert baseline["root_cause"] == "host-memory-oom"
        assert [s["status"] for s in baseline["stages"]] == ["ok", "ok", "anomaly"]
        yield Node(host, args, hold, baseline, Path(key))
    finally:
        factory.remove_all()


@pytest.mark.ssh
@pytest.mark.parametrize(
    ("signum", "point"),
    [
        (signal.SIGINT, "mid-stage"),
        (signal.SIGTERM, "between-stages"),
        (signal.SIGKILL, "mid-stage"),
    ],
    ids=["sigint-mid-stage", "sigterm-between-stages", "sigkill-mid-stage"],
)
def test_an_interrupted_walk_stays_consistent_and_resumes_to_the_uninterrupted_verdict(
    node: Node, tmp_path: Path, signum: int, point: str
) -> None:
    env = cli_env(tmp_path)
    run_dir = tmp_path / "run"
    started = Path(f"{node.hold}.started")
    node.hold.write_text("")
    started.unlink(missing_ok=True)
    run = Background([*node.args, "--run-dir", str(run_dir)], env, tmp_path / "cli")
    try:
        if point == "mid-stage":
            run.wait_for(started)  # the slow probe is running on the host (sent ahead)
            until(  # and the walk has reached its stage
                lambda: b'"event": "stage", "stage": "first"' in _read(run_dir / "events.jsonl"),
                30,
                "the first stage's event",
            )
        else:
            # the first stage's event is written after its state.json: the boundary
            until(
                lambda: b'"event": "stage", "stage": "first"' in _read(run_dir / "events.jsonl"),
                30,
                "the first stage's event",
            )
        signalled = time.monotonic()
        os.kill(run.proc.pid, signum)
        done = run.finish(30)
        stopped_in = time.monotonic() - signalled
    finally:
        run.kill()
        node.hold.unlink(missing_ok=True)
    if signum == signal.SIGKILL:
        assert done.rc == -signal.SIGKILL
    else:
        assert done.rc == 128 + signum, done.stderr
        # one clean line, no traceback, saying how to carry on
        assert "Traceback" not in done.stderr, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        expected = "interrupted" if signum == signal.SIGINT else "interrupted (SIGTERM)"
        assert last == f"runbook: {expected}; resume with: runbook resume {run_dir}", last
        assert stopped_in < 10, stopped_in  # the probe in flight (60 s) did not hold it
    check_interrupted(run_dir, ["first"])
    record = json.loads((run_dir / "run.json").read_text())
    assert record["runbook"]["sha256"] == hashlib.sha256(SLOW_WALK.read_bytes()).hexdigest()
    assert record["variables"] == {"hold": str(node.hold), "level": "high"}
    # the key's path, never its contents
    assert record["target"]["identities"] == [str(node.key.resolve())]
    assert node.key.read_text().strip().splitlines()[1] not in (run_dir / "run.json").read_text()

    resumed = run_now(["resume", str(run_dir), "--format", "json"], env, tmp_path / "resume")
    assert resumed.rc == 0, resumed.stderr
    verdict = check_run_dir(run_dir)
    assert comparable(verdict) == comparable(node.baseline)
    assert comparable(resumed.json()) == comparable(node.baseline)
    events = lines_of(run_dir / "events.jsonl")
    (again,) = [e for e in events if e["event"] == "run-resumed"]
    assert again["walked"] == ["first"] and again["at"] == "slow"
    # the interrupted stage was walked once more, the completed one not again
    assert [e["stage"] for e in events if e["event"] == "stage"].count("first") == 1
    assert json.loads((run_dir / "approvals.json").read_text())["done"] is True

    if signum == signal.SIGINT:
        finished = run_now(["resume", str(run_dir)], env, tmp_path / "again")
        assert finished.rc == 0, finished.stderr
        assert finished.stdout.startswith(f"nothing to do: {run_dir} finished"), finished.stdout
        assert lines_of(run_dir / "events.jsonl") == events  # nothing written


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def test_resume_clears_what_a_sigkill_mid_write_leaves_and_refuses_a_changed_runbook(
    tmp_path: Path,
) -> None:
    env = cli_env(tmp_path)
    runbook = tmp_path / "walk.yaml"
    shutil.copyfile(RUNBOOKS.parent.parent / "integration" / "runbooks" / "hostname.yaml", runbook)
    run_dir = tmp_path / "run"
    args = ["run", str(runbook), "--target", "local", "--run-dir", str(run_dir), "--no-input"]
    assert run_now(args, env, tmp_path / "cli").rc == 0
    whole = json.loads((run_dir / "verdict.json").read_text())

    def killed_before_the_verdict() -> None:
        for name in ("verdict.json", "approvals.json"):
            (run_dir / name).unlink()
        state = json.loads((run_dir / "state.json").read_text())
        state.update(path=[], current="read", records={})
        (run_dir / "state.json").write_text(json.dumps(state))

    # a SIGKILL inside a long append and inside an atomic write (both kernel-possible)
    killed_before_the_verdict()
    holder = RunDirectory(run_dir, exclusive=True)  # the run, still going in another process
    try:
        done = run_now(["resume", str(run_dir)], env, tmp_path / "in-use")
    finally:
        holder.close()
    assert done.rc == 2
    assert _one_line(done) == (
        f"runbook: {run_dir} is in use by another runbook process (a run or a resume of it)"
    )
    with (run_dir / "events.jsonl").open("a") as log:
        log.write('{"time": "2026-01-01T00:00:00+00:00", "event": "pro')
    (run_dir / ".state.json.ab12cd_9").write_text('{"runbook": "hostn')
    done = run_now(["resume", str(run_dir), "--format", "json"], env, tmp_path / "repair")
    assert done.rc == 0, done.stderr
    assert "dropped a partial last line of events.jsonl" in done.stderr
    assert "removed the temporary .state.json.ab12cd_9" in done.stderr
    assert comparable(check_finished(run_dir)) == comparable(whole)

    killed_before_the_verdict()
    runbook.write_text(runbook.read_text().replace("read /etc/hostname", "read it"))
    done = run_now(["resume", str(run_dir)], env, tmp_path / "changed")
    assert done.rc == 2
    line = _one_line(done)
    assert f"runbook {runbook} ({runbook}) changed since the run started" in line, line
    assert not (run_dir / "verdict.json").exists()

    done = run_now(["resume", str(tmp_path)], env, tmp_path / "not-a-run")
    assert done.rc == 2
    assert (
        _one_line(done)
        == f"runbook: {tmp_path}: not a run directory (no run.json); it cannot be resumed"
    )


def test_a_saved_state_that_does_not_fit_the_runbook_is_refused() -> None:
    from runbook.errors import StateError

    runbook = load_file(SLOW_WALK)
    state = Conductor(runbook, {"hold": "/h", "level": "high"}).to_state()
    assert Conductor.from_state(runbook, json.loads(json.dumps(state))).to_state() == state
    for broken, why in [
        ({**state, "runbook": "other"}, "state is of runbook 'other', not 'slow-walk'"),
        ({**state, "path": ["first", "gone"]}, "lacks: ['gone']"),
        ({**state, "current": "gone"}, "lacks: ['gone']"),
        ({**state, "records": {"first": {"title": "no id"}}}, "malformed stage record"),
    ]:
        with pytest.raises(StateError, match=re.escape(why)):
            Conductor.from_state(runbook, broken)


def _one_line(done: Finished) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


# --------------------------------------------------------------------------------------------
# exactly between two stages, at every boundary of the shipped runbook


class _StopAfter:
    """Observer that raises KeyboardInterrupt (a ^C) once `n` stages are done: the signal
    landing exactly between two stages, after state.json was written."""

    def __init__(self, n: int) -> None:
        self.n = n

    def stage_started(self, *args: Any) -> None:
        pass

    def probe_done(self, *args: Any) -> None:
        pass

    def stage_done(self, *args: Any) -> None:
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt

    def run_done(self, *args: Any) -> None:
        pass


def _walk(bundle: Path, run_dir: Path | None, **kw: Any) -> dict[str, Any]:
    from runbook.session import replay_context

    runbook = load_file(resolve("nccl-init-failure"))
    transport = ReplayTransport(bundle)
    directory = RunDirectory(run_dir) if run_dir else None
    try:
        node, variables, context = replay_context(transport, {})
        if "resume" in kw:
            kw["resume"] = Conductor.from_state(runbook, kw["resume"])
        return execute(
            runbook, transport, variables=variables, context=context, node=node,
            run_dir=directory, **kw,
        ).verdict.to_json()
    finally:
        transport.close()
        if directory:
            directory.close()


@pytest.mark.parametrize("bundle", ["article-incident", "gpu-hardware-xid79", "healthy"])
def test_interrupted_between_any_two_stages_the_saved_state_resumes_to_the_same_verdict(
    tmp_path: Path, bundle: str
) -> None:
    path = bundles.path(bundle)
    whole = comparable(_walk(path, None))
    stages = len(whole["stages"])
    for done in range(1, stages):
        run_dir = tmp_path / f"after-{done}"
        with pytest.raises(KeyboardInterrupt):
            _walk(path, run_dir, observer=_StopAfter(done))
        state = json.loads((run_dir / "state.json").read_text())  # through JSON, as on disk
        assert len(state["path"]) == done
        resumed = _walk(path, run_dir, resume=state)
        assert comparable(resumed) == whole, f"{bundle}: resumed after {done} stages"
        assert comparable(check_finished(run_dir)) == whole
        events = [e["event"] for e in lines_of(run_dir / "events.jsonl")]
        assert events.count("run-resumed") == 1


# --------------------------------------------------------------------------------------------
# at the approval prompt


def _spawn(args: list[str], env: dict[str, str]) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-m", "runbook", *args],
        env={**env, "TERM": "dumb"},
        encoding="utf-8",
        timeout=120,
        dimensions=(60, 200),
    )


def _proposals(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    done = run_now(["approvals", "list", "--state", "all", "--format", "json"], env,
                   Path(env["RUNBOOK_STATE_DIR"]).parent / "list")  # fmt: skip
    assert done.rc == 0, done.stderr
    return {p["kind"]: p for p in done.json()}


@pytest.mark.ansible
def test_interrupted_at_an_approval_prompt_the_resume_asks_only_what_was_not_answered(
    tmp_path: Path,
    checkout: Path,  # noqa: F811
) -> None:
    env = cli_env(tmp_path)
    run_dir = tmp_path / "run"
    manifest = checkout / "job.yaml"
    before = manifest.read_text()
    child = _spawn(
        ["run", "nccl-init-failure", "--target", f"replay://{bundles.path('article-incident')}",
         "--var", f"manifest={manifest}", "--as", "oncall", "--run-dir", str(run_dir)],
        env,
    )  # fmt: skip
    try:
        child.expect("shm-size-limit on gpu-node-07")
        child.expect("approve / deny / skip")
        child.sendline("deny")
        child.expect("reason")
        child.sendline("change freeze")
        child.expect("denied")
        child.expect("memory-limit on gpu-node-07")
        child.expect("approve / deny / skip")
        ledger = json.loads((run_dir / "approvals.json").read_text())
        shm, memory = ledger["queued"][:2]
        # saved before the wait: what was decided, and what is being asked
        assert ledger["decisions"] == {shm: "denied"} and ledger["waiting"] == memory
        child.sendintr()  # ^C on the terminal
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 130, child.before
    assert f"runbook: interrupted; resume with: runbook resume {run_dir}" in child.before
    assert "Traceback" not in child.before
    verdict = check_finished(run_dir)  # the walk was complete: its directory is whole
    assert json.loads((run_dir / "approvals.json").read_text())["done"] is False
    assert json.loads((run_dir / "state.json").read_text())["current"] is None
    assert manifest.read_text() == before

    child = _spawn(["resume", str(run_dir)], env)
    try:
        child.expect(r"the\s+walk\s+had\s+finished")
        child.expect(r"proposal 1/\d")
        child.expect("memory-limit on gpu-node-07")
        child.expect(r"\+\s+memory: 768Gi")
        child.expect("approve / deny / skip")
        child.sendline("a")
        child.expect("succeeded")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    assert "shm-size-limit on" not in child.before  # decided: not asked again
    proposals = _proposals(env)
    assert proposals["shm-size-limit"]["state"] == "denied"
    assert proposals["shm-size-limit"]["reason"] == "change freeze"
    assert proposals["memory-limit"]["state"] == "succeeded"
    assert proposals["memory-limit"]["decided_by"].endswith(" as oncall")
    assert "memory: 768Gi" in manifest.read_text() and "sizeLimit" not in manifest.read_text()
    ledger = json.loads((run_dir / "approvals.json").read_text())
    assert ledger["done"] is True and ledger["decisions"][memory] == "succeeded"
    assert check_finished(run_dir) == verdict


# --------------------------------------------------------------------------------------------
# a sweep killed after some hosts finished

FAST, SLOW = 4, 6


@pytest.mark.ssh
def test_a_killed_sweep_resumes_contacting_only_the_hosts_it_had_not_finished(
    host_network: HostNetwork, ssh_host: HostFactory, tmp_path: Path
) -> None:
    names = [f"intr-s{i:02d}" for i in range(FAST + SLOW)]
    made = ssh_host.many(names)
    kinds = {h.name: "fast" if i < FAST else "slow" for i, h in enumerate(made)}
    hold = tmp_path / "hold"
    hold.write_text("")
    for host in made:
        host.write_shim("slow-probe", QUICK_PROBE if kinds[host.name] == "fast" else SLOW_PROBE)
    hosts = {h.name: (h, kinds[h.name]) for h in made}
    inventory = fleet.write_inventory(
        tmp_path / "inventory.yml",
        fleet.inventory(host_network, hosts, host_network.known_hosts_path),
    )
    env = cli_env(tmp_path)
    report = tmp_path / "report"
    args = ["sweep", str(SLOW_WALK), "-i", str(inventory), "--forks", str(FAST + SLOW)]
    args += ["--report", str(report), "--var", f"hold={hold}", "--var", "level=high"]
    args += ["--format", "json"]
    progress = report / "progress.jsonl"
    sweep = Background(args, env, tmp_path / "first")
    try:
        until(lambda: _read(progress).count(b'"event": "host"') >= FAST, 60, "the fast hosts")
        time.sleep(0.1)  # nothing else would finish: the others hold
        os.kill(sweep.proc.pid, signal.SIGKILL)
        assert sweep.finish(10).rc == -signal.SIGKILL
    finally:
        sweep.kill()
        hold.unlink(missing_ok=True)
    lines = lines_of(progress)  # whole lines
    assert lines[0]["event"] == "sweep" and lines[0]["total"] == FAST + SLOW
    finished = sorted(line["host"] for line in lines[1:])
    assert finished == sorted(n for n, k in kinds.items() if k == "fast")
    assert all(line["event"] == "host" for line in lines[1:])  # not finished
    assert not (report / "sweep.json").exists()
    logins = {name: _logins(host) for name, (host, _) in hosts.items()}
    assert all(n == 1 for n in logins.values()), logins  # every host was reached once

    for host in made:
        host.write_shim("slow-probe", QUICK_PROBE)
    again = run_now([*args, "--resume"], env, tmp_path / "again", timeout=90)
    assert again.rc == 1, again.stderr  # findings on every host
    assert (
        f"an earlier sweep of this inventory was interrupted after {FAST} of {FAST + SLOW} "
        "hosts" in again.stderr
    ), again.stderr
    assert f"hosts; finished: {', '.join(finished)} (it started" in again.stderr
    data = again.json()
    assert sorted(h["host"] for h in data["hosts"]) == sorted(names)  # each host once
    for host in data["hosts"]:
        assert host["status"] == "finding" and host["root_cause"] == "host-memory-oom", host
        assert host.get("reused", False) == (kinds[host["host"]] == "fast"), host
    assert data["resumed_from"] == lines[0]["started_at"]
    assert json.loads((report / "sweep.json").read_text()) == data
    markdown = (report / "sweep.md").read_text()
    assert f"Resumed: the results of {FAST} hosts" in markdown and ", ".join(finished) in markdown
    junit = (report / "junit.xml").read_text()
    assert all(junit.count(f'name="{n}"') == 1 for n in names), junit
    time.sleep(0.2)  # sshd logs the login as it accepts
    for name, (host, kind) in hosts.items():
        # the finished hosts were not contacted again; each of the others once more
        assert _logins(host) == logins[name] + (kind == "slow"), (name, _logins(host))
    after = lines_of(progress)
    assert after[-1]["event"] == "finished"
    assert sorted(line["host"] for line in after if line["event"] == "host") == sorted(names)
    assert sum(bool(line.get("result", {}).get("reused")) for line in after) == FAST


def test_without_resume_a_sweep_starts_over_and_keeps_the_interrupted_progress_aside(
    tmp_path: Path,
) -> None:
    inventory = tmp_path / "inventory.yml"
    names = ["local-a", "local-b"]
    hosts = {name: {"ansible_connection": "local"} for name in names}
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    runbook = str(RUNBOOKS.parent.parent / "integration" / "runbooks" / "hostname.yaml")
    report = tmp_path / "report"
    report.mkdir()
    earlier = [
        {"event": "sweep", "format": 1, "key": f"inventory {inventory.resolve()}",
         "runbook": runbook, "total": 2, "started_at": "2026-01-01T00:00:00+00:00"},
        {"event": "host", "host": "local-a",
         "result": {"host": "local-a", "target": "local", "status": "error", "error": "x"}},
    ]  # fmt: skip
    text = "".join(json.dumps(line) + "\n" for line in earlier)
    (report / "progress.jsonl").write_text(text + '{"event": "host", "ho')  # cut by a kill
    env = cli_env(tmp_path)
    done = run_now(["sweep", runbook, "-i", str(inventory), "--report", str(report)], env,
                   tmp_path / "cli")  # fmt: skip
    assert done.rc == 0, done.stderr
    assert (
        "an earlier sweep of this inventory was interrupted after 1 of 2 hosts; "
        "finished: local-a (it started 2026-01-01T00:00:00+00:00)"
    ) in done.stderr, done.stderr
    kept = report / "progress.interrupted-20260101T000000.jsonl"
    assert f"starting over (its progress is kept as {kept};" in done.stderr
    assert kept.read_text().startswith(text)  # moved, not deleted
    data = json.loads((report / "sweep.json").read_text())
    assert [(h["host"], h["status"], "reused" in h) for h in data["hosts"]] == [
        ("local-a", "healthy", False),
        ("local-b", "healthy", False),
    ]
    lines = lines_of(report / "progress.jsonl")
    assert [line["event"] for line in lines] == ["sweep", "host", "host", "finished"]


def _logins(host: TestHost) -> int:
    return host.sshd_log_tail(10000).count("Accepted publickey for root")
