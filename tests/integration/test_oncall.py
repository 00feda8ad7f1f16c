"""What reaches on-call from the approval queue, through the real CLI: the queue's metrics file
in a textfile-collector directory (checked by Prometheus' own `promtool check metrics`) and
the webhook notices, delivered to a real HTTP receiver on 127.0.0.1 started by each test —
both payload formats, a 500 retried, a receiver that keeps failing or never answers (given up
within the deadline, the command's exit code unchanged, the URL's token never printed), and
each notice sent once, recorded in the store.

The incident is a recorded bundle replayed (`replay://`): no node, no Kubernetes API."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.sweep.helpers import parse_prom, promtool_check
from tests.tools import bundles

BUNDLE = bundles.path("shm-exhausted")
TOKEN = "T0AAAA/B0BBBB/s3cr3tw3bh00ktok3n"


@dataclass
class Receiver:
    """A webhook receiver: answers each POST with the next of `answers` (an HTTP status, or
    "hang": never answer), the last one repeated; keeps what it was sent."""

    answers: list[Any] = field(default_factory=lambda: [200])
    posts: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def next_answer(self) -> Any:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.posts.append(json.loads(body))
            state.paths.append(self.path)
            answer = state.next_answer()
            if answer == "hang":
                state.release.wait(30)
                return
            self.send_response(int(answer))
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    state.url = f"http://{host}:{port}/services/{TOKEN}"
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def config(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config" / "nccl-runbook" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def queue(cli, tmp_path: Path, receiver: Receiver, *extra: str, **env: str):  # type: ignore[no-untyped-def]
    manifest = tmp_path / "job.yaml"
    manifest.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: train}\n")
    return cli("run", "nccl-init-failure", "--target", f"replay://{BUNDLE}", "--no-input",
               "--var", f"manifest={manifest}", *extra, timeout=120,
               extra_env={"RUNBOOK_WEBHOOK_URL": receiver.url, **env})


def pending_id(cli) -> str:  # type: ignore[no-untyped-def]
    listed = cli("approvals", "list", "--format", "json")
    (item,) = [p for p in json.loads(listed.stdout) if p["state"] == "pending"]
    return str(item["id"])


def no_token(*texts: str) -> None:
    for text in texts:
        assert "s3cr3tw3bh00ktok3n" not in text and "/services/" not in text


def test_a_queued_proposal_is_announced_once_and_counted_until_it_is_decided(
    cli, tmp_path: Path, receiver: Receiver
) -> None:  # type: ignore[no-untyped-def]
    textfile = tmp_path / "textfile"
    run = queue(cli, tmp_path, receiver, "--textfile-dir", str(textfile))
    assert run.rc == 0, run.stderr
    assert "warning" not in run.stderr
    pid = pending_id(cli)
    (post,) = receiver.posts
    assert receiver.paths == [f"/services/{TOKEN}"]
    assert post["event"] == "proposal-queued"
    assert post["proposal"] == pid and post["kind"] == "shm-size-limit"
    assert post["node"] == "gpu-node-03"
    assert post["verdict"] == {"root_cause": "shm-exhausted", "confidence": "high"}
    assert post["command"] == f"runbook approvals show {pid}"
    assert pid in post["text"] and "gpu-node-03" in post["text"]
    assert 86000 < post["expires_in_seconds"] <= 86400

    prom = textfile / "runbook-approvals.prom"
    promtool_check(prom)
    samples = parse_prom(prom.read_text())
    pending = {(lb["kind"], lb["severity"]): v for lb, v in samples["runbook_approvals_pending"]}
    assert pending[("shm-size-limit", "warning")] == 1
    assert sum(pending.values()) == 1
    assert {k for k, _ in pending} == {"shm-size-limit", "memory-limit", "nccl-ib-disable-ab",
                                        "node-drain"}  # every queued kind, 0s too
    ((_, created),) = samples["runbook_approvals_oldest_pending_created_timestamp_seconds"]
    ((_, expires),) = samples["runbook_approvals_next_expiry_timestamp_seconds"]
    assert abs(created - time.time()) < 120 and expires - created == pytest.approx(86400, abs=1)
    assert [p.name for p in textfile.iterdir()] == ["runbook-approvals.prom"]  # no temporary

    again = cli("approvals", "publish", extra_env={"RUNBOOK_WEBHOOK_URL": receiver.url})
    assert again.rc == 0, again.stderr
    assert "1 pending; 0 notices sent" in again.stdout
    assert len(receiver.posts) == 1  # recorded in the store: never sent twice
    from runbook.remedies.store import Store

    with Store(tmp_path / "state" / "approvals.db", readonly=True) as store:
        assert store.sent_notices() == {(pid, "queued")}

    denied = cli("approvals", "deny", pid, "--reason", "change freeze",
                 "--textfile-dir", str(textfile))
    assert denied.rc == 0, denied.stderr
    promtool_check(prom)
    samples = parse_prom(prom.read_text())
    assert sum(v for _, v in samples["runbook_approvals_pending"]) == 0
    assert "runbook_approvals_oldest_pending_created_timestamp_seconds" not in samples
    assert "runbook_approvals_next_expiry_timestamp_seconds" not in samples


def test_the_slack_format_carries_text_and_blocks_naming_the_show_command(
    cli, tmp_path: Path, receiver: Receiver
) -> None:  # type: ignore[no-untyped-def]
    run = queue(cli, tmp_path, receiver, RUNBOOK_WEBHOOK_FORMAT="slack")
    assert run.rc == 0, run.stderr
    pid = pending_id(cli)
    (post,) = receiver.posts
    assert set(post) == {"text", "blocks"}
    assert pid in post["text"] and "gpu-node-03" in post["text"]
    assert "shm-exhausted" in post["text"]
    flat = json.dumps(post["blocks"])
    assert f"runbook approvals show {pid}" in flat
    assert "*Verdict:* shm-exhausted (high)" in flat
    assert all(block["type"] in ("section", "context") for block in post["blocks"])


def test_a_500_is_retried_and_the_notice_delivered(
    cli, tmp_path: Path, receiver: Receiver
) -> None:  # type: ignore[no-untyped-def]
    receiver.answers = [500, 200]
    run = queue(cli, tmp_path, receiver)
    assert run.rc == 0, run.stderr
    assert len(receiver.posts) == 2
    assert receiver.posts[0] == receiver.posts[1]
    assert "warning" not in run.stderr
    again = cli("approvals", "publish", extra_env={"RUNBOOK_WEBHOOK_URL": receiver.url})
    assert len(receiver.posts) == 2, again.stderr  # delivered at the retry: recorded as sent


def test_a_webhook_that_keeps_failing_is_given_up_after_3_attempts_and_the_run_exits_0(
    cli, tmp_path: Path, receiver: Receiver
) -> None:  # type: ignore[no-untyped-def]
    receiver.answers = [503]
    run = queue(cli, tmp_path, receiver)
    assert run.rc == 0, run.stderr
    assert len(receiver.posts) == 3
    warnings = [line for line in run.stderr.splitlines() if "warning" in line]
    port = receiver.url.split(":")[2].split("/")[0]
    assert warnings == [
        f"runbook: warning: webhook http://127.0.0.1:{port}/…: HTTP 503 after 3 attempts; "
        "1 notice not sent (tried again at the next command)"
    ]
    no_token(run.stdout, run.stderr)
    # not recorded as sent: the next command delivers it once the receiver is back
    receiver.answers = [200]
    again = cli("approvals", "publish", extra_env={"RUNBOOK_WEBHOOK_URL": receiver.url})
    assert again.rc == 0, again.stderr
    assert "1 notices sent" in again.stdout and len(receiver.posts) == 4


def test_a_receiver_that_never_answers_is_cut_off_by_the_timeout(
    cli, tmp_path: Path, receiver: Receiver
) -> None:  # type: ignore[no-untyped-def]
    config(tmp_path, "notify:\n  timeout: 1s\n")
    receiver.answers = ["hang"]
    started = time.monotonic()
    run = queue(cli, tmp_path, receiver)
    took = time.monotonic() - started
    assert run.rc == 0, run.stderr
    assert 1 <= len(receiver.posts) <= 3
    (warning,) = [line for line in run.stderr.splitlines() if "warning" in line]
    assert "no answer within 1 s" in warning
    no_token(run.stdout, run.stderr)
    # the run itself takes about a second; 3 attempts of 1 s and 0.75 s of backoff (3.75 s,
    # under the 5 s deadline) follow; a receiver holding the request would keep it 30 s
    assert took < 10, took


def test_a_proposal_about_to_expire_is_announced_once(
    cli, tmp_path: Path, receiver: Receiver
) -> None:  # type: ignore[no-untyped-def]
    config(tmp_path, "approvals:\n  ttl: 1h\nnotify:\n  expiry_window: 2h\n")
    run = queue(cli, tmp_path, receiver)
    assert run.rc == 0, run.stderr
    pid = pending_id(cli)
    assert [p["event"] for p in receiver.posts] == ["proposal-queued", "proposal-expiring"]
    expiring = receiver.posts[1]
    assert expiring["proposal"] == pid
    assert "expires in 59 min" in expiring["text"] or "expires in 1 h 00 min" in expiring["text"]
    again = cli("approvals", "publish", "--format", "json",
                extra_env={"RUNBOOK_WEBHOOK_URL": receiver.url})
    assert again.rc == 0, again.stderr
    assert again.json() == {"pending": 1, "metrics_file": None, "notices_sent": 0}
    assert len(receiver.posts) == 2


def test_a_webhook_url_that_is_not_http_is_refused_in_one_line_without_the_url(cli) -> None:  # type: ignore[no-untyped-def]
    bad = cli("approvals", "publish", extra_env={"RUNBOOK_WEBHOOK_URL": f"file:///{TOKEN}"})
    assert bad.rc == 2
    assert bad.stderr.count("\n") == 1 and "expected an http:// or https:// URL" in bad.stderr
    no_token(bad.stderr)


def test_a_textfile_directory_that_cannot_be_written_is_a_warning_not_a_failure(
    cli, tmp_path: Path, receiver: Receiver
) -> None:  # type: ignore[no-untyped-def]
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the directory should be\n")
    # the flag (and its variable, RUNBOOK_TEXTFILE_DIR) refuses a file at once (usage, exit
    # 2); the config file's setting is only found wanting when the metrics are written, after
    # the run did its work
    refused = queue(cli, tmp_path, receiver, RUNBOOK_TEXTFILE_DIR=str(blocked))
    assert refused.rc == 2 and "is a file" in refused.stderr
    assert receiver.posts == []
    config(tmp_path, f"metrics:\n  textfile_dir: {blocked}\n")
    run = queue(cli, tmp_path, receiver)
    assert run.rc == 0, run.stderr
    (warning,) = [line for line in run.stderr.splitlines() if "warning" in line]
    assert warning.startswith(f"runbook: warning: metrics not written to {blocked}: ")
    assert len(receiver.posts) == 1  # the notice went out all the same
