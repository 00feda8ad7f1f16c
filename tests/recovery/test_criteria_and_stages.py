"""The pure parts of the recovery check: thresholds, pass criteria, HCA details, stages, the
stop rule's verdict on a stage report (all on real-format text; no I/O but the shipped table)."""

from __future__ import annotations

from typing import Any

import pytest

from runbook.errors import UsageError
from runbook.parsers import busbw_thresholds as thresholds
from runbook.parsers.ibv_devinfo import parse_ibv_devinfo
from runbook.parsers.verify_criteria import Expectation, RunInput, evaluate
from runbook.verify.stages import (
    ReplayStage,
    judge,
    ladder,
    parse_headroom,
    parse_knobs,
    render_command,
    stages_from,
)

MIB = 1 << 20

# ---- thresholds


@pytest.mark.parametrize(
    ("name", "topology", "gpus", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", "nvlink", 8, 228),
        ("NVIDIA H100 80GB HBM3", "nvlink", 8, 460),
        ("NVIDIA H200", "nvlink", 8, 431),
        ("Tesla V100-SXM2-32GB", "nvlink", 8, 110),
        ("NVIDIA A100 80GB PCIe", "pcie", 8, 17),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "pcie", 8, 35),
    ],
)
def test_the_shipped_table_gives_each_models_figure(
    name: str, topology: str, gpus: int, expected: float
) -> None:
    found = thresholds.lookup(name, topology, gpus)
    assert found.busbw_gbps == expected, found


def test_an_unknown_node_has_no_threshold_and_says_why_and_an_override_wins() -> None:
    none = thresholds.lookup("NVIDIA H100 80GB HBM3", "nvlink", 4)
    assert none.busbw_gbps is None and "4× NVIDIA H100 80GB HBM3 over nvlink" in none.source
    assert thresholds.lookup(None, "nvlink", 8).source.startswith("unknown GPU model")
    two = thresholds.lookup("NVIDIA H100 80GB HBM3", "nvlink", 8, nodes=2)
    assert two.busbw_gbps is None and "2 nodes" in two.source
    given = thresholds.lookup("NVIDIA H100 80GB HBM3", "nvlink", 4, override=300.0)
    assert given.busbw_gbps == 300.0 and given.source == "given (--var min_busbw)"


def test_a_malformed_table_entry_is_named() -> None:
    with pytest.raises(thresholds.ThresholdError, match=r"thresholds\[0\]: topology"):
        thresholds.parse_table({"format": 1, "thresholds": [
            {"model": "H100", "topology": "nvswitch", "gpus": 8, "busbw_gbps": 1}]})


def test_topology_is_nvlink_only_when_every_pair_has_nvlink() -> None:
    gpus = ["GPU0", "GPU1", "GPU2"]
    assert thresholds.topology_of({"GPU0-GPU1": "NV18", "GPU0-GPU2": "NV18",
                                   "GPU1-GPU2": "NV18"}, gpus) == "nvlink"
    # NVLink bridges between one pair only: the ring still crosses PCIe
    assert thresholds.topology_of({"GPU0-GPU1": "NV12", "GPU0-GPU2": "SYS",
                                   "GPU1-GPU2": "SYS"}, gpus) == "pcie"
    assert thresholds.topology_of({}, gpus) is None


# ---- criteria

