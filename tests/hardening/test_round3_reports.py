"""Reports and consoles stay text: a job's log line made to look like markup or a terminal
command is quoted, never acted on.

The line planted in a recorded bundle holds a backtick (to close the code span around it),
`<img src=x onerror=…>`, `<script>`, a Markdown link and a remote image, and the escape
sequences that retitle a terminal (OSC 0), clear it (CSI 2J) and rewrite the line above
(CSI 1A, CSI 2K). Through the real CLI (`analyze`, `run` with a `--var` holding escapes,
`report`, `analyze-dir`'s sweep.md and junit.xml, a job's report) the Markdown is rendered by
a CommonMark renderer with HTML on (markdown-it-py, as viewers render it) and must hold no tag
but the report's own, no link and no image, and every URL of the evidence inside code; what
reaches a terminal (a real pseudo-terminal, rich's colours on) holds no escape sequence but
rich's colours. The Slack payload escapes what mrkdwn reads as a link or a mention."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from runbook import notify
from tests.integration.conftest import cli_env
from tests.sweep.helpers import REPO, runbook
from tests.tools import bundles

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[1A\x1b[2K"
MARKUP = (
    "`<img src=x onerror=alert(1)><script>alert(2)</script> "
    "[click](http://evil.example/a) ![i](http://evil.example/i.png)"
)
#: rich's own colours on a terminal: the only escape sequence a console may write
SGR = re.compile(r"\x1b\[[0-9;]*m")
#: the tags the reports write themselves
OWN_TAGS = {
    "p", "h1", "h2", "h3", "h4", "code", "pre", "table", "thead", "tbody", "tr", "th", "td",
    "ul", "ol", "li", "strong", "em", "br", "hr",
}  # fmt: skip


def hostile_bundle(tmp_path: Path) -> Path:
    """gpu-memory-oom with its first error (rank 5's CUDA OOM) carrying the hostile text."""
    path = bundles.materialize("gpu-memory-oom", tmp_path / "node-1")
    log = path / "app" / "rank-5.log"
    text = log.read_text()
    assert "CUDA out of memory. " in text
    log.write_text(text.replace("CUDA out of memory. ", f"CUDA out of memory. {ESCAPES}{MARKUP} "))
    return path


class _Rendered(HTMLParser):
    """What a viewer would make of the HTML: tags not the report's own, and text of the
    evidence's URLs outside code (a viewer links a bare URL)."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.code = 0
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in OWN_TAGS:
            self.problems.append(f"live <{tag} {attrs}>")
        if tag in ("code", "pre"):
            self.code += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("code", "pre"):
            self.code -= 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if not self.code and "evil.example" in data:
            self.problems.append(f"a URL outside code: {data!r}")


def rendered(markdown: str) -> _Rendered:
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    parser = _Rendered()
    parser.feed(html)
    parser.close()
    return parser


def assert_stays_text(markdown: str, *quoted: str) -> None:
    """No raw control character, no live tag, link or image, every URL in code; and the
    hostile text is there, as text (`quoted`: parts of it the report must show)."""
    assert "\x1b" not in markdown and "\x07" not in markdown, markdown
    view = rendered(markdown)
    assert not view.problems, view.problems
    shown = "".join(view.text)
    for part in quoted:
        assert part in shown, (part, markdown)


def terminal_output(args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    """`python -m runbook ARGS` on a real pseudo-terminal (stdout and stderr): what it wrote."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runbook", *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env={**env, "TERM": "xterm-256color"},
        cwd=REPO,
    )
    os.close(follower)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], timeout)
            assert ready, "no output from the command in time"
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        proc.wait(timeout)
    return b"".join(chunks).decode("utf-8", "replace")


def assert_inert(output: str) -> None:
    """No escape sequence but rich's colours, no bell, no carriage return; the escapes
    written visibly instead."""
    bare = SGR.sub("", output)
    assert "\x1b" not in bare and "\x07" not in bare, repr(bare[:3000])
    assert "\\x1b]0;owned\\x07" in bare, bare[:3000]


def test_a_hostile_log_line_is_quoted_as_text_by_analyze_on_a_terminal_and_in_a_pipe(
    tmp_path: Path,
) -> None:
    bundle = hostile_bundle(tmp_path)
    env = {k: v for k, v in cli_env(tmp_path).items() if k not in ("NO_COLOR", "COLUMNS")}
    on_terminal = terminal_output(["analyze", str(bundle)], {**env, "FORCE_COLOR": "1"})
    assert SGR.search(on_terminal), "rich's colours are on: the terminal path is the one tested"
    assert_inert(on_terminal)
    piped = runbook(["analyze", str(bundle)], env)
    assert piped.rc in (0, 1), piped.stderr
    assert "\x1b" not in piped.stdout + piped.stderr
    assert "\\x1b]0;owned\\x07" in piped.stdout


def test_escape_sequences_in_a_var_are_printed_visibly_in_the_walk(tmp_path: Path) -> None:
    bundle = hostile_bundle(tmp_path)
    env = {k: v for k, v in cli_env(tmp_path).items() if k not in ("NO_COLOR", "COLUMNS")}
    args = [
        "run", "nccl-init-failure", "--target", f"replay://{bundle}", "--no-input",
        "--run-dir", str(tmp_path / "run"), "--var", f"app_log_dir=/logs{ESCAPES}",
    ]  # fmt: skip
    on_terminal = terminal_output(args, env)
    assert "app-error" in on_terminal, on_terminal[-2000:]  # the walk was printed
    assert_inert(on_terminal)
    assert "/logs\\x1b]0;owned" in SGR.sub("", on_terminal)


