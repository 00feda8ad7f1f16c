from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.nvidia_smi import (
    parse_list,
    parse_nvlink,
    parse_p2p,
    parse_q,
    parse_query,
    parse_topo,
)

from .helpers import result, roundtrip, sample, sample_lines

D = "nvidia_smi/"


def incident_files() -> dict[str, Any]:
    names = {
        "nvidia-smi-L.txt": "incident-L.txt",
        "nvidia-smi-query.csv": "incident-query.csv",
        "nvidia-smi-q.txt": "q-blackwell-healthy.txt",
        "nvidia-smi-topo-m.txt": "incident-topo-m.txt",
        "nvidia-smi-topo-p2p-r.txt": "incident-p2p-r.txt",
        "nvidia-smi-topo-p2p-w.txt": "incident-p2p-r.txt",
        "nvidia-smi-nvlink.txt": "incident-nvlink.txt",
    }
    return {k: result(k, sample(D + v)) for k, v in names.items()}


def test_all_eight_gpus_are_listed_and_queried() -> None:
    listed = parse_list(sample_lines(D + "incident-L.txt"))
    assert len(listed) == 8 and listed[0].uuid == "GPU-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f900"
    query = parse_query(sample_lines(D + "incident-query.csv"))
    assert [g.index for g in query] == list(range(8))
    g0 = query[0]
    assert (g0.bus_id, g0.driver_version, g0.pstate, g0.temperature_c) == (
        "00000000:18:00.0", "570.124.06", "P0", 33
    )
    assert (g0.memory_used_mib, g0.memory_total_mib, g0.compute_mode) == (1, 97887, "Default")


def test_mig_devices_are_counted_under_their_gpu() -> None:
    listed = parse_list(sample_lines(D + "mig-L.txt"))
    assert [(g.index, g.mig_devices) for g in listed] == [(0, 2), (1, 0)]


def test_a_healthy_blackwell_has_no_ecc_remap_or_recovery_anomaly() -> None:
    q = parse_q(sample_lines(D + "q-blackwell-healthy.txt"))
    assert (q.driver_version, q.cuda_version, q.attached_gpus) == ("570.124.06", "12.8", 1)
    (g,) = q.gpus
    assert g.bus_id == "00000000:18:00.0"
    assert g.ecc_volatile_uncorrectable == 0 and g.ecc_aggregate_uncorrectable == 0
    assert g.retired_pages_dbe is None and g.retired_pages_pending is None  # N/A on Ampere+
    assert g.remap_pending is False and g.remap_failure is False
    assert g.recovery_action == "None" and g.reset_required is False
    assert not g.faulty


def test_an_a100_with_a_pending_row_remap_is_faulty_with_its_evidence_lines() -> None:
    q = parse_q(sample_lines(D + "q-a100-remap-pending.txt"))
    healthy, bad = q.gpus
    assert not healthy.faulty and healthy.ecc_aggregate_correctable == 12
    assert bad.remap_pending is True and bad.remapped_rows_uncorrectable == 4
    assert bad.ecc_volatile_uncorrectable == 2 and bad.ecc_aggregate_uncorrectable == 4
    assert bad.reset_required is True
    lines = sample_lines(D + "q-a100-remap-pending.txt")
    texts = [lines[e.line - 1].strip() for e in bad.anomalies]
    assert "Pending                           : Yes" in texts


def test_volta_ecc_totals_and_retired_pages() -> None:
    (g,) = parse_q(sample_lines(D + "q-v100-retired-pages.txt")).gpus
    assert g.ecc_volatile_uncorrectable == 1 and g.ecc_aggregate_uncorrectable == 1
    assert g.ecc_aggregate_correctable == 3
    assert g.retired_pages_dbe == 1 and g.retired_pages_pending is True
    assert g.faulty


def test_topology_without_nvlink_is_node_within_numa_and_sys_across() -> None:
    topo = parse_topo(sample_lines(D + "incident-topo-m.txt"))
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8)) and topo.nics == ()
    assert topo.links["GPU0-GPU1"] == "NODE" and topo.links["GPU0-GPU7"] == "SYS"
    assert topo.nvlink_pairs == 0
    assert topo.cpu_affinity["GPU4"] == "48-95,144-191" and topo.numa_affinity["GPU4"] == "1"
    assert "NODE" in topo.legend


