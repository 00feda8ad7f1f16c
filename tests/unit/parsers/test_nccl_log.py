from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.nccl_log import classify_warn, parse_nccl_log

from .helpers import result, roundtrip, sample, sample_lines

D = "nccl_log/"


def parse(name: str):  # type: ignore[no-untyped-def]
    return parse_nccl_log(sample_lines(D + name), source=f"nccl/{name}")


@pytest.mark.parametrize(
    ("name", "version", "network", "transports"),
    [
        ("ring-2.4-socket.log", "2.4.8+cuda10.1", "Socket", {"P2P": 4}),
        ("channel-2.10-ib-disabled.log", "2.10.3+cuda11.4", "Socket",
         {"NET/Socket": 4, "P2P": 2}),
        ("channel-2.18-ib-completion-error.log", "2.18.3+cuda12.2", "IB",
         {"P2P": 2, "NET/IB": 3, "SHM": 1}),
        ("shm-2.19.log", "2.19.3+cuda12.3", "Socket", {}),
    ],
)
def test_version_network_and_transports_across_nccl_eras(
    name: str, version: str, network: str, transports: dict[str, int]
) -> None:
    facts = parse(name)
    assert facts.version == version
    assert facts.network == network
    assert facts.transports == transports


def test_an_old_log_says_no_ib_device_and_which_socket_interface() -> None:
    facts = parse("ring-2.4-socket.log")
    assert facts.ib_no_device is True
    assert facts.socket_interfaces == ("eth0:10.0.0.1<0>",)
    assert facts.init_complete_ranks == (0, 1, 2, 3) and facts.nranks == 4


def test_environment_settings_are_recorded() -> None:
    facts = parse("channel-2.10-ib-disabled.log")
    assert facts.env == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    assert facts.bootstrap_interfaces == ("eth0:10.20.3.17<0>",)


def test_ib_devices_and_a_completion_error_with_remote_result_code() -> None:
    facts = parse("channel-2.18-ib-completion-error.log")
    assert facts.ib_devices == ("mlx5_0:1/IB", "mlx5_1:1/IB", "mlx5_2:1/RoCE")
    (warn,) = facts.warns
    assert warn.category == "ib" and warn.line == 16 and warn.host == "gpu-node-11"
    assert warn.location == "transport/net_ib.cc:1296"
    assert facts.first_result_code == 6 and facts.result_codes == {"6": 3}
    assert facts.init_complete_ranks == (8,)


@pytest.mark.parametrize(
    ("name", "category", "code", "size"),
    [
        ("shm-2.19.log", "shm", 2, 9637892),
        ("shm-fallocate-2.12.log", "shm", 2, None),
        ("cuda-oom-2.14.log", "cuda-oom", 1, None),
        ("socket-refused-2.21.log", "socket", 2, None),
    ],
)
def test_warns_are_classified_with_result_codes(
    name: str, category: str, code: int, size: int | None
) -> None:
    facts = parse(name)
    assert facts.warns[0].category == category
    assert facts.first_result_code == code
    assert facts.warns[0].size_bytes == size
    assert all(w.source == f"nccl/{name}" for w in facts.warns)


def test_calloc_size_is_kept() -> None:
    facts = parse("cuda-oom-2.14.log")
    assert [w.size_bytes for w in facts.warns] == [None, 6291456]
    assert facts.warn_categories == {"cuda-oom": 2}


@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("Call to ibv_reg_mr failed with error Cannot allocate memory", "ib"),
        ("NET/IB : Got completion with error 12, opcode 1, len 32768, vendor err 129", "ib"),
        ("Connect to 10.0.0.2<45678> failed : Connection refused", "socket"),
        ("Failed to CUDA host alloc 8388608 bytes", "host-alloc"),
        ("Cuda failure 'unknown error'", "cuda"),
        ("Something else", "other"),
    ],
)
def test_warn_messages_are_classified(message: str, category: str) -> None:
    assert classify_warn(message) == category


def test_the_adapter_merges_nccl_logs_and_nccl_lines_of_app_logs() -> None:
    fn = registry.get("nccl_log").func
    files = {
        "nccl/a.log": result("nccl/a.log", sample(D + "channel-2.10-ib-disabled.log")),
        "app/rank-2.log": result("app/rank-2.log", sample("applog/tf-incident/rank-2.log")),
        "app/rank-1.log": result("app/rank-1.log", sample("applog/tf-incident/rank-1.log")),
    }
    facts = roundtrip(fn(files, {}))
    assert facts["collected"] and facts["sources"] == ["nccl/a.log", "app/rank-2.log"]
    assert facts["ib_disabled"] is True and facts["network"] == "Socket"
    assert facts["first_result_code"] == 1
    assert facts["first_result_meaning"] == "unhandled cuda error"
    assert facts["warns"][0]["source"] == "app/rank-2.log"
    assert fn({}, {})["collected"] is False


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=120).map(lambda s: "h:1:2 [0] NCCL INFO " + s) | st.text(),
                max_size=30))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    facts = parse_nccl_log(lines)
    assert isinstance(facts.transports, dict) and isinstance(facts.warns, tuple)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 3000))
def test_a_truncated_log_never_raises(cut: int) -> None:
    parse_nccl_log(sample(D + "channel-2.18-ib-completion-error.log")[:cut].splitlines())
