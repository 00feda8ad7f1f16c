"""The DCGM parsers on `dcgmi` output in the formats DCGM 2.x-4.x print (samples/dcgm/README.md
names each sample's source)."""

from __future__ import annotations

from typing import Any

import pytest

from runbook.parsers import registry
from runbook.parsers.dcgm import F_DISCOVERY, F_HEALTH, parse_discovery, parse_health
from runbook.parsers.dcgm_diag import F_DIAG, parse_diag

from .helpers import missing, result, roundtrip, sample, sample_lines

D = "dcgm/"
NO_ENGINE = sample(D + "no-hostengine.txt")


def dcgm(**files: Any) -> dict[str, Any]:
    return roundtrip(registry.get("dcgm").func(files, {}))


def diag(res: Any) -> dict[str, Any]:
    return roundtrip(registry.get("dcgm_diag").func({F_DIAG: res}, {}))


# --- discovery ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "count", "reported", "first"),
    [
        ("discovery-a100-8gpu-3x.txt", 2, 8,
         ("A100-SXM4-40GB", "00000000:07:00.0", "GPU-1d82f4df-3cf9-150d-088b-52f18f8654e1")),
        ("discovery-h100-null-names.txt", 2, 4,
         (None, "00000000:4C:00.0", "GPU-d6a2c177-4cd8-8d01-0310-79f2720f37de")),
        ("discovery-t4g-4x.txt", 1, 1,
         ("NVIDIA T4G", "00000000:00:1F.0", "GPU-9ca02968-f496-c0c4-01d9-509cb6c32f5f")),
        ("discovery-a10g-active-4x.txt", 1, 1, ("NVIDIA A10G", "00000000:00:1E.0", None)),
    ],
)  # fmt: skip
def test_discovery_lists_each_gpu_with_its_name_bus_id_and_uuid(
    name: str, count: int, reported: int, first: tuple[str | None, str, str | None]
) -> None:
    facts = parse_discovery(sample_lines(D + name))
    assert facts.recognized
    assert len(facts.gpus) == count and facts.reported_count == reported
    gpu = facts.gpus[0]
    assert (gpu.id, gpu.name, gpu.bus_id, gpu.uuid) == (0, *first)


def test_a_second_gpu_box_is_a_second_gpu_not_more_rows_of_the_first() -> None:
    gpus = parse_discovery(sample_lines(D + "discovery-h100-null-names.txt")).gpus
    assert [g.id for g in gpus] == [0, 1]
    assert gpus[1].bus_id == "00000000:5D:00.0"


# --- health ----------------------------------------------------------------------------------


def test_the_tree_layout_gives_each_gpu_its_system_health_and_whole_message() -> None:
    facts = parse_health(sample(D + "health-tree-failure.txt"))
    assert (facts.layout, facts.overall, facts.watched) == ("tree", "Failure", True)
    memory, pcie = facts.incidents
    assert (memory.entity, memory.entity_id, memory.system, memory.health) == (
        "GPU", 3, "Memory system", "Failure")  # fmt: skip
    # two incidents of one system arrive joined, wrapped over two rows: read back whole
    assert memory.message == (
        "Detected 2 volatile double-bit ECC error(s) in GPU 3., "
        "A pending retired page has been detected in GPU 3."
    )
    assert memory.hardware and memory.line == 8
    assert (pcie.entity_id, pcie.system, pcie.health) == (5, "PCIe system", "Warning")
    assert pcie.message.endswith("for GPU 5 : 13")


def test_the_legacy_box_layout_of_the_user_guide_reads_the_same_incidents() -> None:
    facts = parse_health(sample(D + "health-legacy-warning.txt"))
    assert (facts.layout, facts.overall) == ("legacy", "Warning")
    assert [(i.entity_id, i.system, i.health) for i in facts.incidents] == [
        (0, "PCIe system", "Warning"), (1, "InfoROM system", "Warning")]  # fmt: skip
    replays = "Detected more than 8 PCIe replays per minute for GPU 0: 13"
    assert facts.incidents[0].message == replays
    assert facts.incidents[1].message == "A corrupt InfoROM has been detected in GPU 1."


@pytest.mark.parametrize("name", ["health-tree-healthy.txt", "health-json-healthy.json"])
def test_a_healthy_report_has_no_incident(name: str) -> None:
    facts = parse_health(sample(D + name))
    assert facts.overall == "Healthy" and facts.incidents == () and facts.watched


