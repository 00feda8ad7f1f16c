"""A full disk where runbook writes: one clear line, nothing half-written, the store and the
audit trail intact.

The disks are real: small tmpfs mounts in a private mount namespace held by a sleeping process
(the machine's mount table never sees them; they vanish with it, whatever happens to the
test), filled to the last byte. The CLI runs inside that namespace (`nsenter --mount`); the
test reads the files through `/proc/PID/root`. Each case fails a write for want of space: a
run's directory, the approval store, the audit log (on its own full disk, the store's having
room), a collected bundle, a sweep's reports. Each must say `no space left on DIR` in one line
and exit 2, leave every file that was complete before complete (atomic replace, whole-line
appends), and leave `PRAGMA integrity_check` at ok and `runbook audit verify` at exit 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml

from runbook.errors import DiskFullError
from runbook.rundir import RunDirectory
from tests.hardening.runs import REPO, Finished, last_line_error, one_line_error, run_now
from tests.integration.conftest import RUNBOOKS as INTEGRATION_RUNBOOKS
from tests.integration.conftest import cli_env
from tests.tools import bundles

pytestmark = pytest.mark.live

#: a recorded incident whose verdict queues a proposal (memory-limit), and another (node-drain)
OOM = bundles.path("host-oom-cgroup-dir-v2")
XID = bundles.path("gpu-hardware-xid79")
FILLER = "filler"


class PrivateDisks:
    """Two tmpfs, `full` (4 MiB, to be filled) and `roomy` (8 MiB), mounted in a private mount
    namespace that a sleeping process holds; gone when it is killed."""

    def __init__(self, root: Path) -> None:
        self.full, self.roomy = root / "full", root / "roomy"
        self.full.mkdir(parents=True)
        self.roomy.mkdir()
        mount = "mount -t tmpfs -o size={},mode=0755 {} {}"
        script = " && ".join(
            [
                mount.format("4m", "rbk-disk-full", shlex.quote(str(self.full))),
                mount.format("8m", "rbk-disk-roomy", shlex.quote(str(self.roomy))),
                "echo ready",
                "exec sleep 300",
            ]
        )
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.holder.stdout is not None
        ready = self.holder.stdout.readline().strip()
        self.holder.stdout.close()
        if ready != "ready":
            self.close()
            pytest.fail(f"could not mount the test tmpfs: {ready!r}", pytrace=False)
        self.prefix = ["nsenter", f"--target={self.holder.pid}", "--mount", f"--wd={REPO}", "--"]

    def view(self, path: Path) -> Path:
        """`path` as the namespace sees it, from this process."""
        return Path(f"/proc/{self.holder.pid}/root{path}")

    def fill(self, directory: Path) -> None:
        """Write to the filesystem of `directory` until not one more byte fits."""
        with open(self.view(directory) / FILLER, "ab", buffering=0) as handle:
            for size in (1 << 20, 1 << 16, 4096, 512, 1):
                with contextlib.suppress(OSError):
                    while True:
                        handle.write(b"\0" * size)
        stat = os.statvfs(self.view(directory))
        assert stat.f_bavail == 0, stat

    def free(self, directory: Path) -> None:
        (self.view(directory) / FILLER).unlink()

    def cli(
        self, args: Sequence[str], env: dict[str, str], work: Path, timeout: float = 60
    ) -> Finished:
        return run_now(args, env, work, prefix=self.prefix, timeout=timeout)

    def store(self, db: Path) -> tuple[str, list[list[str]]]:
        """`PRAGMA integrity_check` and every proposal (id, state) of the store at `db`, read
        inside the namespace (SQLite resolves /proc/PID/root to this namespace's /)."""
        code = (
            "import json, sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
            "print(json.dumps([db.execute('PRAGMA integrity_check').fetchone()[0], "
            "db.execute('SELECT id, state FROM proposals ORDER BY id').fetchall()]))"
        )
        out = subprocess.run(
            [*self.prefix, sys.executable, "-c", code, str(db)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        check, rows = json.loads(out.stdout)
        return check, rows

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
        self.holder.wait()
        if self.holder.stderr is not None:
            self.holder.stderr.close()


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[PrivateDisks]:
    made = PrivateDisks(tmp_path / "disks")
    try:
        # private: the machine's own mount table never shows them
        assert "rbk-disk-full" not in Path("/proc/self/mountinfo").read_text()
        yield made
    finally:
        made.close()


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != FILLER and ".db" not in p.name
    }


def _no_temporaries(root: Path) -> None:
    left = [str(p) for p in root.rglob(".*")]
    assert not left, f"temporary files left behind: {left}"


def _whole_lines(path: Path) -> list[object]:
    raw = path.read_text()
    assert raw == "" or raw.endswith("\n"), raw[-200:]
    return [json.loads(line) for line in raw.splitlines()]


def _replay(bundle: Path, *extra: str) -> list[str]:
    return ["run", "nccl-init-failure", "--target", f"replay://{bundle}", "--no-input",
            "--format", "json", *extra]  # fmt: skip


def _audit_verify(disks: PrivateDisks, env: dict[str, str], work: Path) -> Finished:
    done = disks.cli(["audit", "verify"], env, work)
    assert done.rc == 0, done.stdout + done.stderr
    assert "chain intact" in done.stdout
    return done


def test_a_run_into_a_full_disk_fails_in_one_line_and_the_last_run_stays_whole(
    disks: PrivateDisks, tmp_path: Path
) -> None:
    env = cli_env(tmp_path)
    state = disks.full / "state"
    env["RUNBOOK_STATE_DIR"] = str(state)
    first = disks.cli(_replay(OOM, "--run-dir", str(disks.full / "run-1")), env, tmp_path / "1")
    assert first.rc == 0, first.stderr[-2000:]
    assert any(p["kind"] == "memory-limit" for p in first.json()["proposals"])
    before = _snapshot(disks.view(disks.full))
    _, proposals = disks.store(state / "approvals.db")
    assert len(proposals) == 1

    disks.fill(disks.full)
    second = disks.cli(_replay(XID, "--run-dir", str(disks.full / "run-2")), env, tmp_path / "2")
    assert second.rc == 2
    line = last_line_error(second)
    assert f"no space left on {disks.full / 'run-2'}" in line, line

    # what was complete is as it was: the first run, its verdict, the audit trail
    after = _snapshot(disks.view(disks.full))
    assert {k: v for k, v in after.items() if not k.startswith("run-2")} == before
    # the failed run's directory holds whole lines only, and no verdict that would look final
    broken = disks.view(disks.full / "run-2")
    _whole_lines(broken / "events.jsonl")
    assert not (broken / "verdict.json").exists()
    assert not (broken / "bundle" / "bundle.yaml").exists()
    _no_temporaries(disks.view(disks.full))

    disks.free(disks.full)
    assert disks.store(state / "approvals.db") == ("ok", proposals)
    _audit_verify(disks, env, tmp_path / "3")


def test_a_full_approval_store_is_one_line_and_stays_intact_and_the_run_is_kept(
    disks: PrivateDisks, tmp_path: Path
) -> None:
    env = cli_env(tmp_path)
    state = disks.full / "state"
    env["RUNBOOK_STATE_DIR"] = str(state)
    first = disks.cli(_replay(OOM), env, tmp_path / "1")
    assert first.rc == 0, first.stderr[-2000:]
    audit_before = disks.view(state / "audit.jsonl").read_bytes()
    _, proposals = disks.store(state / "approvals.db")

    disks.fill(disks.full)
    run_dir = disks.roomy / "run"
    second = disks.cli(_replay(XID, "--run-dir", str(run_dir)), env, tmp_path / "2")
    assert second.rc == 2
    line = last_line_error(second)
    assert f"no space left on {state} (approval store {state / 'approvals.db'}" in line, line
    # nothing of the walk is lost: its verdict (with the proposal not queued) is on disk
    verdict = json.loads(disks.view(run_dir / "verdict.json").read_text())
    assert verdict["root_cause"] == "gpu-hardware"
    assert any(p["kind"] == "node-drain" for p in verdict["proposals"])
    assert disks.view(state / "audit.jsonl").read_bytes() == audit_before

    disks.free(disks.full)
    assert disks.store(state / "approvals.db") == ("ok", proposals)
    _audit_verify(disks, env, tmp_path / "3")


def test_an_audit_log_on_a_full_disk_never_ends_in_half_an_entry(
    disks: PrivateDisks, tmp_path: Path
) -> None:
    env = cli_env(tmp_path)
    env["RUNBOOK_STATE_DIR"] = str(disks.roomy / "state")
    audit = disks.full / "audit" / "audit.jsonl"
    config = Path(env["XDG_CONFIG_HOME"]) / "nccl-runbook" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump({"approvals": {"audit_log": str(audit)}}))
    first = disks.cli(_replay(OOM), env, tmp_path / "1")
    assert first.rc == 0, first.stderr[-2000:]
    audit_before = disks.view(audit).read_bytes()
    assert audit_before.count(b"\n") == 1

    disks.fill(disks.full)
    # an entry longer than a page: whatever room the log's last page has, it cannot take it
    # whole, and a plain write() would store the part that fits (the entry names the run's
    # directory: a long one; the approver is the OS user now, never a long LOGNAME)
    deep = tmp_path / "2" / "/".join(["r" * 200] * 17)
    second = disks.cli(_replay(XID, "--run-dir", str(deep)), env, tmp_path / "2")
    assert second.rc == 2
    line = last_line_error(second)
    assert f"no space left on {audit.parent}" in line, line
    assert disks.view(audit).read_bytes() == audit_before
    _no_temporaries(disks.view(disks.full))

    disks.free(disks.full)
    check, _ = disks.store(disks.roomy / "state" / "approvals.db")
    assert check == "ok"
    _audit_verify(disks, env, tmp_path / "3")


def test_collect_into_a_full_disk_leaves_no_bundle_that_looks_whole(
    disks: PrivateDisks, tmp_path: Path
) -> None:
    env = cli_env(tmp_path)
    out = disks.full / "bundle"
    disks.fill(disks.full)
    done = disks.cli(
        ["collect", "--target", f"replay://{XID}", "--output", str(out)], env, tmp_path / "1"
    )
    assert done.rc == 2
    assert one_line_error(done) == f"runbook: no space left on {out} (No space left on device)"
    assert not disks.view(out / "bundle.yaml").exists()
    _no_temporaries(disks.view(disks.full))


def test_a_sweep_whose_reports_do_not_fit_keeps_the_last_reports_whole(
    disks: PrivateDisks, tmp_path: Path
) -> None:
    env = cli_env(tmp_path)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump({"all": {"hosts": {"this-node": {"ansible_connection": "local"}}}})
    )
    report = disks.full / "report"
    args = ["sweep", str(INTEGRATION_RUNBOOKS / "hostname.yaml"), "-i", str(inventory)]
    args += ["--report", str(report)]
    first = disks.cli(args, env, tmp_path / "1", timeout=120)
    assert first.rc == 0, first.stderr[-2000:]
    before = _snapshot(disks.view(report))
    # and the finished sweep's progress (test_interrupt.py)
    assert set(before) == {"sweep.json", "sweep.md", "junit.xml", "runbook.prom", "progress.jsonl"}

    disks.fill(disks.full)
    second = disks.cli(args, env, tmp_path / "2", timeout=120)
    assert second.rc == 2
    assert f"no space left on {report}" in last_line_error(second)
    assert _snapshot(disks.view(report)) == before
    _no_temporaries(disks.view(disks.full))


