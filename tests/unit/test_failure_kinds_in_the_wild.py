"""Five kinds of failure first seen on public incidents, each read from the incident's own
output (tests/bundles/real-*/, every README cites its thread):

1. NCCL 2.0–2.4 socket forms (`include/socket.h:NNN WARN Call to connect failed : …`,
   `INFO bootstrap.cu:28 -> 2`): a socket failure whose first anomaly is the first WARN;
2. NCCL_SOCKET_IFNAME naming an interface the node lacks (`ncclSocketInit: … family 59936 is
   neither AF_INET(2) nor AF_INET6(10)`): network-socket;
3. GPU firmware/RM errors without an Xid (GSP `NV_ERR_RESET_REQUIRED`, `RmInitAdapter failed!
   (0x62:…)`): gpu-hardware, and a drain on the kernel log's word;
4. all_reduce_perf run as a copy per process (nccl-tests without MPI=1): not healthy, the
   verdict says it measured nothing (the one-rank reading of the recovery check, the sweep and
   the A/B comparison: tests/unit/parsers/test_nccl_tests_unmeasured.py);
5. a rank's own bare `Exception:` in untimed logs: peer-rank-exited, first at that line.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from runbook import signatures
from runbook.cli.app import cli
from tests.tools import bundles


def analyze(name: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        cli, ["analyze", str(bundles.path(name)), "--format", "json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def first(v: dict[str, Any]) -> tuple[str, int]:
    fa = v["first_anomaly"] or {}
    return fa.get("source"), fa.get("line")


def line_of(name: str, source: str, number: int) -> str:
    return (bundles.path(name) / source).read_text().splitlines()[number - 1]


# ---- 1. NCCL 2.0–2.4 socket forms ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "source", "line"),
    [
        # NCCL 2.2.13 nccl-tests: the connect timeout, then `bootstrap.cu` return codes
        ("real-network-socket-nccl22-socket-h-connect-timeout",
         "nccl-tests/all_reduce_perf.txt", 10),
        # NCCL 2.3-era under Horovod/TensorFlow: the timeout, then TF's UnknownError
        ("real-network-socket-horovod-nccl-socket-h-361-timeout", "app/train.log", 1),
        # NCCL 2.0: `include/socket.h:185 WARN Call to connect failed : Connection refused`
        ("real-network-socket-nccl20-socket-h-connect-refused", "app/train.log", 1),
    ],
)  # fmt: skip
def test_an_old_nccl_socket_h_connect_failure_is_a_socket_failure_first_at_its_warn(
    name: str, source: str, line: int
) -> None:
    v = analyze(name)
    assert v["root_cause"] == "network-socket", [c["finding"] for c in v["chain"]]
    assert first(v) == (source, line)
    assert " WARN " in line_of(name, source, line)


def test_the_old_forms_are_in_the_catalog_as_nccl_wrote_them() -> None:
    name = "real-network-socket-nccl22-socket-h-connect-timeout"
    lines = (bundles.path(name) / "nccl-tests/all_reduce_perf.txt").read_text().splitlines()
    catalog = signatures.catalog()
    kinds = {n: getattr(catalog.classify(lines[n - 1]), "id", None) for n in (10, 12, 15)}
    assert kinds == {
        10: "socket-connect-failed",  # include/socket.h:360 WARN Call to connect failed : …
        12: "nccl-socket-system-error",  # INFO bootstrap.cu:28 -> 2 [Net]
        15: "peer-closed",  # include/socket.h:371 WARN Connection closed by remote peer
    }


# ---- 2. a socket interface that does not exist ----------------------------------------------


def test_an_ifname_naming_a_missing_interface_is_a_network_socket_misconfiguration() -> None:
    name = "real-network-socket-ifname-eth2-missing-family-59936"
    v = analyze(name)
    assert v["root_cause"] == "network-socket"
    assert first(v) == ("app/train.log", 5)
    assert "is neither AF_INET(2) nor AF_INET6(10)" in line_of(name, "app/train.log", 5)
    assert "node-drain" not in [p["kind"] for p in v["proposals"]]


# ---- 3. GPU firmware/RM errors without an Xid -----------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        # GSP `GspRmAlloc failed … status=0x62` / `[NV_ERR_RESET_REQUIRED]` beside nccl-tests'
        # `CUDA-capable device(s) is/are busy or unavailable`
        "real-gpu-hardware-gsp-reset-required-nccl-tests-busy",
        # `RmInitAdapter failed! (0x62:0x40:2168)`, `(… may need to be reset)`
        "real-gpu-hardware-gsp-wpr2-rminitadapter",
        # RM assertions on a lost RTX 5080 (`NV_ERR_GPU_IN_FULLCHIP_RESET`)
        "real-gpu-hardware-gsp-fullchip-reset-asserts-rtx5080",
    ],
)
def test_gpu_rm_errors_without_an_xid_are_gpu_hardware_on_the_kernel_logs_word(name: str) -> None:
    v = analyze(name)
    assert v["root_cause"] == "gpu-hardware", [c["finding"] for c in v["chain"]]
    assert first(v) == ("dmesg.txt", 1)
    assert "Xid" not in (bundles.path(name) / "dmesg.txt").read_text()
    # the driver will not use the GPU until it is reset: the node's own log proposes the drain
    assert "node-drain" in [p["kind"] for p in v["proposals"]]


def test_the_nccl_tests_busy_error_alone_drains_nothing(tmp_path: Any) -> None:
    # the application's words never drain a node by themselves: without the kernel log the
    # same nccl-tests failure is no hardware verdict
    dest = tmp_path / "busy"
    bundles.materialize("real-gpu-hardware-gsp-reset-required-nccl-tests-busy", dest)
    (dest / "dmesg.txt").unlink()
    (dest / "expected.yaml").unlink()
    result = CliRunner().invoke(cli, ["analyze", str(dest), "--format", "json"])
    v = json.loads(result.stdout)
    assert v["root_cause"] != "gpu-hardware"
    assert "node-drain" not in [p["kind"] for p in v["proposals"]]


# ---- 4. a benchmark that measured nothing ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("real-inconclusive-nccl-tests-no-mpi-h100-busbw-zero", "one-rank communicator"),
        ("real-inconclusive-nccl-tests-no-mpi-rank0-on-two-hosts", "rank 0 is listed by 2"),
        ("real-inconclusive-nccl-tests-no-mpi-per-node-communicators", "on 2 hosts"),
    ],
)
def test_an_all_reduce_perf_of_a_communicator_per_process_is_not_healthy_and_says_why(
    name: str, says: str
) -> None:
    v = analyze(name)
    assert v["root_cause"] == "inconclusive"
    text = "\n".join(c["finding"] for c in v["chain"])
    assert "measured nothing about the fabric" in text and says in text and "MPI=1" in text
    assert first(v)[0] == "nccl-tests/all_reduce_perf.txt"


# ---- 5. a rank's own bare Exception in untimed logs -----------------------------------------


def test_a_ranks_bare_exception_is_peer_rank_exited_first_at_that_line() -> None:
    name = "real-peer-rank-exited-deepspeed-loss-scale-bare-exception"
    v = analyze(name)
    assert v["root_cause"] == "peer-rank-exited"
    assert first(v) == ("app/train.log", 1)
    assert line_of(name, "app/train.log", 1).startswith("Exception: Current loss scale")


def test_a_pytorch_exception_raised_from_line_is_no_rank_exception() -> None:
    # `Exception raised from checkForNCCLErrorsInternal at …` (c10 frames) names no exception
    text = line_of(
        "real-inconclusive-llamafactory-broken-pipe-consequences-only", "app/train.log", 11
    )
    assert text.startswith("Exception raised from")
    assert signatures.catalog().classify(text) is None


@pytest.mark.parametrize(
    ("line", "source"),
    [
        # a VM whose passthrough GPU the driver cannot map (status 0x26), not a reset request
        ("Feb 09 15:47:06 debian kernel: NVRM: GPU 0000:13:00.0: RmInitAdapter failed! "
         "(0x26:0x56:1463)", "https://github.com/NVIDIA/cuda-samples/issues/104"),
        # a PCIe link forced to Gen2 by an unlock script (status 0x22)
        ("[   21.091872] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:894)",
         "https://github.com/Cyridd/cmpunlocker/issues/4"),
    ],
)  # fmt: skip
def test_an_rm_init_failure_with_another_status_is_not_a_reset_request(
    line: str, source: str
) -> None:
    found = signatures.catalog().classify(line, kernel=True)
    assert found is None or found.id != "nvrm-gpu-reset-required", source


# NCCL's own format strings at its release tags (github.com/NVIDIA/nccl), printed with an errno
# string / address family the way NCCL prints them: one reading across the releases
NCCL_SOCKET_FORMS = [
    # v2.3.5-5 src/include/core.h:297/305 (SYSCHECKNTIMES/SYSCHECKVALEXP around connect())
    ("v2.3.5", "Call to connect timeout : Connection refused", "socket-connect-failed"),
    ("v2.3.5", "Call to connect failed : Connection timed out", "socket-connect-failed"),
    # v2.4.8-1 src/include/socket.h:390
    ("v2.4.8", "Connect to 10.0.0.2<45763> failed : Connection timed out", "socket-connect-failed"),
    # the interface named by NCCL_SOCKET_IFNAME does not exist: the address family is garbage
    # v2.8.4-1 src/include/socket.h:370
    ("v2.8.4", "Error : connecting to address with family 0 is neither AF_INET(2) nor "
     "AF_INET6(10)", "socket-no-interface"),
    # v2.12.12-1 src/misc/socket.cc:396
    ("v2.12.12", "Net : connecting to address  with family 59936 is neither AF_INET(2) nor "
     "AF_INET6(10)", "socket-no-interface"),
    # v2.18.6-1 src/misc/socket.cc:713, v2.21.5-1 :716, v2.23.4-1 :718
    ("v2.23.4", "ncclSocketInit: connecting to address  with family 33022 is neither AF_INET(2) "
     "nor AF_INET6(10)", "socket-no-interface"),
]  # fmt: skip


@pytest.mark.parametrize(("tag", "message", "sig"), NCCL_SOCKET_FORMS)
def test_nccls_socket_warnings_read_as_network_socket_in_every_release(
    tag: str, message: str, sig: str
) -> None:
    for line in (f"host:1:2 [0] include/socket.h:1 NCCL WARN {message}", f"h [0] WARN {message}"):
        found = signatures.catalog().classify(line)
        assert found is not None and found.id == sig and found.cause == "network-socket", tag