def test_the_json_layout_reads_incidents_from_dcgmis_own_tree() -> None:
    """`-j` prints the same tree as the table, as DcgmiOutputJson builds it (`body` → group →
    `children` → id → `children` → `Errors` → system)."""
    text = """{"body": {"Overall Health": {"value": "Failure"},
      "GPU": {"children": {"1": {"value": "Failure", "children": {"Errors": {"children": {
        "NVLINK system": {"value": "Failure", "overflow": ["Detected a critical NvLink error"]}
      }}}}}}}, "header": ["Health Monitor Report"]}"""
    (incident,) = parse_health(text).incidents
    assert (incident.entity_id, incident.system, incident.health) == (1, "NVLINK system", "Failure")
    assert incident.hardware and "NvLink" in incident.message


def test_watches_never_set_means_nothing_was_watched_not_healthy() -> None:
    facts = parse_health(sample(D + "health-watches-not-enabled.txt"))
    assert facts.watched is False and facts.overall is None


def test_a_driver_failure_is_not_the_gpus_hardware() -> None:
    text = sample(D + "health-tree-failure.txt").replace("-> Memory system", "-> Driver       ")
    memory = parse_health(text).incidents[0]
    assert memory.system == "Driver" and memory.health == "Failure" and not memory.hardware


# --- diag -------------------------------------------------------------------------------------


def test_a_passing_3x_run_reads_every_deployment_test_and_the_version() -> None:
    facts = parse_diag(sample(D + "diag-r1-3.3.9-pass.txt"))
    assert facts.version == "3.3.9" and facts.recognized
    assert len(facts.results) == 9
    assert {r.result for r in facts.results} == {"Pass"}
    assert facts.results[6].test == "Page Retirement/Row Remap"


def test_a_4x_run_reads_its_per_gpu_rows() -> None:
    facts = parse_diag(sample(D + "diag-r2-4.2.3-pass.txt"))
    assert facts.version == "4.2.3"
    assert [(r.section, r.test, r.result) for r in facts.results] == [
        ("Deployment", "software", "Pass"), ("Hardware", "memory", "Pass")]  # fmt: skip


def test_a_4x_gpu_failure_row_fails_the_test_on_that_gpu() -> None:
    head, memory_rows = sample(D + "diag-r2-4.2.3-pass.txt").split("| memory ")
    memory_rows = memory_rows.replace("| Pass  ", "| Fail  ", 1).replace("GPU2: Pass", "GPU2: Fail")
    software, memory = parse_diag(head + "| memory " + memory_rows).results
    assert software.result == "Pass" and software.failed_gpus == ()
    assert memory.result == "Fail" and memory.failed_gpus == (2,) and memory.hardware


def test_a_3x_failure_names_the_gpu_and_keeps_the_warning_joined_as_printed() -> None:
    (memory,) = parse_diag(sample(D + "diag-r2-gpu-memory-fail.txt")).results
    assert (memory.test, memory.result, memory.failed_gpus) == ("GPU Memory", "Fail", (0,))
    # DCGM 3.x wraps its warnings mid-word: `second` / `s started` is `seconds started`
    assert memory.details == (
        "GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test for "
        "GPU 0 Verify that the cooling on this machine is functional, including external, "
        "thermal material interface, fans, and any other components.",
    )
    assert memory.hardware


def test_a_stress_test_failure_names_only_the_failing_gpu() -> None:
    results = parse_diag(sample(D + "diag-r3-3.3.9-targeted-power-fail.txt")).results
    (power,) = [r for r in results if r.result == "Fail"]
    assert (power.section, power.test, power.failed_gpus) == ("Stress", "Targeted Power", (1,))
    assert "target_power_min_ratio of 224.2 for GPU 1" in power.details[0]
    assert [r.test for r in results if r.result == "Skip"] == ["EUD Test"]


def test_a_deployment_error_about_row_remapping_is_hardware() -> None:
    (error,) = parse_diag(sample(D + "diag-row-remap-error.txt")).results
    assert error.result == "Error" and error.section == "Deployment"
    remap = "GPU 3 has uncorrectable memory errors and row remappings are pending"
    assert error.details == (remap,)
    assert error.hardware