HEADER = """\
# nThread 1 nGpus 1 minBytes 8388608 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  61001 on gpu-a device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  61002 on gpu-b device  0 [0x18] NVIDIA H100 80GB HBM3
gpu-a:61001:61010 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
NCCL version 2.21.5+cuda12.4
gpu-a:61001:61010 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
gpu-a:61001:61010 [0] NCCL INFO Using network Socket
gpu-b:61002:61011 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>
gpu-a:61001:61010 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via NET/Socket/0
gpu-b:61002:61011 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] via NET/Socket/0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""  # noqa: E501


def run_text(busbw: float, wrong: int = 0, *, footer: bool = True, status: int = 0) -> RunInput:
    rows = [f"  1073741824     268435456     float     sum      -1   1000.0  {busbw:.2f}  "
            f"{busbw:.2f}      0   1000.0  {busbw:.2f}  {busbw:.2f}  {wrong:5d}"]
    tail = [f"# Out of bounds values : {wrong} {'FAILED' if wrong else 'OK'}",
            f"# Avg bus bandwidth    : {busbw:.4f} ", "#"] if footer else []
    text = HEADER + "\n".join([*rows, *tail, f"# runbook: exit status {status}"]) + "\n"
    return RunInput("nccl-tests/recovery-1.txt", text.splitlines())


def expect(nodes: int = 2, **kw: Any) -> Expectation:
    return Expectation(threshold=thresholds.Threshold(40.0, "given", "H100", "nvlink", 1, nodes),
                       ranks=2, nodes=nodes, topology="nvlink", **kw)


def test_a_cross_node_run_slowed_by_the_socket_transport_points_at_rdma() -> None:
    out = evaluate([run_text(11.0)], expect(hosts=["gpu-a", "gpu-b"]))
    assert out["failed"] == ["bandwidth"] and out["cause"] == "rdma-misconfigured"
    assert out["fixed_set"]["hosts"] == ["gpu-a", "gpu-b"]
    assert out["fixed_set"]["nccl_versions"] == ["2.21.5+cuda12.4"]


def test_wrong_values_after_a_complete_run_blame_the_hardware_not_completion() -> None:
    """nccl-tests exits 1 after its footer when values were wrong: the run completed."""
    out = evaluate([run_text(45.0, wrong=7, status=1)], expect())
    assert out["criteria"]["completed"]["passed"] is True
    assert out["failed"] == ["correct"] and out["cause"] == "gpu-hardware"
    assert out["evidence"][0]["source"] == "nccl-tests/recovery-1.txt"


def test_a_run_without_footer_did_not_complete_and_is_not_judged_for_bandwidth() -> None:
    out = evaluate([run_text(45.0, footer=False, status=3)], expect())
    assert out["failed"][0] == "completed" and out["cause"] == "inconclusive"
    assert out["criteria"]["bandwidth"]["passed"] is None


def test_fixed_nics_and_version_the_run_did_not_use_fail_the_fixed_set() -> None:
    out = evaluate([run_text(45.0)], expect(nics=["mlx5_0"], nccl_version="2.23.4",
                                            hosts=["gpu-a", "gpu-c"]))
    detail = out["criteria"]["fixed-set"]["detail"]
    assert "not the fixed set gpu-a, gpu-c" in detail
    assert "not the fixed NICs mlx5_0" in detail and "not the fixed 2.23.4" in detail


IBV = """\
hca_id:	mlx5_0
	transport:			InfiniBand (0)
	fw_ver:				28.39.1002
		port:	1
			state:			PORT_ACTIVE (4)
			max_mtu:		4096 (5)
			active_mtu:		4096 (5)
			link_layer:		Ethernet
			GID[  0]:		fe80:0000:0000:0000:0a2b:3cff:fe4d:5e6f, RoCE v1
			GID[  3]:		0000:0000:0000:0000:0000:ffff:0a00:0001, RoCE v2
hca_id:	mlx5_1
		port:	1
			state:			PORT_ACTIVE (4)
			active_mtu:		1024 (3)
			link_layer:		Ethernet
