"""Paging that resolves itself, through the real CLI and the real approval store (SQLite):
a replayed shm-exhausted incident queues a proposal, and each paging service — PagerDuty
Events v2, a Teams workflow, a Slack incoming webhook, the signed generic JSON — is a local
HTTP receiver on 127.0.0.1 that checks every request against the service's documented shape
(tests/paging/shapes.py) and refuses what does not match or does not verify.

The page opens when the proposal is queued and is resolved, once, when it is denied, approved
and run (the real playbook through ansible-runner, patching a manifest in a Git checkout), or
expires undecided. A receiver that is down or hangs costs a warning, never the decision; each
notice goes out once even when several processes publish at the same moment, on the SQLite
file and on a PostgreSQL server (the private test server of tests/pg).

No node and no Kubernetes API are involved (the incident is a recorded bundle, `replay://`)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import cli_env
from tests.paging import receivers as rx
from tests.paging.receivers import Receiver
from tests.tools import bundles, manifests

BUNDLE = bundles.path("shm-exhausted")
DESK = "https://desk.example.org"
JOB = manifests.GPU_JOB


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config" / "nccl-runbook" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    """The workload's manifest in a Git checkout, as a shm-size-limit patch wants it."""
    repo = tmp_path / "deploy"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "sre@example.com"],
                 ["config", "user.name", "SRE"]):  # fmt: skip
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    (repo / "job.yaml").write_text(JOB)
    subprocess.run(["git", "-C", str(repo), "add", "job.yaml"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "job"], check=True)
    return repo / "job.yaml"


def queue(cli, manifest: Path, **env: str) -> str:  # type: ignore[no-untyped-def]
    """Run the runbook on the replayed incident; the queued shm-size-limit proposal's id."""
    run = cli("run", "nccl-init-failure", "--target", f"replay://{BUNDLE}", "--no-input",
              "--var", f"manifest={manifest}", timeout=120, extra_env=env)  # fmt: skip
    assert run.rc == 0, run.stderr
    assert "warning" not in run.stderr, run.stderr
    no_secret(run.stdout, run.stderr)
    listed = cli("approvals", "list", "--format", "json")
    (item,) = [p for p in json.loads(listed.stdout) if p["kind"] == "shm-size-limit"]
    return str(item["id"])


def no_secret(*texts: str) -> None:
    for text in texts:
        assert rx.ROUTING_KEY not in text and rx.SECRET not in text, text
        assert "w3bh00kt0k3n" not in text and "/hooks/" not in text, text


def mine(receiver: Receiver, pid: str) -> list[Any]:
    """What `receiver` took about proposal `pid` (other proposals of the run aside)."""
    return [body for body in receiver.accepted if pid in json.dumps(body)]


def no_problems(services: dict[str, Receiver]) -> None:
    for name, receiver in services.items():
        assert all(p == [] for p in receiver.problems), (name, receiver.problems)


def test_a_queued_proposal_pages_every_service_and_a_denial_resolves_each_page_once(
    cli, tmp_path: Path, manifest: Path, services: dict[str, Receiver]
) -> None:  # type: ignore[no-untyped-def]
    write_config(tmp_path, rx.config_text(services, desk=DESK))
    pid = queue(cli, manifest, **rx.secret_env())
    link = f"{DESK}/p/{pid}"
    no_problems(services)

    (trigger,) = mine(services["pagerduty"], pid)
    assert trigger["event_action"] == "trigger"
    assert trigger["routing_key"] == rx.ROUTING_KEY
    assert trigger["payload"]["source"] == "gpu-node-03"
    assert trigger["payload"]["severity"] == "warning"  # shm-exhausted: a named cause
    assert trigger["links"] == [{"href": link, "text": "Open the proposal on the approval desk"}]
    (card,) = mine(services["teams"], pid)
    assert card["attachments"][0]["content"]["actions"][0]["url"] == link
    (slack,) = mine(services["slack"], pid)
    (button,) = [b for b in slack["blocks"] if b["type"] == "actions"]
    assert button["elements"][0]["url"] == link
    (hook,) = mine(services["json"], pid)
    assert (hook["event"], hook["link"]) == ("proposal-queued", link)
    # the generic receiver took it only because the signature verified (401 otherwise)
    signed = services["json"].requests[-1].headers
    assert set(signed) >= {"X-Runbook-Timestamp", "X-Runbook-Signature"}

    denied = cli("approvals", "deny", pid, "--reason", "change freeze",
                 extra_env=rx.secret_env())  # fmt: skip
    assert denied.rc == 0, denied.stderr
    assert "warning" not in denied.stderr, denied.stderr
    no_secret(denied.stdout, denied.stderr)
    no_problems(services)
    trigger, resolve = mine(services["pagerduty"], pid)
    assert resolve["event_action"] == "resolve"
    assert resolve["dedup_key"] == trigger["dedup_key"]
    _, card = mine(services["teams"], pid)
    facts = card["attachments"][0]["content"]["body"][1]["facts"]
    assert {"title": "Outcome", "value": "denied"} in facts
    _, slack = mine(services["slack"], pid)
    assert "denied by " in slack["text"] and "change freeze" in slack["text"]
    _, hook = mine(services["json"], pid)
    assert (hook["event"], hook["outcome"], hook["reason"]) == (
        "proposal-resolved", "denied", "change freeze"
    )  # fmt: skip

    counts = {name: len(r.requests) for name, r in services.items()}
    again = cli("approvals", "publish", extra_env=rx.secret_env())
    assert again.rc == 0 and "0 notices sent" in again.stdout, again.stdout + again.stderr
    assert {name: len(r.requests) for name, r in services.items()} == counts