def test_dgx_topology_with_nvlink_and_a_nic_legend() -> None:
    topo = parse_topo(sample_lines(D + "dgx-h100-topo-m.txt"))
    assert topo.nvlink_pairs == 28
    assert topo.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert topo.links["GPU0-NIC0"] == "PXB"


def test_old_topology_with_soc_and_mlx5_columns() -> None:
    topo = parse_topo(sample_lines(D + "old-soc-topo-m.txt"))
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3") and topo.nics == ("mlx5_0",)
    assert topo.links["GPU0-GPU3"] == "SOC" and topo.links["GPU0-mlx5_0"] == "PIX"
    assert topo.nvlink_pairs == 3 and topo.cpu_affinity["GPU3"] == "20-39"


def test_p2p_all_ok_and_failing_pairs() -> None:
    ok = parse_p2p(sample_lines(D + "incident-p2p-r.txt"))
    assert ok.all_ok is True and ok.failing == () and ok.statuses == {"OK": 56}
    bad = parse_p2p(sample_lines(D + "cns-p2p-w.txt"), source="nvidia-smi-topo-p2p-w.txt")
    assert bad.all_ok is False
    assert {(f.a, f.b, f.status) for f in bad.failing} >= {("GPU0", "GPU2", "CNS")}
    assert len(bad.failing) == 8 and bad.failing[0].source == "nvidia-smi-topo-p2p-w.txt"


@pytest.mark.parametrize(
    ("path", "gpus", "active", "present"),
    [("incident-nvlink.txt", 8, 0, False), ("h100-nvlink.txt", 3, 36, True)],
)
def test_nvlink_status(path: str, gpus: int, active: int, present: bool) -> None:
    facts = parse_nvlink(sample_lines(D + path))
    assert (facts.gpus, facts.active_links, facts.present) == (gpus, active, present)


def test_the_adapter_on_the_incident_node_is_healthy_and_json() -> None:
    facts = roundtrip(registry.get("nvidia_smi").func(incident_files(), {}))
    assert facts["collected"] and facts["driver_loaded"] is True
    assert facts["gpu_count"] == 8 and facts["driver_version"] == "570.124.06"
    assert facts["p2p_all_ok"] is True and facts["p2p_failing"] == []
    assert facts["uncorrectable_ecc_volatile"] == 0 and not facts["remap_pending"]
    assert facts["recovery_actions"] == [] and facts["faulty_gpus"] == []
    assert facts["nvlink"]["present"] is False and facts["topo"]["nvlink_pairs"] == 0


@pytest.mark.parametrize(
    ("rc", "stdout", "loaded", "lost"),
    [
        (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n", False, False),
        (15, "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot "
             "the system to recover this GPU\n", None, True),
    ],
)
def test_exit_codes_mean_driver_not_loaded_or_gpu_lost(
    rc: int, stdout: str, loaded: bool | None, lost: bool
) -> None:
    files = {"nvidia-smi-L.txt": result("nvidia-smi-L.txt", stdout, rc=rc)}
    facts = registry.get("nvidia_smi").func(files, {})
    assert facts["exit_code"] == rc and facts["driver_loaded"] is loaded
    assert facts["gpu_lost"] is lost and facts["list"]["collected"] is False


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="GPU0123 \t:XOKNSCYesNo-=", max_size=60) | st.text(max_size=60),
                max_size=30))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    assert isinstance(parse_list(lines), tuple)
    assert isinstance(parse_query(lines), tuple)
    assert isinstance(parse_q(lines).gpus, tuple)
    assert isinstance(parse_topo(lines).links, dict)
    assert parse_p2p(lines).all_ok in (True, False, None)
    assert isinstance(parse_nvlink(lines).active_links, int)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["q-a100-remap-pending.txt", "dgx-h100-topo-m.txt", "cns-p2p-w.txt"]),
       st.integers(0, 5000))
def test_truncated_samples_never_raise(path: str, cut: int) -> None:
    lines = sample(D + path)[:cut].splitlines()
    parse_q(lines)
    parse_topo(lines)
    parse_p2p(lines)