def test_a_pcie_fail_from_a_cuda_driver_mismatch_is_not_hardware() -> None:
    results = parse_diag(sample(D + "diag-r2-3.3.0-pcie-fail-driver-mismatch.txt")).results
    (pcie,) = [r for r in results if r.result == "Fail"]
    assert pcie.test == "PCIe" and pcie.section == "Integration"
    assert "Error using CUDA API" in pcie.details[0]
    assert not pcie.hardware
    assert [r.test for r in results if r.result == "Skip"] == ["GPU Memory"]


# --- adapters: what a stage sees ---------------------------------------------------------------


def test_a_health_failure_is_a_hardware_failure_and_its_warning_stays_a_warning() -> None:
    facts = dcgm(**{
        F_DISCOVERY: result(F_DISCOVERY, sample(D + "discovery-t4g-4x.txt")),
        F_HEALTH: result(F_HEALTH, sample(D + "health-tree-failure.txt")),
    })  # fmt: skip
    assert facts["available"] is True and facts["discovery"]["gpu_count"] == 1
    (hw,) = facts["hardware_failures"]
    assert hw["source"] == F_HEALTH and hw["line"] == 8 and hw["role"] == "cause"
    assert hw["text"].startswith("GPU 3 Memory system: Failure - Detected 2 volatile")
    (warning,) = facts["warnings"]
    assert warning["role"] == "context" and warning["entity_id"] == 5
    assert facts["other_failures"] == [] and facts["healthy"] is False


def test_a_warning_only_report_has_no_hardware_failure() -> None:
    facts = dcgm(**{F_HEALTH: result(F_HEALTH, sample(D + "health-legacy-warning.txt"))})
    assert facts["hardware_failures"] == [] and len(facts["warnings"]) == 2


def test_a_healthy_report_with_watches_is_healthy() -> None:
    facts = dcgm(**{F_HEALTH: result(F_HEALTH, sample(D + "health-tree-healthy.txt"))})
    assert facts["healthy"] is True and facts["available"] is True


def test_unset_watches_are_not_healthy() -> None:
    text = sample(D + "health-watches-not-enabled.txt")
    facts = dcgm(**{F_HEALTH: result(F_HEALTH, text, rc=255)})
    assert facts["healthy"] is False and facts["health"]["watched"] is False


@pytest.mark.parametrize(
    ("res", "reason"),
    [
        (result(F_HEALTH, "", rc=127, stderr="bash: line 1: dcgmi: command not found\n"),
         "dcgmi is not installed"),
        (result(F_HEALTH, NO_ENGINE, rc=255),
         "the DCGM host engine (nv-hostengine) is not running"),
    ],
)  # fmt: skip
def test_no_dcgmi_or_no_host_engine_is_dcgm_not_available_and_nothing_else(
    res: Any, reason: str
) -> None:
    disc = result(F_DISCOVERY, res.stdout, rc=res.exited, stderr=res.stderr)
    facts = dcgm(**{F_HEALTH: res, F_DISCOVERY: disc})
    assert facts["available"] is False and facts["unavailable_reason"] == reason
    assert facts["health"] == {"collected": False}
    assert facts["hardware_failures"] == facts["warnings"] == facts["incidents"] == []
    assert facts["healthy"] is False


def test_an_older_bundle_without_dcgm_files_says_nothing_about_dcgm() -> None:
    facts = dcgm(**{F_HEALTH: missing(F_HEALTH), F_DISCOVERY: missing(F_DISCOVERY)})
    assert facts["collected"] is False and facts["available"] is None
    assert facts["hardware_failures"] == []


def test_the_diag_adapter_splits_hardware_failures_from_software_ones() -> None:
    hw = diag(result(F_DIAG, sample(D + "diag-row-remap-error.txt")))
    assert hw["ran"] and len(hw["hardware_failures"]) == 1 and hw["passed"] is False
    sw = diag(result(F_DIAG, sample(D + "diag-r2-3.3.0-pcie-fail-driver-mismatch.txt")))
    assert sw["hardware_failures"] == [] and len(sw["other_failures"]) == 1
    ok = diag(result(F_DIAG, sample(D + "diag-r1-3.3.9-pass.txt")))
    assert ok["passed"] is True and ok["version"] == "3.3.9"
    off = diag(result(F_DIAG, NO_ENGINE, rc=255))
    assert off["available"] is False and "results" not in off


def test_diag_output_that_is_no_table_is_unrecognized() -> None:
    facts = diag(result(F_DIAG, "something else entirely\n"))
    assert facts["recognized"] is False and facts["ran"] is False