@pytest.mark.ansible
def test_approving_and_running_a_proposal_resolves_its_page_after_the_run(
    cli, tmp_path: Path, manifest: Path, services: dict[str, Receiver]
) -> None:  # type: ignore[no-untyped-def]
    used = {k: services[k] for k in ("pagerduty", "slack")}
    write_config(tmp_path, rx.config_text(used, desk=DESK))
    pid = queue(cli, manifest, **rx.secret_env())
    approved = cli("approvals", "approve", pid, "--as", "alice", timeout=180,
                   extra_env=rx.secret_env())  # fmt: skip
    assert approved.rc == 0, approved.stdout + approved.stderr
    assert "80Gi" in manifest.read_text()  # it ran
    no_secret(approved.stdout, approved.stderr)
    no_problems(used)
    trigger, resolve = mine(services["pagerduty"], pid)
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert resolve["dedup_key"] == trigger["dedup_key"]
    _, follow_up = mine(services["slack"], pid)
    assert "approved by " in follow_up["text"] and "and run: succeeded" in follow_up["text"]


def test_a_proposal_that_expires_undecided_has_its_page_resolved(
    cli, tmp_path: Path, manifest: Path, services: dict[str, Receiver]
) -> None:  # type: ignore[no-untyped-def]
    write_config(tmp_path, rx.config_text(services, desk=DESK, extra="approvals:\n  ttl: 4s"))
    pid = queue(cli, manifest, **rx.secret_env())
    assert [b["event_action"] for b in mine(services["pagerduty"], pid)] == ["trigger"]
    time.sleep(4.5)
    published = cli("approvals", "publish", extra_env=rx.secret_env())
    assert published.rc == 0, published.stderr
    no_problems(services)
    trigger, resolve = mine(services["pagerduty"], pid)
    assert resolve == {"routing_key": rx.ROUTING_KEY, "event_action": "resolve",
                       "dedup_key": trigger["dedup_key"]}  # fmt: skip
    hook = mine(services["json"], pid)
    # queued, then expiring (the TTL is within the window from the start), then resolved
    assert [h["event"] for h in hook] == ["proposal-queued", "proposal-expiring",
                                          "proposal-resolved"]  # fmt: skip
    assert hook[-1]["outcome"] == "expired"
    assert "expired undecided" in mine(services["slack"], pid)[-1]["text"]
    again = cli("approvals", "publish", extra_env=rx.secret_env())
    assert "0 notices sent" in again.stdout, again.stdout


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/{rx.URL_TOKEN}"


