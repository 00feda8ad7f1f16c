"""`runbook npd` speaks node-problem-detector's custom-plugin protocol, and the shipped NPD
monitor (examples/node-problem-detector/) runs it as NPD would: its rule's command line, as a
process, against recorded bundles (replay://), a target that cannot be reached (loopback), and
real SSH test hosts dressed as nodes whose NVIDIA driver is gone or which have no GPU at all
(their `nvidia-smi`, `lspci` and `dmesg` are shims printing the real tools' words; a tool with
no shim is really absent: this machine has no nvidia-smi or dcgmi, so the shell says exit 127)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.harness import TestHost
from tests.sweep import fleet
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


# --- real hosts: a GPU node whose driver is gone, and a node with no GPU ----------------------

#: `lspci -nn` of a GPU node (8 NVIDIA 3D controllers) and of a CPU node (none)
GPU_LSPCI = (ROOT / "tests" / "scenarios" / "node-data" / "healthy-8gpu" / "lspci.txt").read_text()
CPU_LSPCI = "\n".join((
    "00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 20)",
    "00:1f.0 ISA bridge [0601]: Intel Corporation C621 Series Chipset LPC/eSPI Controller "
    "[8086:a1c3] (rev 09)",
    "18:00.0 Ethernet controller [0200]: Intel Corporation Ethernet Controller E810-C for QSFP "
    "[8086:1592] (rev 02)",
    "a0:00.0 Ethernet controller [0200]: Amazon.com, Inc. Elastic Network Adapter (ENA) "
    "[1d0f:ec20]",
    "",
))  # fmt: skip
#: what nvidia-smi prints, on standard output, when the kernel module is not loaded (exit 9)
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
    "that the latest NVIDIA driver is installed and running.\n"
)


def shim(text: str, rc: int = 0, stream: str = "") -> str:
    quoted = text.replace("'", "'\\''")
    return f"#!/bin/sh\nprintf '%s' '{quoted}'{stream}\nexit {rc}\n"


def node(ssh_host: Any, name: str, *, lspci: str | None, nvidia_smi: str | None = None) -> TestHost:
    """A host with a quiet kernel log, the given lspci (None: `lspci: not found`, exit 127,
    as on a node without pciutils) and nvidia-smi (None: none installed)."""
    host: TestHost = ssh_host(name)
    host.write_shim("dmesg", shim(fleet.kernel_log()))
    host.write_shim("kubectl", fleet.KUBECTL)
    host.write_shim("journalctl", fleet.JOURNALCTL)
    if lspci is None:
        host.write_shim("lspci", shim("sh: 1: lspci: not found\n", 127, " >&2"))
    else:
        host.write_shim("lspci", shim(lspci))
    if nvidia_smi is not None:
        host.write_shim("nvidia-smi", nvidia_smi)
    return host


def npd_over_ssh(host: TestHost, known_hosts: Path, client_key: Any) -> tuple[int, str]:
    argv = rule_argv(f"ssh://root@{host.address}:{host.port}")
    argv += ["--known-hosts", str(known_hosts), "--identity", str(client_key.private_path),
             "--connect-timeout", "5"]  # fmt: skip
    proc = npd(argv)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 80, (lines, proc.stderr[-2000:])
    return proc.returncode, lines[0]


@pytest.mark.ssh
def test_a_gpu_node_without_nvidia_smi_sets_the_condition_not_ok(
    ssh_host: Any, known_hosts: Path, client_key: Any
) -> None:
    host = node(ssh_host, "no-driver", lspci=GPU_LSPCI)
    status, line = npd_over_ssh(host, known_hosts, client_key)
    assert (status, line) == (
        1, "NVIDIA driver missing: nvidia-smi not found; 8 NVIDIA GPU(s) on the PCI bus"
    )  # fmt: skip


@pytest.mark.ssh
def test_a_gpu_node_whose_driver_is_not_loaded_sets_the_condition_not_ok(
    ssh_host: Any, known_hosts: Path, client_key: Any
) -> None:
    host = node(ssh_host, "unloaded", lspci=GPU_LSPCI, nvidia_smi=shim(NO_DRIVER, 9))
    status, line = npd_over_ssh(host, known_hosts, client_key)
    assert (status, line) == (
        1, "NVIDIA driver not loaded: nvidia-smi exit 9; 8 NVIDIA GPU(s) on the PCI bus"
    )  # fmt: skip


@pytest.mark.ssh
def test_a_node_with_no_gpu_on_its_bus_is_ok_and_says_there_is_no_gpu(
    ssh_host: Any, known_hosts: Path, client_key: Any
) -> None:
    host = node(ssh_host, "cpu-only", lspci=CPU_LSPCI)
    status, line = npd_over_ssh(host, known_hosts, client_key)
    assert status == 0, line
    assert line.startswith("no GPU here (no NVIDIA GPU on the PCI bus), no PCIe fault"), line


@pytest.mark.ssh
def test_no_nvidia_smi_and_no_lspci_is_unknown_not_ok(
    ssh_host: Any, known_hosts: Path, client_key: Any
) -> None:
    host = node(ssh_host, "blind", lspci=None)
    status, line = npd_over_ssh(host, known_hosts, client_key)
    assert status == 2, line
    assert line.startswith("nvidia-smi not found, and neither lspci nor node labels"), line


NVIDIA_SMI_FILES = ("nvidia-smi-L.txt", "nvidia-smi-query.csv", "nvidia-smi-q.txt",
                    "nvidia-smi-topo-m.txt", "nvidia-smi-topo-p2p-r.txt",
                    "nvidia-smi-topo-p2p-w.txt", "nvidia-smi-nvlink.txt")  # fmt: skip


def bundle_where_nvidia_smi(
    tmp_path: Path, rc: int, said: str, *, label: bool, lspci: bool
) -> Path:
    """The healthy bundle as collected from a node whose nvidia-smi exited `rc` saying `said`
    (as DESIGN §4 records a probe: the file, its `.err` and `.rc`); `label` keeps node.json,
    labelled by GPU feature discovery `nvidia.com/gpu.present=true`, `lspci` keeps lspci.txt."""
    root = bundle_with(tmp_path, {})
    for name in NVIDIA_SMI_FILES:
        (root / name).write_text("" if rc == 127 else said)
        (root / f"{name}.err").write_text(said if rc == 127 else "")
        (root / f"{name}.rc").write_text(f"{rc}\n")
    if not lspci:
        (root / "lspci.txt").unlink()
    node_json = json.loads((root / "node.json").read_text())
    node_json["metadata"]["labels"]["nvidia.com/gpu.present"] = "true"
    (root / "node.json").write_text(json.dumps(node_json))
    if not label:
        (root / "node.json").unlink()
    return root


@pytest.mark.parametrize(
    ("rc", "said", "label", "lspci", "status", "line"),
    [
        (127, "sh: 1: nvidia-smi: not found\n", True, False, 1,
         "NVIDIA driver missing: nvidia-smi not found; labelled nvidia.com/gpu.present"),
        (18, "Failed to initialize NVML: Driver/library version mismatch\n", False, True, 1,
         "NVIDIA driver broken: nvidia-smi exit 18; 8 NVIDIA GPU(s) on the PCI bus"),
        (6, "No devices were found\n", False, True, 1,
         "NVIDIA driver sees no GPU: nvidia-smi exit 6; 8 NVIDIA GPU(s) on the PCI bus"),
        (127, "sh: 1: nvidia-smi: not found\n", False, False, 2,
         "nvidia-smi not found, and neither lspci nor node labels say if a GPU is here"),
    ],
    ids=["labelled-gpu-node", "version-mismatch", "no-devices", "nothing-says"],
)  # fmt: skip
def test_a_recorded_driver_failure_is_judged_by_what_says_the_node_has_a_gpu(
    tmp_path: Path, rc: int, said: str, label: bool, lspci: bool, status: int, line: str
) -> None:
    bundle = bundle_where_nvidia_smi(tmp_path, rc, said, label=label, lspci=lspci)
    proc = npd(rule_argv(f"replay://{bundle}"))
    assert (proc.returncode, proc.stdout.strip()) == (status, line), proc.stderr[-2000:]


# --- a tenant's words never drain a node (security round 3) ---------------------------------


def _tenant_says_ecc(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    """The healthy node, its kernel log, nvidia-smi and DCGM clean, with one line a job
    printed: what a tenant can write into its own log."""
    root = bundle_with(tmp_path, extra or {})
    log = root / "app" / "rank-0.log"
    line = "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    log.write_text(log.read_text() + line)
    return root


def test_a_job_that_prints_an_ecc_error_gets_no_drain_and_npd_is_not_nonok(tmp_path: Path) -> None:
    bundle = _tenant_says_ecc(tmp_path)
    analyzed = subprocess.run(
        [sys.executable, "-m", "runbook", "analyze", str(bundle), "--format", "json"],
        capture_output=True, text=True, timeout=120, check=True, cwd=ROOT,
    )  # fmt: skip
    verdict = json.loads(analyzed.stdout)
    assert verdict["root_cause"] == "gpu-hardware"  # the application's words may name it
    kinds = {p["kind"]: p for p in verdict["proposals"]}
    assert "node-drain" not in kinds, kinds
    assert "only the application's own words name gpu-hardware" in kinds["collect-more"]["summary"]
    proc = npd(rule_argv(f"replay://{bundle}"))
    assert proc.returncode == 2, proc.stdout  # Unknown: never NonOK on a tenant's line
    assert proc.stdout.startswith("gpu-hardware named only by the application")


def test_the_same_line_with_the_kernel_log_showing_the_fault_drains(tmp_path: Path) -> None:
    """Corroborated by the node itself (an Xid in its kernel log): the drain is proposed."""
    dmesg = (bundles.path("healthy") / "dmesg.txt").read_text() + (
        "[Mon Mar  2 03:00:01 2026] NVRM: Xid (PCI:0000:18:00): 48, pid=4242, name=python3, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
        "at partition 0, subpartition 0.\n"
    )
    bundle = _tenant_says_ecc(tmp_path, {"dmesg.txt": dmesg})
    proc = npd(rule_argv(f"replay://{bundle}"))
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.startswith("gpu-hardware")