# Plain `nvidia-smi` (no arguments) and the other probes print NVML's "Unable to determine the
# device handle for GPU…: <reason>" for a GPU the driver can no longer reach; real samples from
# public incidents (tests/bundles/real-gpu-hardware-*): RETURNN's hang after a corrected-AER storm
# (rwth-i6/returnn#1486), OWOD's 4-GPU training (JosephKJ/OWOD#81), an RTX 4080 after Xid 79
# (kargarisaac/small-lm-training), each printing one of the three shapes of the GPU's name.
@pytest.mark.parametrize(
    ("path", "bus_id", "reason"),
    [
        ("plain-returnn-unknown-error.txt", "0000:03:00.0", "Unknown Error"),
        (
            "plain-owod-gpu-is-lost.txt",
            "0000:02:00.0",
            "GPU is lost. Reboot the system to recover this GPU",
        ),
        ("plain-rtx4080-index-and-no-devices.txt", "0000:01:00.0", "Unknown Error"),
    ],
)
def test_plain_nvidia_smi_that_cannot_get_a_gpus_handle_reports_that_gpu_lost(
    path: str, bus_id: str, reason: str
) -> None:
    files = {"nvidia-smi.txt": result("nvidia-smi.txt", sample(D + path), rc=None)}
    facts = roundtrip(registry.get("nvidia_smi").func(files, {}))
    assert facts["collected"] is True and facts["gpu_lost"] is True
    (gpu,) = facts["unreachable"]
    assert (gpu["bus_id"], gpu["reason"], gpu["lost"]) == (bus_id, reason, True)
    (ev,) = facts["lost_evidence"]
    assert (ev["source"], ev["line"]) == ("nvidia-smi.txt", 1)
    assert ev["text"].startswith("Unable to determine the device handle for GPU")


def test_no_devices_were_found_after_a_lost_gpu_is_read_as_that_line_too() -> None:
    text = sample(D + "plain-rtx4080-index-and-no-devices.txt")
    files = {"nvidia-smi.txt": result("nvidia-smi.txt", text, rc=None)}
    facts = registry.get("nvidia_smi").func(files, {})
    assert [e["line"] for e in facts["no_devices"]] == [2]


def test_a_handle_nvml_refuses_for_permissions_is_not_a_lost_gpu() -> None:
    # NVML_ERROR_NO_PERMISSION's string: the GPU is fine, this user may not open it
    line = "Unable to determine the device handle for GPU0000:3B:00.0: Insufficient Permissions\n"
    files = {"nvidia-smi.txt": result("nvidia-smi.txt", line, rc=None)}
    facts = registry.get("nvidia_smi").func(files, {})
    assert facts["gpu_lost"] is False and facts["lost_evidence"] == []
    assert [(g["bus_id"], g["lost"]) for g in facts["unreachable"]] == [("0000:3b:00.0", False)]


def test_the_lost_handle_printed_on_stderr_of_another_probe_is_evidence_from_its_err_file() -> None:
    line = "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  Reboot the system to recover this GPU\n"  # noqa: E501
    files = {"nvidia-smi-query.csv": result("nvidia-smi-query.csv", "", rc=None, stderr=line)}
    facts = registry.get("nvidia_smi").func(files, {})
    assert facts["gpu_lost"] is True
    assert [(e["source"], e["line"]) for e in facts["lost_evidence"]] == [
        ("nvidia-smi-query.csv.err", 1)
    ]


def test_a_lost_gpu_in_a_sanitized_bundle_is_still_lost_under_its_placeholder() -> None:
    # runbook/report/sanitize.py writes bus IDs as <BUS_ID_N>: the sanitized bundle must
    # analyse to the same verdict (tests/hardening/test_sanitize.py holds the whole corpus)
    from runbook.parsers.nvidia_smi import parse_unreachable

    (gpu,) = parse_unreachable(
        [
            "Unable to determine the device handle for GPU <BUS_ID_1>: GPU is lost. "
            "Reboot the system to recover this GPU"
        ]
    )
    assert gpu.bus_id == "<BUS_ID_1>" and gpu.lost