def test_a_receiver_that_is_down_or_slow_never_blocks_or_fails_a_decision(
    cli, tmp_path: Path, manifest: Path, services: dict[str, Receiver], monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    used = {k: services[k] for k in ("pagerduty", "slack", "teams")}
    config = write_config(tmp_path, rx.config_text(used, desk=DESK))
    gone = closed_port_url()

    def break_them() -> None:
        """PagerDuty hangs; Slack's receiver is gone (nothing listens on its port)."""
        services["pagerduty"].mode = "hang"
        write_config(tmp_path, rx.config_text(used, desk=DESK).replace(services["slack"].url, gone))

    def mend_them() -> None:
        services["pagerduty"].mode = "ok"
        write_config(tmp_path, rx.config_text(used, desk=DESK))

    first = queue(cli, manifest, **rx.secret_env())
    break_them()

    # the desk in this process, as the web desk calls it: the decision returns at once
    from runbook import config as config_mod
    from runbook.oncall import publish
    from runbook.remedies.approval import Desk
    from runbook.remedies.store import Store

    for name, value in {**cli_env(tmp_path), **rx.secret_env()}.items():
        monkeypatch.setenv(name, value)
    # (the desk's own publish on closing included: the pages being resolved are claimed by
    # the decision, and the publish leaves them to it)
    started = time.monotonic()
    with Desk(config_mod.load(config)) as desk:
        denied = desk.deny(first, reason="not now")
        # claimed by the decision itself, before it returned: no other sender takes them
        with Store(desk.config.db) as other:
            for name in ("pagerduty:resolved", "slack:resolved", "teams:resolved"):
                assert not other.claim_notice(first, name), name
    took = time.monotonic() - started
    assert denied.state == "denied"
    assert took < 1.0, took  # PagerDuty holds each request 30 s: nobody waits on it here
    for thread in threading.enumerate():
        if thread.name == f"runbook-resolve-{first}":
            thread.join(15)
    warnings = capsys.readouterr().err
    assert "pagerduty http://127.0.0.1:" in warnings and "no answer within 1 s" in warnings
    assert "slack http://127.0.0.1:" in warnings and "Connection refused" in warnings
    no_secret(warnings)
    # Teams, which was up, took its follow-up card; Slack and PagerDuty are owed theirs
    assert len(mine(services["teams"], first)) == 2
    assert len(mine(services["slack"], first)) == 1

    # the receivers are back: the next command (here, a run) sends what is owed
    mend_them()
    second = queue(cli, manifest, **rx.secret_env())
    assert len(mine(services["slack"], first)) == 2
    assert [b["event_action"] for b in mine(services["pagerduty"], first)][-1] == "resolve"

    # through the CLI: the denial exits 0, with the warnings, within the delivery deadlines
    break_them()
    started = time.monotonic()
    denied_cli = cli("approvals", "deny", second, "--reason", "not now either",
                     extra_env=rx.secret_env(), timeout=60)  # fmt: skip
    took = time.monotonic() - started
    assert denied_cli.rc == 0, denied_cli.stderr
    assert "no answer within 1 s" in denied_cli.stderr, denied_cli.stderr
    no_secret(denied_cli.stdout, denied_cli.stderr)
    assert took < 15, took
    shown = json.loads(cli("approvals", "show", second, "--format", "json").stdout)
    assert shown["state"] == "denied"

    # the receivers are back: the next publish resolves what is owed, once each
    mend_them()
    cfg = config_mod.load(config)
    with Desk(cfg) as desk:
        assert publish(cfg, desk.store).notices_sent == 2  # Slack's and PagerDuty's
    assert len(mine(services["slack"], second)) == 2
    # the hung attempts reached PagerDuty too (unanswered); the last one was answered
    assert [b["event_action"] for b in mine(services["pagerduty"], second)][-1] == "resolve"
    again = cli("approvals", "publish", extra_env=rx.secret_env())
    assert "0 notices sent" in again.stdout, again.stdout + again.stderr
    no_problems(used)


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_processes_publishing_at_the_same_moment_send_each_notice_once(
    cli,
    tmp_path: Path,
    manifest: Path,
    services: dict[str, Receiver],
    database: str,
    request: pytest.FixtureRequest,
) -> None:  # type: ignore[no-untyped-def]
    """On the default SQLite file, and on a PostgreSQL server that several machines share
    (the private test server, tests/pg): the claims hold across processes on either."""
    store = ""
    if database == "postgresql":
        store = f"approvals:\n  db: {request.getfixturevalue('pg_url')}\n"
    write_config(tmp_path, store)
    pid = queue(cli, manifest)  # nowhere to page yet: nothing sent
    assert (tmp_path / "state" / "approvals.db").exists() == (database == "sqlite")
    write_config(tmp_path, store + rx.config_text(services, desk=DESK))
    env = {**cli_env(tmp_path), **rx.secret_env()}

    def publish_at_once(n: int) -> list[tuple[int, str, str]]:
        procs = [
            subprocess.Popen([sys.executable, "-m", "runbook", "approvals", "publish"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(n)
        ]  # fmt: skip
        return [(p.wait(60), *p.communicate()) for p in procs]

    outcomes = publish_at_once(4)
    assert [rc for rc, _, _ in outcomes] == [0] * 4, outcomes
    no_problems(services)
    for name, receiver in services.items():
        assert len(mine(receiver, pid)) == 1, (name, len(mine(receiver, pid)))

    # decided with no place configured: the resolves are owed, and sent once by the publishers
    write_config(tmp_path, store)
    assert cli("approvals", "deny", pid, "--reason", "dup").rc == 0
    write_config(tmp_path, store + rx.config_text(services, desk=DESK))
    outcomes = publish_at_once(4)
    assert [rc for rc, _, _ in outcomes] == [0] * 4, outcomes
    no_problems(services)
    for name, receiver in services.items():
        assert len(mine(receiver, pid)) == 2, (name, len(mine(receiver, pid)))
    trigger, resolve = mine(services["pagerduty"], pid)
    assert resolve["dedup_key"] == trigger["dedup_key"]


def test_a_bad_paging_setting_is_one_line_naming_its_key_never_its_value(cli) -> None:  # type: ignore[no-untyped-def]
    for env, key in (
        ({"RUNBOOK_TEAMS_WEBHOOK_URL": f"file:///{rx.URL_TOKEN}"}, "notify.teams.webhook_url"),
        ({"RUNBOOK_SLACK_WEBHOOK_URL": f"ftp://h/{rx.URL_TOKEN}"}, "notify.slack.webhook_url"),
        ({"RUNBOOK_PAGERDUTY_ROUTING_KEY": f"{rx.ROUTING_KEY} x"}, "notify.pagerduty.routing_key"),
        ({"RUNBOOK_WEBHOOK_SECRET": f"{rx.SECRET} x", "RUNBOOK_WEBHOOK_URL": "http://h/"},
         "notify.signing_secret"),
    ):  # fmt: skip
        bad = cli("approvals", "publish", extra_env=env)
        assert bad.rc == 2, bad.stderr
        assert bad.stderr.count("\n") == 1 and key in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
        no_secret(bad.stderr)
