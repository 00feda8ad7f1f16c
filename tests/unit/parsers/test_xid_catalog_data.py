"""The Xid catalog data file (runbook/data/xids.yaml) has the shape its reader expects and the
judgements the diagnosis relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import runbook

DATA = Path(runbook.__file__).resolve().parent / "data" / "xids.yaml"

CATEGORIES = {"application", "hardware", "secondary", "informational", "unknown"}
REQUIRED = {"meaning", "category", "gpu_fault", "drain", "action"}
OPTIONAL = {"drain_if_repeated", "note", "mnemonic", "investigatory", "causes"}
CAUSES = {"hardware", "driver", "user_app", "system_memory", "bus", "thermal", "fb_corruption"}
NVLINK5 = range(144, 151)


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    loaded = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def xids(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    table = doc["xids"]
    assert isinstance(table, dict) and table
    return table


def test_the_file_names_its_sources(doc: dict[str, Any]) -> None:
    assert set(doc) == {"source", "xids"}
    sources = doc["source"]
    assert isinstance(sources, list) and sources
    assert all(isinstance(s, str) and s.strip() for s in sources)
    assert any("docs.nvidia.com/deploy/xid-errors" in s for s in sources)


def test_every_code_is_a_positive_int_key(xids: dict[Any, Any]) -> None:
    for code in xids:
        assert type(code) is int, f"key {code!r} is not an int"
        assert code > 0


def test_the_catalog_is_complete_well_beyond_the_old_hard_coded_table(
    xids: dict[int, Any],
) -> None:
    # NVIDIA's current catalog numbers its rows 1..172 without gaps
    assert set(range(1, 173)) <= set(xids)


def test_every_entry_has_the_required_fields_and_no_others(
    xids: dict[int, dict[str, Any]],
) -> None:
    for code, entry in xids.items():
        assert isinstance(entry, dict), code
        keys = set(entry)
        assert REQUIRED <= keys, (code, REQUIRED - keys)
        assert keys <= REQUIRED | OPTIONAL, (code, keys - REQUIRED - OPTIONAL)


def test_field_types(xids: dict[int, dict[str, Any]]) -> None:
    for code, entry in xids.items():
        assert entry["category"] in CATEGORIES, code
        for flag in ("gpu_fault", "drain", "drain_if_repeated"):
            if flag in entry:
                assert type(entry[flag]) is bool, (code, flag)
        for text in ("meaning", "action", "note", "mnemonic", "investigatory"):
            if text in entry:
                assert isinstance(entry[text], str) and entry[text].strip(), (code, text)
        if "causes" in entry:
            assert isinstance(entry["causes"], list) and entry["causes"], code
            assert set(entry["causes"]) <= CAUSES, code


def test_drain_implies_a_gpu_fault(xids: dict[int, dict[str, Any]]) -> None:
    for code, entry in xids.items():
        if entry["drain"]:
            assert entry["gpu_fault"], code


def test_drain_if_repeated_is_for_gpu_faults_that_do_not_drain_alone(
    xids: dict[int, dict[str, Any]],
) -> None:
    for code, entry in xids.items():
        if entry.get("drain_if_repeated"):
            assert entry["gpu_fault"] and not entry["drain"], code


def test_only_hardware_codes_are_gpu_faults(xids: dict[int, dict[str, Any]]) -> None:
    for code, entry in xids.items():
        if entry["gpu_fault"]:
            assert entry["category"] == "hardware", code


@pytest.mark.parametrize("code", [13, 31, 43, 68, 69])
def test_application_codes(xids: dict[int, dict[str, Any]], code: int) -> None:
    entry = xids[code]
    assert entry["category"] == "application"
    assert entry["gpu_fault"] is False
    assert entry["drain"] is False


@pytest.mark.parametrize("code", [48, 62, 64, 74, 79, 95, 119, 120, 140, 143])
def test_fatal_hardware_codes_drain(xids: dict[int, dict[str, Any]], code: int) -> None:
    entry = xids[code]
    assert entry["category"] == "hardware"
    assert entry["gpu_fault"] is True
    assert entry["drain"] is True


def test_secondary_cleanup_is_secondary(xids: dict[int, dict[str, Any]]) -> None:
    assert xids[45]["category"] == "secondary"
    assert xids[45]["drain"] is False


def test_self_healed_and_contained_errors_do_not_drain(xids: dict[int, dict[str, Any]]) -> None:
    assert xids[63]["drain"] is False
    assert xids[94]["gpu_fault"] is True
    assert xids[94]["drain"] is False
    assert xids[94]["drain_if_repeated"] is True


def test_published_action_names(xids: dict[int, dict[str, Any]]) -> None:
    assert xids[48]["action"] == "WORKFLOW_XID_48"
    assert xids[79]["action"] == "RESTART_BM"
    assert xids[95]["action"] == "RESET_GPU"
    assert xids[13]["action"] == "RESTART_APP"
    assert xids[154]["action"] == "XID_154"


def test_nvlink5_codes_are_present_when_the_catalog_has_them(
    xids: dict[int, dict[str, Any]],
) -> None:
    for code in NVLINK5:
        assert code in xids, code
        assert xids[code]["action"] == "WORKFLOW_NVLINK5_ERR", code
        assert "NVLINK" in xids[code]["mnemonic"], code


def test_gsp_and_recovery_codes_are_present(xids: dict[int, dict[str, Any]]) -> None:
    for code in (119, 120, *range(136, 144), 154, *range(155, 173)):
        assert code in xids, code
    assert xids[154]["category"] == "informational"
