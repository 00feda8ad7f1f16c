"""DCGM evidence in the verdict: the healthy recorded node (tests/bundles/healthy) replayed with
`dcgmi` output added to its bundle, as `runbook collect` would record it, and analysed as
`runbook analyze BUNDLE --format json` does. Real files, real replay; only the DCGM files
differ between cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runbook.cli.app import cli
from tests.tools import bundles

SAMPLES = Path(__file__).resolve().parent / "parsers" / "samples" / "dcgm"


def bundle_with(tmp_path: Path, files: dict[str, str]) -> Path:
    """The healthy bundle plus `files` (bundle name -> content; `X.rc`/`X.err` as DESIGN §4)."""
    root = tmp_path / "bundle"
    bundles.materialize("healthy", root)
    (root / "expected.yaml").unlink()
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def analyze(bundle: Path, *var_items: str) -> dict[str, Any]:
    args = ["analyze", str(bundle), "--format", "json"]
    for item in var_items:
        args += ["--var", item]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    verdict: dict[str, Any] = json.loads(result.stdout)
    return verdict


def stage(verdict: dict[str, Any], stage_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in verdict["stages"] if s["id"] == stage_id)
    return found


def kinds(verdict: dict[str, Any]) -> list[str]:
    return [p["kind"] for p in verdict["proposals"]]


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_a_dcgm_health_failure_is_the_hardware_verdict_citing_dcgm(tmp_path: Path) -> None:
    v = analyze(bundle_with(tmp_path, {
        "dcgmi-discovery.txt": sample("discovery-a100-8gpu-3x.txt"),
        "dcgmi-health.txt": sample("health-tree-failure.txt"),
    }))  # fmt: skip
    assert v["root_cause"] == "gpu-hardware", v["chain"]
    assert v["first_anomaly"]["source"] == "dcgmi-health.txt" and v["first_anomaly"]["line"] == 8
    (link,) = [c for c in v["chain"] if c["cause"] == "gpu-hardware"]
    assert link["stage"] == "gpu-pcie" and "GPU 3 Memory system: Failure" in link["finding"]
    assert {"source": "dcgmi-health.txt", "line": 8} in [
        {k: e.get(k) for k in ("source", "line")} for e in link["evidence"]]  # fmt: skip
    assert "node-drain" in kinds(v)
    # the PCIe warning of GPU 5 is reported apart, not blamed
    assert any("DCGM health warning" in f["finding"] for f in v["also_seen"])
    assert "gpu-hardware" not in {r["cause"] for r in v["ruled_out"]}


def test_a_dcgm_warning_alone_is_no_drain_and_the_node_stays_healthy(tmp_path: Path) -> None:
    v = analyze(bundle_with(tmp_path, {"dcgmi-health.txt": sample("health-legacy-warning.txt")}))
    assert v["root_cause"] == "healthy", v["chain"]
    assert "node-drain" not in kinds(v)
    (seen,) = [f for f in v["also_seen"] if "DCGM" in f["finding"]]
    assert seen["role"] == "context" and "PCIe system: Warning" in seen["finding"]
    assert "gpu-hardware" in {r["cause"] for r in v["ruled_out"]}


@pytest.mark.parametrize(
    "files",
    [
        {"dcgmi-health.txt": "", "dcgmi-health.txt.rc": "127\n",
         "dcgmi-health.txt.err": "bash: line 1: dcgmi: command not found\n",
         "dcgmi-discovery.txt": "", "dcgmi-discovery.txt.rc": "127\n",
         "dcgmi-discovery.txt.err": "bash: line 1: dcgmi: command not found\n"},
        {"dcgmi-health.txt": (SAMPLES / "no-hostengine.txt").read_text(),
         "dcgmi-health.txt.rc": "255\n",
         "dcgmi-discovery.txt": (SAMPLES / "no-hostengine.txt").read_text(),
         "dcgmi-discovery.txt.rc": "255\n"},
    ],
    ids=["no-dcgmi", "no-host-engine"],
)  # fmt: skip
def test_a_node_without_dcgm_gets_the_same_verdict_as_before(
    tmp_path: Path, files: dict[str, str]
) -> None:
    before = analyze(bundles.path("healthy"))
    v = analyze(bundle_with(tmp_path, files))
    assert (v["root_cause"], v["confidence"]) == (before["root_cause"], before["confidence"])
    assert v["chain"] == [] and v["also_seen"] == before["also_seen"]
    assert kinds(v) == kinds(before)
    gpu = stage(v, "gpu-pcie")
    assert gpu["status"] == "ok"
    assert gpu["facts"]["dcgm"]["available"] is False
    assert gpu["facts"]["dcgm"]["unavailable_reason"]


def test_a_dcgm_healthy_report_is_read_as_healthy(tmp_path: Path) -> None:
    v = analyze(bundle_with(tmp_path, {"dcgmi-health.txt": sample("health-tree-healthy.txt")}))
    assert v["root_cause"] == "healthy"
    assert stage(v, "gpu-pcie")["facts"]["dcgm"]["healthy"] is True


def test_the_diag_runs_only_when_asked_and_a_hardware_fail_supports_a_drain(
    tmp_path: Path,
) -> None:
    bundle = bundle_with(tmp_path, {"dcgmi-diag.txt": sample("diag-row-remap-error.txt")})
    unasked = analyze(bundle)
    assert stage(unasked, "dcgm-diag")["status"] == "skipped"
    assert unasked["root_cause"] == "healthy"
    asked = analyze(bundle, "dcgm_diag=true")
    assert stage(asked, "dcgm-diag")["status"] == "anomaly"
    assert asked["root_cause"] == "gpu-hardware"
    assert asked["first_anomaly"]["source"] == "dcgmi-diag.txt"
    assert "node-drain" in kinds(asked)


def test_a_diag_fail_from_a_cuda_driver_mismatch_is_no_drain(tmp_path: Path) -> None:
    bundle = bundle_with(
        tmp_path, {"dcgmi-diag.txt": sample("diag-r2-3.3.0-pcie-fail-driver-mismatch.txt")}
    )
    v = analyze(bundle, "dcgm_diag=true")
    assert v["root_cause"] == "healthy" and "node-drain" not in kinds(v)
    assert any("software or configuration" in f["finding"] for f in v["also_seen"])
