"""`runbook npd` speaks node-problem-detector's custom-plugin protocol, and the shipped NPD
monitor (examples/node-problem-detector/) runs it as NPD would: its rule's command line, as a
process, against recorded bundles (replay://) and a target that cannot be reached (loopback)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tools import bundles

tomllib = importlib.import_module("tomllib")  # Python 3.11+, as the suite runs
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "node-problem-detector"
MONITOR = EXAMPLE / "gpu-training-fault-monitor.json"
DCGM = ROOT / "tests" / "unit" / "parsers" / "samples" / "dcgm"
F_HEALTH = "dcgmi-health.txt"
#: Go's time.ParseDuration, as NPD parses invoke_interval and timeouts
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def go_seconds(text: str) -> float:
    scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * scale[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)(ns|us|µs|ms|s|m|h)",
                                                             text))  # fmt: skip


def monitor() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MONITOR.read_text())
    return data


def rule_argv(target: str) -> list[str]:
    """The monitor's rule as the process NPD starts, pointed at `target`: its `--target`
    value replaced and `--nsenter` dropped (a recorded bundle has no namespaces to enter);
    every other argument as shipped."""
    (rule,) = monitor()["rules"]
    args = list(rule["args"])
    args[args.index("--target") + 1] = target
    args.remove("--nsenter")
    return [sys.executable, "-m", "runbook", *args]


def npd(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          cwd=ROOT, stdin=subprocess.DEVNULL)  # fmt: skip


def bundle_with(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "bundle"
    bundles.materialize("healthy", root)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


# --- the shipped monitor -----------------------------------------------------------------


def test_the_monitor_is_a_custom_plugin_config_npd_accepts() -> None:
    """What NPD's CustomPluginConfig.ApplyConfiguration/Validate check, and the keys it reads."""
    config = monitor()
    assert config["plugin"] == "custom"
    assert config["source"]
    plugin = config["pluginConfig"]
    assert set(plugin) <= {"invoke_interval", "timeout", "max_output_length", "concurrency",
                           "enable_message_change_based_condition_update",
                           "skip_initial_status"}  # fmt: skip
    for key in ("invoke_interval", "timeout"):
        assert GO_DURATION.match(plugin[key]), plugin[key]
    assert isinstance(plugin["max_output_length"], int) and plugin["concurrency"] >= 1
    conditions = {c["type"]: c for c in config["conditions"]}
    assert set(conditions["GPUTrainingFault"]) == {"type", "reason", "message"}
    (rule,) = config["rules"]
    assert rule["type"] == "permanent" and rule["condition"] in conditions
    assert rule["reason"] and rule["reason"] != conditions[rule["condition"]]["reason"]
    assert GO_DURATION.match(rule["timeout"])
    assert go_seconds(rule["timeout"]) <= go_seconds(plugin["timeout"])
    assert all(isinstance(a, str) for a in rule["args"])


def test_the_rule_runs_the_installed_runbook_command_with_arguments_it_accepts() -> None:
    (rule,) = monitor()["rules"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert Path(rule["path"]).name in scripts
    assert "/opt/nccl-runbook/bin/runbook" == rule["path"]
    assert "/opt/nccl-runbook" in (EXAMPLE / "Dockerfile").read_text()
    args = rule["args"]
    assert args[:2] == ["npd", "nccl-init-failure"]
    assert args[args.index("--max-output-length") + 1] == str(
        monitor()["pluginConfig"]["max_output_length"])  # fmt: skip
    # every option the rule passes is one `runbook npd --help` documents
    help_text = npd([sys.executable, "-m", "runbook", "npd", "--help"]).stdout
    for option in (a for a in args if a.startswith("--")):
        assert option in help_text, option
    assert "gpu-training-fault-monitor.json" in (EXAMPLE / "daemonset-patch.yaml").read_text()


# --- the protocol, through the rule's own command line ---------------------------------------


@pytest.mark.parametrize(
    ("bundle", "status", "starts"),
    [
        ("healthy", 0, "no GPU or PCIe fault (verdict: healthy)"),
        ("gpu-hardware-xid79", 1, "gpu-hardware: "),
        ("real-gpu-hardware-xid48-dbe-gpu-operator-syslog", 1, "gpu-hardware: "),
        ("pcie-fatal-aer", 1, "pcie-error: "),
        # a job's own fault is not the node's
        ("host-oom-cgroup-dir-v2", 0, "no GPU or PCIe fault (verdict: host-memory-oom)"),
        # NVIDIA: restart the job, drain only if it repeats
        ("real-gpu-hardware-xid94-k8s-provider-dmesg-t", 0, "gpu-hardware below the drain bar"),
        # no kernel log, no nvidia-smi: the hardware was never looked at
        ("inconclusive", 2, "gpu-hardware and pcie-error not ruled out"),
    ],
)  # fmt: skip
def test_the_rule_exits_as_npd_expects_with_one_short_line(
    bundle: str, status: int, starts: str
) -> None:
    proc = npd(rule_argv(f"replay://{bundles.path(bundle)}"))
    assert proc.returncode == status, (proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 80, lines
    assert lines[0].startswith(starts), lines[0]


def test_a_dcgm_health_failure_sets_the_condition_and_a_warning_does_not(tmp_path: Path) -> None:
    failure = (DCGM / "health-tree-failure.txt").read_text()
    proc = npd(rule_argv(f"replay://{bundle_with(tmp_path / 'f', {F_HEALTH: failure})}"))
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.startswith("gpu-hardware: DCGM health check")
    warning = (DCGM / "health-legacy-warning.txt").read_text()
    proc = npd(rule_argv(f"replay://{bundle_with(tmp_path / 'w', {F_HEALTH: warning})}"))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.startswith("no GPU or PCIe fault")


def test_the_message_fits_a_smaller_max_output_length() -> None:
    argv = rule_argv(f"replay://{bundles.path('gpu-hardware-xid79')}")
    argv[argv.index("--max-output-length") + 1] = "40"
    proc = npd(argv)
    assert proc.returncode == 1
    (line,) = proc.stdout.splitlines()
    assert len(line) <= 40 and line.endswith("...")


@pytest.mark.parametrize(
    "target",
    ["replay:///nonexistent/bundle", "ssh://root@127.0.0.1:1"],
    ids=["missing-bundle", "refused-connection"],
)
def test_a_check_that_cannot_run_is_unknown_with_its_reason_on_stdout(target: str) -> None:
    argv = rule_argv(target)
    argv += ["--connect-timeout", "2"]
    proc = npd(argv)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    (line,) = proc.stdout.splitlines()
    assert line.startswith("check failed: ") and len(line) <= 80
    assert "Traceback" not in proc.stderr


def test_json_gives_the_same_status_and_message_for_other_health_agents() -> None:
    argv = rule_argv(f"replay://{bundles.path('gpu-hardware-xid79')}")
    text = npd(argv)
    as_json = npd([*argv, "--format", "json"])
    assert as_json.returncode == text.returncode == 1
    assert json.loads(as_json.stdout) == {
        "status": 1, "condition": "NonOK", "message": text.stdout.strip()
    }  # fmt: skip