def test_an_event_that_does_not_fit_is_not_appended_in_part(
    disks: PrivateDisks, tmp_path: Path
) -> None:
    path = disks.view(disks.full / "run")
    directory = RunDirectory(path)
    try:
        directory.event("run-started", node="n1")
        before = (path / "events.jsonl").read_bytes()
        disks.fill(disks.full)
        # longer than a page: what is left of the file's last page cannot take it whole
        with pytest.raises(DiskFullError, match=f"no space left on {path}"):
            directory.event("probe", name="dmesg.txt", command="x" * 6000)
        assert (path / "events.jsonl").read_bytes() == before
        with pytest.raises(DiskFullError):
            directory.save_state({"records": {}, "big": "y" * 6000})
        assert not (path / "state.json").exists()
        _no_temporaries(path)
    finally:
        directory.close()


def test_reading_the_queue_and_verifying_the_audit_trail_work_on_a_full_disk(
    disks: PrivateDisks, tmp_path: Path
) -> None:
    """`approvals list`, `approvals show` and `audit verify` only read: a full disk under the
    store does not stop them (they opened the store for writing, and failed with
    `disk I/O error`)."""
    env = cli_env(tmp_path)
    state = disks.full / "state"
    env["RUNBOOK_STATE_DIR"] = str(state)
    first = disks.cli(_replay(OOM), env, tmp_path / "1")
    assert first.rc == 0, first.stderr[-2000:]
    disks.fill(disks.full)
    listed = disks.cli(["approvals", "list", "--format", "json"], env, tmp_path / "2")
    assert listed.rc == 0, listed.stderr
    (proposal,) = [p for p in json.loads(listed.stdout) if p["state"] == "pending"][:1]
    shown = disks.cli(["approvals", "show", proposal["id"]], env, tmp_path / "3")
    assert shown.rc == 0, shown.stderr
    _audit_verify(disks, env, tmp_path / "4")