def test_the_incident_report_renders_a_hostile_log_line_as_text(tmp_path: Path) -> None:
    bundle = hostile_bundle(tmp_path)
    out = tmp_path / "incident.md"
    done = runbook(["report", str(bundle), "-o", str(out)], cli_env(tmp_path))
    assert done.rc == 0, done.stderr
    assert_stays_text(out.read_text(), "<img src=x onerror=alert(1)>", "<script>", "[click](")
    printed = runbook(["report", str(bundle)], cli_env(tmp_path))
    assert printed.rc == 0 and printed.stdout == out.read_text()


def test_sweep_md_and_junit_from_analyze_dir_render_a_hostile_log_line_as_text(
    tmp_path: Path,
) -> None:
    hostile_bundle(tmp_path / "bundles")
    report = tmp_path / "report"
    done = runbook(
        ["analyze-dir", str(tmp_path / "bundles"), "--report", str(report)], cli_env(tmp_path)
    )
    assert done.rc in (0, 1), done.stderr
    assert_stays_text((report / "sweep.md").read_text(), "<img src=x onerror=alert(1)>")
    junit = (report / "junit.xml").read_text()
    assert "\x1b" not in junit and "\\x1b]0;owned" in junit
    assert "\x1b" not in done.stdout + done.stderr


def test_a_job_report_renders_hostile_names_and_lines_as_text(tmp_path: Path) -> None:
    node = "<https://evil.example|Click to approve>"
    line = f"{ESCAPES}{MARKUP}"
    job = {
        "job": {"ref": "kubectl://ml/train"},
        "root_cause": "gpu-memory-oom",
        "confidence": "high",
        "statement": f"rank 5 on {node} ran out of GPU memory: {line}",
        "surfaced_as": line,
        "first_anomaly": {
            "node": node, "source": "app/rank-5.log", "line": 6, "time": "t",
            "node_time": "t", "offset_s": 0.0, "text": line,
        },
        "chain": [{"time": "t", "node": node, "cause": "gpu-memory-oom", "finding": line}],
        "nodes": [{"node": node, "status": "finding", "root_cause": "gpu-memory-oom"}],
        "ranks": [{"rank": 5, "node": node, "pod": node, "first_error": {"time": "t",
                                                                         "text": line}}],
        "outliers": [{"summary": line}],
        "ruled_out": [{"cause": "host-memory-oom", "because": line}],
        "proposals": [{"node": node, "kind": "collect-more", "summary": line}],
        "timeline": [{"time": "t", "node": node, "node_time": "t", "source": "app/rank-5.log",
                      "line": 6, "text": line, "anomaly": True}],
    }  # fmt: skip
    run_dir = tmp_path / "job-run"
    run_dir.mkdir()
    (run_dir / "job.json").write_text(json.dumps(job))
    out = tmp_path / "job.md"
    done = runbook(["report", str(run_dir), "-o", str(out)], cli_env(tmp_path))
    assert done.rc == 0, done.stderr
    assert_stays_text(out.read_text(), "Click to approve", "<script>", "[click](")


@dataclass
class _Proposal:
    id: str = "p-1a2b3c"
    kind: str = "node-drain"
    summary: str = ""
    node: str | None = None
    root_cause: str | None = "gpu-hardware"
    evidence: dict[str, Any] = field(default_factory=lambda: {"confidence": "high"})
    created_at: float = 1_800_000_000.0
    expires_at: float = 1_800_086_400.0
    source: str = "run"


def _mrkdwn_texts(payload: Any) -> list[str]:
    """Every text Slack reads as mrkdwn: the message's text, each block's, field's and
    context element's."""
    texts = [payload["text"]]
    for block in payload["blocks"]:
        if "text" in block:
            texts.append(block["text"]["text"])
        texts += [f["text"] for f in block.get("fields", [])]
        texts += [e["text"] for e in block.get("elements", [])]
    return texts


def test_the_slack_payload_shows_a_hostile_node_name_and_summary_as_typed() -> None:
    proposal = _Proposal(
        node="<https://evil.example|Click to approve>",
        summary=f"drain it <!channel> <@U024BE7LH> & <https://evil.example|here> {ESCAPES}",
    )
    for event in (notify.QUEUED, notify.EXPIRING):
        payload = notify.slack_payload(proposal, event, now=1_800_000_100.0)
        texts = _mrkdwn_texts(payload)
        assert any("&lt;https://evil.example|Click to approve&gt;" in t for t in texts), texts
        assert any("&lt;!channel&gt;" in t and "&amp;" in t for t in texts), texts
        for text in texts:
            assert "<" not in text and ">" not in text, text  # no link, mention or date
            assert not re.search(r"&(?!amp;|lt;|gt;)", text), text  # a bare & escaped too
            assert "\x1b" not in text and "\x07" not in text, text
        generic = notify.generic_payload(proposal, event, now=1_800_000_100.0)
        assert "\x1b" not in generic["text"] + generic["summary"]
        assert "\\x1b]0;owned" in generic["summary"]
