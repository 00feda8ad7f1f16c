"""One queue for several machines, through the real CLI against the private PostgreSQL server
(tests/pg): a replayed shm-exhausted incident queues a shm-size-limit proposal into a
`postgresql://` store; approvers started at once each with a connection of their own (as
laptops and sweep shards are) run its real playbook exactly once; the audit chain, kept in the
database, verifies after them; the two-person rule holds from the command line; a password in
the URL is never printed or written. No Kubernetes API is involved (the patch goes to a file).
"""

from __future__ import annotations

import getpass
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import CliResult, cli_env
from tests.integration.test_approvals import JOB, make_checkout, size_limit
from tests.pg.server import PASSWORD, PASSWORD_ROLE, PgServer
from tests.tools import bundles

pytestmark = pytest.mark.ansible

BUNDLE = bundles.path("shm-exhausted")


@pytest.fixture
def cli(tmp_path: Path, pg_url: str):  # type: ignore[no-untyped-def]
    """`cli(...)`: `python -m runbook ...` with its state under tmp_path and RUNBOOK_DB the
    shared store (a test's own database on the private server)."""
    env = {**cli_env(tmp_path), "RUNBOOK_DB": pg_url}

    def run(*args: str, timeout: float = 120, extra_env: dict[str, str] | None = None) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "runbook", *args], capture_output=True, text=True,
            env={**env, **(extra_env or {})}, timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    run.env = env  # type: ignore[attr-defined]
    return run


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A Git checkout holding the workload's manifest (as tests/integration/test_approvals.py)."""
    return make_checkout(tmp_path)


def queue(cli: Any, checkout: Path, **kw: Any) -> str:
    result = cli("run", "nccl-init-failure", "--target", f"replay://{BUNDLE}", "--no-input",
                 "--var", f"manifest={checkout / 'job.yaml'}", **kw)  # fmt: skip
    assert result.rc == 0, result.stderr
    listed = cli("approvals", "list", "--format", "json", **kw)
    assert listed.rc == 0, listed.stderr
    items = [p for p in json.loads(listed.stdout) if p["kind"] == "shm-size-limit"]
    assert len(items) == 1 and items[0]["state"] == "pending", listed.stdout
    return str(items[0]["id"])


def events(cli: Any, pid: str) -> list[str]:
    shown = cli("audit", "show", "--proposal", pid, "--format", "json")
    assert shown.rc == 0, shown.stderr
    return [json.loads(line)["event"] for line in shown.stdout.splitlines()]


def _desk_approver(env: dict[str, str], url: str, pid: str, name: str, results: Any) -> None:
    """What the web desk runs for a signed-in person (runbook/desk/runs.py): Desk.approve with
    that person as the approver, in a process (and a database connection) of its own."""
    os.environ.clear()
    os.environ.update(env)
    from runbook.config import load
    from runbook.errors import RunbookError
    from runbook.remedies.approval import Desk

    time.sleep(0.5)  # about when the command-line approvers have started
    try:
        with Desk(load(None, db=url)) as desk:
            done = desk.approve(pid, as_user=name, identity=name, recheck=False)
        results.put((0 if done.ok else 1, "", done.reason or ""))
    except RunbookError as exc:
        results.put((exc.exit_code, "", exc.one_line()))


def test_approvers_at_once_on_the_desk_and_the_command_line_run_the_playbook_exactly_once(
    cli: Any, checkout: Path, tmp_path: Path, pg_url: str
) -> None:
    """Two `runbook approvals approve` processes and two desk approvals (each its own process
    and connection, as on four machines) on one postgresql:// queue at once: one runs it."""
    pid = queue(cli, checkout)
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    desks = [
        ctx.Process(target=_desk_approver, args=(cli.env, pg_url, pid, who, results))
        for who in ("carol@example.org", "dave@example.org")
    ]
    for desk in desks:
        desk.start()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "runbook", "approvals", "approve", pid, "--as", who],
            env=cli.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        for who in ("alice", "bob")
    ]
    try:
        streams = [p.communicate(timeout=240) for p in procs]
        outcomes = [(p.returncode, out, err) for p, (out, err) in zip(procs, streams, strict=True)]
        outcomes += [results.get(timeout=240) for _ in desks]
    finally:
        for desk in desks:
            desk.join(30)
            if desk.is_alive():
                desk.kill()
    assert sorted(rc for rc, _, _ in outcomes) == [0, 1, 1, 1], outcomes
    for rc, _, err in outcomes:
        if rc == 1:
            assert "already being executed" in err or "never run twice" in err, err
    seen = events(cli, pid)
    assert seen.count("approved") == 1 and seen.count("executed") == 1, seen
    applies = list((tmp_path / "state" / "remedies").glob("*/ansible-apply-*"))
    assert len(applies) == 1, applies
    assert size_limit(checkout / "job.yaml") == "80Gi"
    verified = cli("audit", "verify")
    assert verified.rc == 0, verified.stderr
    assert "(audit_entries)" in verified.stdout and "chain intact" in verified.stdout
    assert not (tmp_path / "state" / "audit.jsonl").exists()  # the chain is the database's


