"""What the running desk does on its own: it publishes the queue in a thread of its own (a
proposal that expires undecided has its page resolved with no command run anywhere), and,
asked to stop (SIGTERM, ^C) while an approval runs, it takes no new decision and lets the
approval finish — unless a second signal says to stop now.

The real `runbook desk serve` (uvicorn) on 127.0.0.1, signed in through the trusted proxy
header; the store is real SQLite; PagerDuty is a local receiver checking the Events API's
shape (tests/paging/receivers.py). The approval runs a real playbook through ansible-runner
on this machine (ansible_connection local): a copy of the shipped content whose playbooks/
holds one that sleeps a few seconds, so the signal lands while it runs."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from runbook.remedies import plans
from runbook.remedies.store import Store
from tests.desk.conftest import DeskServer
from tests.paging import receivers as rx

REPO = Path(__file__).resolve().parents[2]
USER = {"X-Forwarded-Email": "alice@example.org", "X-Forwarded-Groups": "gpu-oncall"}
DESK = {
    "trusted_header": {"proxies": ["127.0.0.1/32"]},
    "allow": [{"groups": ["gpu-oncall"], "kinds": ["*"]}],
}
SLOW = """\
- name: A remedy that takes a few seconds
  hosts: all
  gather_facts: false
  tasks:
    - name: Take a while
      ansible.builtin.command: sleep {{ seconds }}
      changed_when: true
      when: not ansible_check_mode
"""


def wait_for(found: Any, timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        answer = found()
        if answer:
            return answer
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s")


def test_the_running_desk_resolves_the_page_of_a_proposal_that_expires_undecided(
    desk_factory: Any, tmp_path: Path
) -> None:
    with rx.receiver("pagerduty") as pagerduty:
        server: DeskServer = desk_factory(
            {**DESK, "publish_interval": "1s"},
            sections={"notify": {"pagerduty": {"url": pagerduty.url}}},
            env_extra={"RUNBOOK_PAGERDUTY_ROUTING_KEY": rx.ROUTING_KEY},
        )
        with Store(str(server.db)) as store:
            stored, _ = store.enqueue(
                key="gpu-node-07:shm-size-limit", kind="shm-size-limit", remedy="shm-size-limit",
                summary="raise /dev/shm", params={}, evidence={}, source="sweep", ttl=4,
                node="gpu-node-07", root_cause="shm-exhausted",
            )  # fmt: skip
        # nothing but the desk runs: no `approvals publish`, no other command
        trigger = wait_for(lambda: pagerduty.accepted, 10, "the trigger")[0]
        assert trigger["event_action"] == "trigger"
        assert trigger["payload"]["custom_details"]["proposal"] == stored.id
        resolve = wait_for(
            lambda: [a for a in pagerduty.accepted if a["event_action"] == "resolve"],
            15,
            "the resolve",
        )[0]
        assert resolve["dedup_key"] == trigger["dedup_key"]
        assert time.time() >= stored.expires_at
        assert [p for p in pagerduty.problems if p] == []


def slow_content(root: Path) -> Path:
    """The shipped Ansible content with one more playbook: slow.yml sleeps `seconds`."""
    content = root / "content"
    (content / "playbooks").mkdir(parents=True)
    for name in ("roles", "plugins"):
        (content / name).symlink_to(REPO / name, target_is_directory=True)
    (content / "playbooks" / "slow.yml").write_text(SLOW)
    return content


def queue_slow(db: Path, seconds: int) -> str:
    with Store(str(db)) as store:
        stored, _ = store.enqueue(
            key="gpu-node-07:shm-size-limit", kind="shm-size-limit", remedy="shm-size-limit",
            summary="raise /dev/shm", params={}, evidence={}, source="sweep", ttl=3600,
            node="gpu-node-07", root_cause="shm-exhausted",
            plan={"playbook": "slow.yml", "inventory": plans.localhost_inventory(),
                  "extravars": {"seconds": seconds}, "runs_on": "localhost = this machine"},
        )  # fmt: skip
    return stored.id


def approve_and_wait_until_running(server: DeskServer, pid: str) -> None:
    client = server.client(headers=USER)
    page = client.get(f"/p/{pid}")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    assert client.post(f"/p/{pid}/approve", data={"csrf": token.group(1)}).status_code == 303

    def state() -> str:
        with Store(str(server.db), readonly=True) as store:
            return store.get(pid).state

    wait_for(lambda: state() == "running", 30, "the approval claimed")
    time.sleep(1.0)


def audit_events(server: DeskServer, pid: str) -> list[str]:
    import json

    lines = (server.root / "state" / "audit.jsonl").read_text().splitlines()
    return [e["event"] for e in map(json.loads, lines) if e.get("proposal") == pid]


@pytest.mark.ansible
def test_sigterm_while_an_approval_runs_lets_it_finish_and_records_it_succeeded(
    desk_factory: Any, tmp_path: Path
) -> None:
    env = {"RUNBOOK_ANSIBLE_DIR": str(slow_content(tmp_path))}
    server: DeskServer = desk_factory(DESK, env_extra=env)
    pid = queue_slow(server.db, seconds=6)
    approve_and_wait_until_running(server, pid)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(90) == 0, server.log()
    log = server.log()
    with Store(str(server.db), readonly=True) as store:
        done = store.get(pid)
    assert done.state == "succeeded", (done.state, done.result, log)
    assert audit_events(server, pid)[-2:] == ["check", "executed"]
    assert re.search(rf"waiting up to 10 min for the approve of {pid} \(by alice@example.org\)",
                     log), log  # fmt: skip
    assert "desk: stopped" in log and "Traceback" not in log, log


@pytest.mark.ansible
def test_a_second_signal_stops_at_once_and_leaves_the_approval_for_recover(
    desk_factory: Any, tmp_path: Path
) -> None:
    env = {"RUNBOOK_ANSIBLE_DIR": str(slow_content(tmp_path))}
    server: DeskServer = desk_factory(DESK, env_extra=env)
    pid = queue_slow(server.db, seconds=30)
    approve_and_wait_until_running(server, pid)
    server.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "waiting up to" in server.log(), 15, "the desk saying what it waits for")
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(15) == 1, server.log()
    assert time.monotonic() - started < 5
    log = server.log()
    assert f"runbook approvals recover {pid}" in log, log
    with Store(str(server.db), readonly=True) as store:
        assert store.get(pid).state == "running"
    stop_started_with(env)  # the playbook the desk left running


def stop_started_with(env: dict[str, str]) -> None:
    """SIGTERM each process whose environment holds `env` (this test's own, unique paths)."""
    marks = [f"{k}={v}".encode() for k, v in env.items()]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if all(mark in environ for mark in marks):
            try:
                os.kill(int(entry.name), signal.SIGTERM)
            except OSError:
                pass
