"""An error line no signature names (a new NCCL WARN, a driver message nobody catalogued) is an
anomaly in time order like any other: before a known consequence it is the first anomaly, and
the verdict says `unrecognized` with the line (an optional field; root_cause stays one of
DESIGN §5's) instead of naming the consequence. Healthy nodes stay healthy: ordinary driver
output, corrected AER reports and err-level firmware lines are no such line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from runbook.cli.app import main
from runbook.parsers import errorlines
from tests.tools import bundles

PEER_CLOSED = (
    "[2026-03-04 10:12:09] gpu-node-2:4712:4791 [1] misc/socket.cc:49 NCCL WARN Net : "
    "Connection closed by remote peer 10.0.0.1<34567>"
)
UNKNOWN_DRIVER = (
    "[Wed Mar  4 10:11:58 2026] NVRM: GPU 0000:3b:00.0: _kbusSetupFooBar: operation failed "
    "with status NV_ERR_SOMETHING_NEW"
)
DRIVER_LOADING = (
    "[Wed Mar  4 10:11:50 2026] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  "
    "Tue Mar  5 22:23:56 UTC 2024"
)


def bundle(tmp_path: Path, files: dict[str, list[str]]) -> Path:
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "bundle.yaml").write_text(
        "format: 1\nnode: gpu-node-1\ncollected_at: '2026-03-04T10:40:00+00:00'\n"
    )
    for name, lines in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("\n".join(lines) + "\n")
    return root


def analyze(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["analyze", str(path), "--format", "json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_an_unknown_driver_message_before_a_lost_peer_is_the_first_anomaly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = bundle(tmp_path, {
        "dmesg.txt": [DRIVER_LOADING, UNKNOWN_DRIVER],
        "app/rank-0.log": ["2026-03-04 10:12:01,000 INFO starting", PEER_CLOSED],
    })  # fmt: skip
    v = analyze(path, capsys)
    assert v["root_cause"] == "inconclusive"
    assert (v["first_anomaly"]["source"], v["first_anomaly"]["line"]) == ("dmesg.txt", 2)
    assert v["unrecognized"] == {"source": "dmesg.txt", "line": 2, "text": UNKNOWN_DRIVER}
    first_link = v["chain"][0]
    assert first_link["finding"].startswith("unrecognized: ")
    assert "NV_ERR_SOMETHING_NEW" in first_link["finding"]
    assert first_link["evidence"][0]["source"] == "dmesg.txt"
    assert any("Connection closed" in c["finding"] for c in v["chain"][1:])


def test_an_unknown_nccl_warn_before_a_lost_peer_in_untimed_logs_is_unrecognized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warn = (
        "gpu-node-1:4711:4790 [0] transport/net_ib.cc:1234 NCCL WARN NET/IB : "
        "qp 0x1234 entered a state nobody has named yet (code 77)"
    )
    path = bundle(tmp_path, {
        "app/rank-0.log": ["gpu-node-1:4711:4790 [0] NCCL INFO Bootstrap : Using eth0", warn],
        "app/rank-1.log": [PEER_CLOSED.split("] ", 1)[1]],
    })  # fmt: skip
    v = analyze(path, capsys)
    assert v["root_cause"] == "inconclusive"
    assert (v["first_anomaly"]["source"], v["first_anomaly"]["line"]) == ("app/rank-0.log", 2)
    assert v["unrecognized"]["source"] == "app/rank-0.log"
    assert v["unrecognized"]["line"] == 2
    assert v["chain"][0]["finding"] == f"unrecognized: {warn}"


def test_an_unknown_line_after_the_lost_peer_is_not_the_first_anomaly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    later = UNKNOWN_DRIVER.replace("10:11:58", "10:13:30")
    path = bundle(tmp_path, {
        "dmesg.txt": [DRIVER_LOADING, later],
        "app/rank-0.log": ["2026-03-04 10:12:01,000 INFO starting", PEER_CLOSED],
    })  # fmt: skip
    v = analyze(path, capsys)
    assert v["root_cause"] == "inconclusive"
    assert v["first_anomaly"]["source"] == "app/rank-0.log"
    assert "unrecognized" not in v
    assert not any(c["finding"].startswith("unrecognized: ") for c in v["chain"])


def test_a_named_cause_stands_after_an_earlier_unknown_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oom = (
        "[2026-03-04 10:12:05] gpu-node-1:4711:4790 [0] include/alloc.h:48 NCCL WARN Cuda "
        "failure 'out of memory'"
    )
    path = bundle(tmp_path, {
        "dmesg.txt": [DRIVER_LOADING, UNKNOWN_DRIVER],
        "app/rank-0.log": ["2026-03-04 10:12:01,000 INFO starting", oom],
    })  # fmt: skip
    v = analyze(path, capsys)
    assert v["root_cause"] == "gpu-memory-oom"
    assert v["first_anomaly"]["source"] == "app/rank-0.log"
    assert "unrecognized" not in v


def test_a_healthy_node_with_driver_output_a_storm_and_firmware_errors_stays_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = bundles.materialize("healthy", tmp_path / "healthy")
    dmesg = path / "dmesg.txt"
    extra = [
        "[    7.000000] NVRM: GPU at PCI:0000:3b:00: GPU-5d4f0001-7a2c-11ee-9b3d-0242ac120002",
        "[    7.100000] NVRM: Persistence mode is deprecated and will be removed in a future "
        "release. Please use nvidia-persistenced instead.",
        "[    7.200000] ACPI BIOS Error (bug): Could not resolve symbol [\\_SB.PR00._CPC], "
        "AE_NOT_FOUND (20230628/psargs-330)",
        "[    7.300000] pcieport 0000:3a:01.0: AER: Corrected error received: 0000:3b:00.0",
        "[    7.300001] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, type=Physical "
        "Layer, (Receiver ID)",
        "[    7.300002] nvidia 0000:3b:00.0:   device [10de:2335] error status/mask=00000001/"
        "0000e000",
        "[    7.300003] nvidia 0000:3b:00.0:    [ 0] RxErr                  (First)",
    ]
    dmesg.write_text(dmesg.read_text() + "\n".join(extra) + "\n")
    v = analyze(path, capsys)
    assert v["root_cause"] == "healthy", [c["finding"] for c in v["chain"]]
    assert "unrecognized" not in v


@pytest.mark.parametrize(
    ("raw", "is_error"),
    [
        ("[ 5.1] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x22:0x56:667)", True),
        ("[ 5.1] NVRM: GPU0 _kgspRpcRecvPoll: GSP RPC timed out", True),
        ("[ 5.1] NVRM: GPU0 rpcRmApiControl_GSP: status NV_ERR_GPU_IS_LOST", True),
        ("[ 5.1] mlx5_core 0000:0c:00.0: mlx5_cmd_check: CREATE_QP(0x500) failed", True),
        ("kern  :crit  : [ 5.1] watchdog: BUG: soft lockup - CPU#3 stuck for 22s!", True),
        ("<2>[ 5.1] something critical happened", True),
        ("[ 5.1] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15", False),
        ("[ 5.1] NVRM: GPU at PCI:0000:1b:00: GPU-5d4f1000-7a2c-11ee-9b3d-0242ac120002", False),
        ("[ 5.1] pcieport 0000:00:01.0: AER: Corrected error received: 0000:1b:00.0", False),
        ("kern  :err   : [ 5.1] ACPI BIOS Error (bug): Could not resolve symbol", False),
        ("[ 5.1] systemd[1]: Failed to start Load Kernel Modules.", False),
        ("[ 5.1] nvidia-modeset: ERROR: GPU:0: Idling display engine timed out", False),
        ("[ 5.1] nvidia-nvlink: nvlink_lib_initialize: failed to register link", True),
    ],
)
def test_which_kernel_lines_are_error_lines_no_signature_names(raw: str, is_error: bool) -> None:
    message = raw.split("] ", 1)[1]
    assert errorlines.kernel_error(raw, message) is is_error
    # the pre-filter hands every such line to the parser (a severity's words are keywords of
    # a log that shows severities)
    words = (*errorlines.KEYWORDS, *errorlines.severity_keywords(raw))
    assert not is_error or any(word in raw for word in words)


SOFT_LOCKUP = "[    5.000000] watchdog: BUG: soft lockup - CPU#3 stuck for 22s!"


@pytest.mark.parametrize(
    ("lines", "found"),
    [(["kern  :info  : [    0.000000] Linux version 6.8.0", f"kern  :crit  : {SOFT_LOCKUP}"], [2]),
     (["<6>[    0.000000] Linux version 6.8.0", f"<2>{SOFT_LOCKUP}"], [2]),
     (["[    0.000000] Linux version 6.8.0", SOFT_LOCKUP], [])],
)  # fmt: skip
def test_a_log_that_shows_severities_has_its_critical_lines_read_by_the_pre_filter(
    tmp_path: Path, lines: list[str], found: list[int]
) -> None:
    from runbook.parsers import dmesg
    from runbook.transports.base import CommandResult

    path = tmp_path / "dmesg.txt"
    path.write_text("\n".join(lines) + "\n")
    result = CommandResult("dmesg.txt", "", source_path=str(path))
    fast = dmesg.parse_dmesg(dmesg.candidate_lines(result), numbered=True)
    assert [u.line for u in fast.unrecognized] == found
    assert fast.unrecognized == dmesg.parse_dmesg(lines).unrecognized


def test_the_unrecognized_field_round_trips_through_the_typed_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runbook.verdict import Verdict

    path = bundle(tmp_path, {"dmesg.txt": [DRIVER_LOADING, UNKNOWN_DRIVER]})
    v = analyze(path, capsys)
    assert v["unrecognized"]["line"] == 2
    assert Verdict.from_json(v).to_json() == v
    shutil.rmtree(path)