def test_the_two_person_rule_holds_from_the_command_line(
    cli: Any, checkout: Path, tmp_path: Path
) -> None:
    """A kind the config names (here the shm patch, so that a real playbook runs) waits for a
    second person: the one who queued it approving is recorded and refused (exit 1), an
    unvouched `--as` is still that person, and a name the config vouches for runs it once."""
    me = getpass.getuser()
    open_config = tmp_path / "open.yaml"
    open_config.write_text("two_person:\n  kinds: [shm-size-limit]\n")
    vouched = tmp_path / "vouched.yaml"
    vouched.write_text(
        f"two_person:\n  kinds: [shm-size-limit]\napprovers: [{me}, alice]\n"
        f"delegation: {{{me}: [alice]}}\n"
    )
    pid = queue(cli, checkout, extra_env={"RUNBOOK_CONFIG": str(open_config)})
    shown = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
    assert shown["requested_by"] == me
    first = cli("approvals", "approve", pid, extra_env={"RUNBOOK_CONFIG": str(open_config)})
    assert first.rc == 1, first.stderr
    assert f"needs a second person: you queued it; {me}'s approval is recorded" in first.stderr
    assert len(first.stderr.strip().splitlines()) == 1 and "Traceback" not in first.stderr
    label = cli("approvals", "approve", pid, "--as", "bob",
                extra_env={"RUNBOOK_CONFIG": str(open_config)})  # fmt: skip
    assert label.rc == 1 and "you queued it" in label.stderr, label.stderr
    waiting = cli("approvals", "show", pid, extra_env={"RUNBOOK_CONFIG": str(open_config)})
    assert f"approved so far by {me}: waiting for another person's approval" in waiting.stdout
    assert (checkout / "job.yaml").read_text() == JOB  # nothing ran
    second = cli("approvals", "approve", pid, "--as", "alice",
                 extra_env={"RUNBOOK_CONFIG": str(vouched)})  # fmt: skip
    assert second.rc == 0, second.stdout + second.stderr
    assert size_limit(checkout / "job.yaml") == "80Gi"
    done = json.loads(cli("approvals", "show", pid, "--format", "json").stdout)
    assert done["state"] == "succeeded" and done["approvals"] == [me, "alice"]
    seen = events(cli, pid)
    assert seen.count("approval-recorded") == 3 and seen.count("executed") == 1, seen


def _files_holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_password_in_the_url_is_never_printed_or_written(
    cli: Any, checkout: Path, tmp_path: Path, pg_server: PgServer
) -> None:
    name = pg_server.new_database()
    with_password = pg_server.url(name, user=PASSWORD_ROLE, password=PASSWORD)
    env = {"RUNBOOK_DB": with_password}
    ran = cli("run", "nccl-init-failure", "--target", f"replay://{BUNDLE}", "--no-input",
              "--var", f"manifest={checkout / 'job.yaml'}", extra_env=env)  # fmt: skip
    assert ran.rc == 0, ran.stderr
    listed = cli("approvals", "list", extra_env=env)
    verified = cli("audit", "verify", "--format", "json", extra_env=env)
    assert listed.rc == 0 and verified.rc == 0, listed.stderr + verified.stderr
    assert json.loads(verified.stdout)["log"].startswith(
        f"postgresql://{PASSWORD_ROLE}:<REDACTED>@"
    )
    # the commands the run printed name the store without a password (PGPASSWORD gives it)
    assert f"--db postgresql://{PASSWORD_ROLE}@127.0.0.1:{pg_server.port}/{name}" in ran.stdout
    wrong = with_password.replace(PASSWORD, "not-" + PASSWORD[::-1])
    refused = cli("approvals", "list", extra_env={"RUNBOOK_DB": wrong})
    assert refused.rc == 3, refused.stderr  # refused the login: as an unreachable target
    assert "password authentication failed" in refused.stderr
    assert f"{PASSWORD_ROLE}:<REDACTED>@" in refused.stderr
    outputs = [ran, listed, verified, refused]
    for out in outputs:
        assert PASSWORD not in out.stdout + out.stderr and PASSWORD[::-1] not in out.stderr
    assert _files_holding(tmp_path, PASSWORD) == []  # run.json keeps the URL without it
    run_json = next((tmp_path / "state").rglob("run.json"), None) or next(
        tmp_path.rglob("run.json")
    )
    recorded = json.loads(run_json.read_text())["db"]
    assert recorded == f"postgresql://{PASSWORD_ROLE}@127.0.0.1:{pg_server.port}/{name}"
    # the password from the environment instead: the URL as recorded works as it is
    again = cli("approvals", "list", extra_env={"RUNBOOK_DB": recorded, "PGPASSWORD": PASSWORD})
    assert again.rc == 0, again.stderr


def test_a_store_server_that_is_down_is_one_line_and_exit_3(cli: Any, tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    url = f"postgresql://runbook:pw-{port}@127.0.0.1:{port}/queue"
    for args in (("approvals", "list"), ("approvals", "approve", "p00000000"),
                 ("audit", "verify")):  # fmt: skip
        down = cli(*args, extra_env={"RUNBOOK_DB": url})
        assert down.rc == 3, (args, down.stderr)
        lines = down.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in down.stderr, down.stderr
        assert re.search(r"postgresql://runbook:<REDACTED>@127\.0\.0\.1:\d+/queue", lines[0])
        assert f"pw-{port}" not in down.stderr
