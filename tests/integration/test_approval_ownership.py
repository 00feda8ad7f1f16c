"""Round 3: root never uses a plan another user could have written, and the record says who
really acted. Through the real CLI, as root (as tests/run.sh runs the suite), with files left
the way a shared directory leaves them: a store in a 0777 directory, a 0666 store of `nobody`'s
in root's own directory, an audit log that is a symbolic link, and LOGNAME naming someone
else."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

from tests.integration.test_script_output import queued

NOBODY = pwd.getpwnam("nobody").pw_uid


def _queue(cli, where: Path) -> str:  # type: ignore[no-untyped-def]
    """The shm-exhausted incident replayed into a store in `where`; its first proposal's id."""
    db, _ = queued(cli, where)
    listed = cli("approvals", "list", "--db", str(db), "--format", "json")
    return str(listed.json()[0]["id"])


def test_a_store_in_a_directory_others_can_write_is_refused(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    shared = tmp_path / "shared"
    shared.mkdir()
    pid = _queue(cli, shared)
    shared.chmod(0o777)  # root's own, but anyone may replace the store in it
    db = str(shared / "approvals.db")
    for argv in (("approvals", "list", "--db", db), ("approvals", "show", pid, "--db", db),
                 ("approvals", "preview", pid, "--db", db),
                 ("approvals", "approve", pid, "--db", db)):  # fmt: skip
        result = cli(*argv)
        assert result.rc == 2, (argv, result.stdout, result.stderr)
        assert "is writable by others" in result.stderr and result.stderr.count("\n") == 1


def test_a_store_file_of_another_user_is_refused_even_in_roots_directory(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pid = _queue(cli, tmp_path)
    db = tmp_path / "approvals.db"
    os.chown(db, NOBODY, NOBODY)
    db.chmod(0o666)
    result = cli("approvals", "approve", pid, "--db", str(db))
    assert result.rc == 2 and f"is owned by uid {NOBODY}" in result.stderr


def test_an_audit_log_that_is_a_link_is_never_appended_through(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pid = _queue(cli, tmp_path)
    audit = tmp_path / "audit.jsonl"
    audit.unlink()
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("")
    audit.symlink_to(elsewhere)
    result = cli("approvals", "deny", pid, "--db", str(tmp_path / "approvals.db"),
                 "--reason", "freeze")  # fmt: skip
    assert result.rc == 2 and "symbolic link" in result.stderr
    assert elsewhere.read_text() == ""


def test_the_approver_is_the_os_user_not_logname(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pid = _queue(cli, tmp_path)
    db = str(tmp_path / "approvals.db")
    env = {"LOGNAME": "alice", "USER": "alice"}
    denied = cli("approvals", "deny", pid, "--db", db, "--reason", "freeze", extra_env=env)
    assert denied.rc == 0, denied.stderr
    shown = json.loads(cli("approvals", "show", pid, "--db", db, "--format", "json").stdout)
    me = pwd.getpwuid(os.getuid()).pw_name
    assert shown["decided_by"] == me != "alice"
    trail = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert trail[-1]["event"] == "denied" and trail[-1]["actor"] == me
