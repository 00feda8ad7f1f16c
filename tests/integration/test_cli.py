"""The CLI as a user meets it: exit codes, one-line errors, the demo, analyze, validate, graph."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.integration.conftest import RUNBOOKS
from tests.tools import bundles

DEMO = Path(__file__).resolve().parents[2] / "runbook" / "demo" / "incident"


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_the_demo_walks_the_shipped_runbook_to_the_host_memory_verdict(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = cli("demo", "--run-dir", str(tmp_path / "run"))
    assert result.rc == 0, result.stderr
    assert "Verdict for gpu-node-07: host-memory-oom" in result.stdout
    assert "0x100000 pages = 4 GiB" in result.stdout and "0x400000 pages = 16 GiB" in result.stdout
    run = tmp_path / "run"
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["root_cause"] == "host-memory-oom"
    assert verdict["first_anomaly"]["source"] == "dmesg.txt"
    assert not any(p["kind"] == "node-drain" for p in verdict["proposals"])
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert events[0]["event"] == "run-started" and events[-1]["event"] == "run-done"
    state = json.loads((run / "state.json").read_text())
    assert state["current"] is None and state["path"][0] == "app-error"
    # the run directory's bundle replays to the same verdict
    again = cli("analyze", str(run / "bundle"), "--format", "json")
    assert again.rc == 0, again.stderr
    assert again.json()["root_cause"] == "host-memory-oom"


def test_analyze_prints_one_verdict_object_and_markdown_in_the_incident_shape(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("analyze", str(DEMO), "--format", "json")
    assert result.rc == 0, result.stderr
    verdict = result.json()
    for key in ("format", "node", "root_cause", "confidence", "surfaced_as", "first_anomaly",
                "chain", "ruled_out", "stages", "proposals"):  # fmt: skip
        assert key in verdict
    assert "ncclCommInitRank failed" in verdict["surfaced_as"]
    markdown = cli("analyze", str(DEMO), "--format", "markdown")
    assert markdown.rc == 0
    assert markdown.stdout.startswith("# gpu-node-07: host-memory-oom")
    text = markdown.stdout
    assert "## Evidence chain" in text and "## Ruled out" in text and "## Timeline (UTC)" in text
    # the arithmetic, as the incident write-up shows it
    assert "671088640 KiB ÷ 1024 ÷ 1024 = 640 GiB" in text
    assert "0x100000 pages × 4 KiB = 4 GiB" in text and "0x400000 pages × 4 KiB = 16 GiB" in text
    # fixes in order: reduce the peak before adding memory
    fixes = text.split("## Fixes, in order")[1]
    assert fixes.index("reduce-loader-memory") < fixes.index("memory-limit")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["analyze", "/nonexistent/bundle"], "no such bundle"),
        (["run", "no-such-runbook", "--target", "local"], "no runbook"),
        (["run", "nccl-init-failure", "--target", "ftp://x"], "unknown target"),
        (["run", "nccl-init-failure", "--target", "local", "--var", "1bad=x"], "--var"),
        (["run", "nccl-init-failure", "--target", "ssh://root@host:99999"], "port"),
        (["run", "nccl-init-failure", "--target", "kubectl://only-namespace"], "kubectl://"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, args, needle) -> None:  # type: ignore[no-untyped-def]
    result = cli(*args)
    assert result.rc == 2
    assert needle in _one_line(result.stderr)


def test_a_directory_without_bundle_yaml_is_refused_by_analyze(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "dmesg.txt").write_text("x\n")
    result = cli("analyze", str(tmp_path))
    assert result.rc == 2 and "bundle.yaml" in _one_line(result.stderr)


def test_validate_exits_2_and_lists_every_problem_with_its_line(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "id: broken\n"
        "stages:\n"
        "  - id: a\n"
        "    parse: no-such-parser\n"
        "    decide:\n"
        "      - when: facts.x >\n"
        "        next: nowhere\n"
        "  - id: b\n"
        "    remedy: true\n"
    )
    result = cli("validate", str(broken))
    assert result.rc == 2
    lines = result.stderr.strip().splitlines()
    assert any(f"{broken}:4:" in line and "no-such-parser" in line for line in lines)
    assert any(f"{broken}:6:" in line and "does not compile" in line for line in lines)
    assert any(f"{broken}:7:" in line and "nowhere" in line for line in lines)
    assert any(f"{broken}:9:" in line and "remedies" in line for line in lines)
    ok = cli("validate", str(RUNBOOKS / "gpu-check.yaml"))
    assert ok.rc == 0 and "ok" in ok.stdout
    as_json = cli("validate", str(broken), "--format", "json")
    assert as_json.rc == 2
    data = as_json.json()
    assert data["ok"] is False and data["file"] == str(broken)
    assert {(i["line"], i["severity"]) for i in data["issues"]} >= {(4, "error"), (7, "error")}


def test_validate_takes_a_shipped_runbook_id_as_run_and_graph_do(cli) -> None:  # type: ignore[no-untyped-def]
    shipped = cli("validate", "nccl-init-failure")
    assert shipped.rc == 0 and shipped.stdout.startswith("nccl-init-failure: ok"), shipped.stderr
    data = cli("validate", "nccl-init-failure", "--format", "json").json()
    assert data["ok"] is True and data["file"].endswith("runbooks/nccl-init-failure.yaml")
    unknown = cli("validate", "no-such-runbook")
    assert unknown.rc == 2 and "not a shipped runbook id" in _one_line(unknown.stderr)


def test_run_refuses_an_invalid_runbook_before_touching_the_target(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "broken.yaml"
    broken.write_text("id: broken\nstages:\n  - id: a\n    decide:\n      - next: a\n")
    marker = tmp_path / "touched"
    result = cli("run", str(broken), "--target", "local", "--var", f"m={marker}")
    assert result.rc == 2 and "not a valid runbook" in _one_line(result.stderr)
    assert not marker.exists()


def test_a_bad_runbook_is_reported_without_waiting_for_the_target_to_answer(  # type: ignore[no-untyped-def]
    cli, tmp_path
) -> None:
    """The target is opened while the runbook loads; a runbook that fails to load is said at
    once, not after the connect timeout of a host that never answers (here a loopback port
    that accepts TCP and never speaks SSH)."""
    import socket
    import time

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        started = time.monotonic()
        result = cli("run", "no-such-runbook", "--target", f"ssh://root@127.0.0.1:{port}",
                     "--connect-timeout", "20", "--no-input")  # fmt: skip
        took = time.monotonic() - started
    assert result.rc == 2 and "no-such-runbook" in _one_line(result.stderr)
    assert took < 15, took  # the 20 s banner wait was not waited out


@pytest.mark.parametrize(
    ("fmt", "head"), [("dot", 'digraph "gpu-check"'), ("mermaid", "flowchart TD")]
)
def test_graph_draws_every_branch(cli, fmt, head) -> None:  # type: ignore[no-untyped-def]
    result = cli("graph", str(RUNBOOKS / "gpu-check.yaml"), "--format", fmt)
    assert result.rc == 0, result.stderr
    assert result.stdout.startswith(head)
    for target in ("hardware", "memory"):
        assert target in result.stdout


def test_a_local_run_records_a_missing_tool_as_not_collected_and_goes_on(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = cli("run", str(RUNBOOKS / "gpu-check.yaml"), "--target", "local", "--format", "json",
                 "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert result.rc == 0, result.stderr
    stages = {s["id"]: s for s in result.json()["stages"]}
    # this machine has no GPU: nvidia-smi is absent, which is evidence of nothing
    assert stages["gpu"]["not_collected"]["nvidia-smi-L.txt"] == "command not found"
    assert (tmp_path / "run" / "bundle" / "nvidia-smi-L.txt.rc").read_text().strip() == "127"


def test_kubectl_target_runs_each_probe_through_kubectl_exec_and_nsenter(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # No Kubernetes API server can run here: this `kubectl` is a recorded double. It records its
    # argv and runs the command after `--` locally, dropping the nsenter wrapper (the test
    # process cannot enter PID 1's namespaces); the argv it saw is what a real kubectl gets.
    calls = tmp_path / "calls.log"
    double = tmp_path / "kubectl"
    double.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {calls}\n'
        'while [ "$1" != "--" ]; do shift; done; shift\n'
        'if [ "$1" = nsenter ]; then while [ "$1" != "--" ]; do shift; done; shift; fi\n'
        'exec "$@"\n'
    )
    double.chmod(double.stat().st_mode | stat.S_IEXEC)
    result = cli("run", str(RUNBOOKS / "ten-commands.yaml"), "--target", "kubectl://kube-system/agent-0",
                 "--kubectl", str(double), "--format", "json")  # fmt: skip
    assert result.rc == 0, result.stderr
    assert all(s["status"] == "ok" for s in result.json()["stages"])
    recorded = calls.read_text().splitlines()
    # one exec a burst: the preamble, then both stages' probes sent ahead at once; none
    # started ahead after that last burst (it was 3), never one a probe (1 + preamble + 10)
    assert len(recorded) == 2, recorded
    prefix = "exec -i -n kube-system agent-0 -- nsenter --target 1 --mount --uts --ipc --net --pid"
    assert all(line.startswith(prefix + " -- /bin/sh -c ") for line in recorded)
    # the probes travel on the exec's input, never in its argv (nor the API's audit log)
    assert not any("uname -a" in line or "/proc/meminfo" in line for line in recorded)


def test_a_kubectl_target_that_cannot_exec_is_unreachable(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    double = tmp_path / "kubectl"
    double.write_text(
        "#!/bin/sh\necho 'Error from server (NotFound): pods \"agent-0\" not found' >&2\nexit 1\n"
    )
    double.chmod(0o755)
    result = cli("run", str(RUNBOOKS / "ten-commands.yaml"), "--target", "kubectl://kube-system/agent-0",
                 "--kubectl", str(double))  # fmt: skip
    assert result.rc == 3
    assert "NotFound" in _one_line(result.stderr)


def test_the_installed_console_script_is_on_the_venv_path() -> None:
    import shutil
    import sys

    script = Path(sys.executable).parent / "runbook"
    assert script.exists() or shutil.which("runbook"), "pip install did not create `runbook`"
    assert os.access(script if script.exists() else shutil.which("runbook") or "", os.X_OK)


def test_runbooks_lists_the_shipped_runbooks_a_run_takes(cli) -> None:  # type: ignore[no-untyped-def]
    from runbook.spec import shipped

    listed = cli("runbooks", "--format", "json")
    assert listed.rc == 0, listed.stderr
    rows = {r["id"]: r for r in listed.json()}
    assert set(rows) == set(shipped()) and "nccl-init-failure" in rows
    assert rows["nccl-init-failure"]["stages"] == 9 and "error" not in rows["nccl-init-failure"]
    text = cli("runbooks").stdout.splitlines()
    assert any(line.startswith("nccl-init-failure ") and "(9 stages)" in line for line in text)
    assert any(line.endswith("(1 stage)") for line in text), text  # counts agree in number


def test_runs_lists_past_runs_newest_first_finished_or_not(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert cli("runs").stdout.startswith("no runs in ")
    first = cli("run", "nccl-init-failure", "--target", f"replay://{DEMO}", "--no-input")
    assert first.rc == 0, first.stderr
    runs_dir = tmp_path / "state" / "runs"
    (done,) = list(runs_dir.iterdir())
    # a run stopped after it began (events, no verdict), named to sort as the newest
    stopped = runs_dir / "29991231T000000Z-nccl-init-failure-000000"
    stopped.mkdir(mode=0o700)
    (stopped / "events.jsonl").write_text(json.dumps(
        {"time": "x", "event": "run-started", "runbook": "nccl-init-failure", "node": "n9"}) + "\n")
    listed = cli("runs", "--format", "json")
    assert listed.rc == 0, listed.stderr
    rows = listed.json()
    assert [r["run_dir"] for r in rows] == [str(stopped), str(done)]
    assert rows[0]["status"].startswith("interrupted") and rows[0]["node"] == "n9"
    assert (rows[1]["status"], rows[1]["root_cause"]) == ("finished", "host-memory-oom")
    assert len(cli("runs", "--limit", "1", "--format", "json").json()) == 1


def test_piped_output_is_not_hard_wrapped_at_80_columns(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Into a pipe (no terminal, no COLUMNS), a finding or rule-out is one line, whole."""
    import subprocess
    import sys

    from tests.integration.conftest import cli_env

    env = {k: v for k, v in cli_env(tmp_path).items() if k != "COLUMNS"}
    bundle = bundles.path("pcie-corrected-aer-only")
    out = subprocess.run([sys.executable, "-m", "runbook", "analyze", str(bundle)], env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    (line,) = [line for line in out.splitlines() if "ruled out pcie-error" in line]
    assert len(line) > 120 and line.rstrip().endswith("which the link recovered from)"), line


def test_a_run_with_nothing_to_queue_leaves_the_approval_store_alone(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    healthy = bundles.path("healthy")
    db = tmp_path / "queue" / "approvals.db"
    result = cli("run", "nccl-init-failure", "--target", f"replay://{healthy}", "--no-input",
                 "--db", str(db), "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert result.rc == 0, result.stderr
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["proposals"] == []
    ledger = json.loads((tmp_path / "run" / "approvals.json").read_text())
    assert ledger["queued"] == [] and ledger["done"] is True
    assert not db.exists()  # never opened: nothing to queue
    # a run that has something to queue opens it
    again = cli("run", "nccl-init-failure", "--target", f"replay://{DEMO}", "--no-input",
                "--db", str(db), "--run-dir", str(tmp_path / "run2"))  # fmt: skip
    assert again.rc == 0, again.stderr
    assert db.exists()
    assert json.loads((tmp_path / "run2" / "approvals.json").read_text())["queued"]