"""


def test_hca_ports_give_mtu_and_gids_and_unequal_mtus_fail_the_fixed_set() -> None:
    ports = parse_ibv_devinfo(IBV.splitlines())
    assert [(p.device, p.port, p.active_mtu) for p in ports] == [("mlx5_0", 1, 4096),
                                                               ("mlx5_1", 1, 1024)]
    assert ports[0].gids[3].endswith("(RoCE v2)")
    out = evaluate([run_text(45.0)], expect(ports=ports, gid_index="3"))
    assert "active MTUs differ: 1024, 4096" in out["criteria"]["fixed-set"]["detail"]
    assert out["fixed_set"]["gids"] == {"mlx5_0/1": "0000:0000:0000:0000:0000:ffff:0a00:0001 "
                                                    "(RoCE v2)"}


# ---- stages


def test_knobs_stages_and_the_ladder_back_to_the_original() -> None:
    assert parse_knobs("workers=2, prefetch=4 batch=64") == {"workers": "2", "prefetch": "4",
                                                             "batch": "64"}
    with pytest.raises(UsageError, match="expected NAME=VALUE"):
        parse_knobs("workers")
    assert [s.knobs for s in stages_from(["workers=1;workers=2", "workers=4"])] == [
        {"workers": "1"}, {"workers": "2"}, {"workers": "4"}]
    assert [s.label for s in ladder({"batch": "64", "workers": "8", "prefetch": "2"})] == [
        "batch=16, workers=0, prefetch=1", "batch=16, workers=8, prefetch=1",
        "batch=16, workers=8, prefetch=2", "batch=64, workers=8, prefetch=2"]
    # a knob already at its start value adds no stage
    assert len(ladder({"workers": "0", "prefetch": "1", "batch": "1"})) == 1


def test_the_job_command_gets_each_value_as_one_shell_word() -> None:
    stage = ReplayStage(2, {"workers": "2", "batch": "64; rm -rf /"})
    assert render_command("train --w {workers} --b {batch} --s {stage}", stage) == \
        "train --w 2 --b '64; rm -rf /' --s 2"
    with pytest.raises(UsageError, match=r"uses \{prefetch\} but stage 2"):
        render_command("train --p {prefetch}", stage)
    assert stage.env()["RUNBOOK_REPLAY_WORKERS"] == "2"


def test_headroom_is_a_share_or_a_size() -> None:
    assert parse_headroom("15%").pct == 15.0
    assert parse_headroom("256Mi").bytes == 256 * MIB
    for bad in ("0%", "100%", "x%", "-1"):
        with pytest.raises(UsageError):
            parse_headroom(bad)


def report(outcome: str, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "format": 1, "cgroup_version": 1, "container": "runbook-replay",
        "limit_bytes": 1280 * MIB, "stop_at_bytes": 1088 * MIB, "outcome": outcome,
        "exit_status": 0 if outcome == "completed" else None, "elapsed_s": 4.0,
        "peak": {"kernel_bytes": 900 * MIB, "kernel_reset": True,
                 "working_set_bytes": 890 * MIB, "at_s": 3.0},
        "snapshot": {"stat": "total_rss 700000000\ntotal_cache 4096\ntotal_shmem 0\n",
                     "containers": {}},
        "containers": {}, "counters_before": {"failcnt": 0, "oom_kill": 0},
        "counters_after": {"failcnt": 0, "oom_kill": 0},
        "first_collective": {"at_s": 2.5, "line": "first all_reduce ok"}, "output_tail": [],
    }  # fmt: skip
    base.update(extra)
    return base


def test_judging_a_stage_report() -> None:
    stage = ReplayStage(3, {"workers": "2"})
    ok = judge(stage, report("completed"))
    assert ok.passed and "ran to completion: peak 890.0 MiB of 1.2 GiB" in ok.reason
    assert ok.summary["anon_bytes"] == 700000000 and ok.summary["first_collective_s"] == 2.5
    stopped = judge(stage, report("stopped-at-headroom", guard_hit=True))
    assert not stopped.passed and "held at the replay's guard first" in stopped.reason
    killed = judge(stage, report("completed", counters_after={"failcnt": 3, "oom_kill": 1}))
    assert not killed.passed and "raise the headroom" in killed.reason
    failed = judge(stage, report("failed", exit_status=1, output_tail=["ValueError: shard"]))
    assert not failed.passed and "exited 1 on its own" in failed.reason
    assert "ValueError: shard" in failed.reason
    broken = judge(stage, {"error": "not a memory cgroup"})
    assert not broken.passed and "could not run: not a memory cgroup" in broken.reason


def test_bandwidth_is_judged_on_the_average_line_not_the_best_row() -> None:
    """Rows at 20 and 60 GB/s with `# Avg bus bandwidth : 38`: the peak (60) clears a 40 GB/s
    threshold, the average the check is specified on does not; both are reported."""
    text = (HEADER
            + "     8388608       2097152     float     sum      -1    900.0   9.32  20.00      0"
              "    900.0   9.32  20.00      0\n"
            + "  1073741824     268435456     float     sum      -1   1000.0  60.00  60.00      0"
              "   1000.0  60.00  60.00      0\n"
            + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 38.0000 \n#\n"
            + "# runbook: exit status 0\n")
    out = evaluate([RunInput("nccl-tests/recovery-1.txt", text.splitlines())], expect(nodes=1))
    assert out["criteria"]["bandwidth"]["passed"] is False
    assert "lowest average busbw 38.0 GB/s < 40 GB/s" in out["criteria"]["bandwidth"]["detail"]
    assert "peak 60.0 GB/s" in out["criteria"]["bandwidth"]["detail"]
    assert out["bandwidth"]["lowest_avg"] == 38.0 and out["bandwidth"]["lowest_peak"] == 60.0
    passing = evaluate([RunInput("nccl-tests/recovery-1.txt", text.splitlines())],
                       _expect_at(37.0))
    assert passing["criteria"]["bandwidth"]["passed"] is True


def _expect_at(gbps: float) -> Expectation:
    return Expectation(threshold=thresholds.Threshold(gbps, "given", "H100", "nvlink", 1, 1),
                       ranks=2, nodes=1, topology="nvlink")
