"""The hang runbook's GPU stage reads a lost GPU the way the init-failure runbook does: plain
NVML's "Unable to determine the device handle" line (here on `nvidia-smi -q`'s standard error,
exit 15, as rwth-i6/returnn#1486 shows it) is a GPU fault whose evidence is that line; and the
node's own fault, not the hang it caused, is the root cause."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from runbook.cli.app import cli
from tests.tools import bundles

LOST = "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"


def test_a_gpu_nvml_cannot_reach_during_a_hang_is_a_gpu_fault_citing_that_line(
    tmp_path: Path,
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(bundles.path("captured-collective-hung-gloo-frozen-peer"), bundle)
    (bundle / "nvidia-smi-q.txt").write_text("")
    (bundle / "nvidia-smi-q.txt.err").write_text(LOST)
    (bundle / "nvidia-smi-q.txt.rc").write_text("15\n")
    result = CliRunner().invoke(
        cli, ["analyze", str(bundle), "--runbook", "nccl-hang", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    links = [c for c in verdict["chain"] if c["finding"].startswith("GPU fault")]
    assert links, verdict["chain"]
    assert "NVML cannot reach GPU 0000:3b:00.0" in links[0]["finding"]
    assert {"source": "nvidia-smi-q.txt.err", "line": 1} in [
        {"source": e["source"], "line": e["line"]} for e in links[0]["evidence"]
    ]
    # the node's own hardware evidence: the fault is the cause, and a drain is proposed
    assert verdict["root_cause"] == "gpu-hardware"
    assert "node-drain" in [p["kind"] for p in verdict["proposals"]]
    # the hang it caused is a link of its chain, not a finding apart
    assert any("entered all_reduce #4" in c["finding"] for c in verdict["chain"])
    assert verdict["first_anomaly"]["source"] == "nvidia-smi-q.txt.err"


def test_a_hang_without_a_fault_of_the_node_keeps_its_own_cause() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "analyze",
            str(bundles.path("captured-collective-hung-gloo-frozen-peer")),
            "--runbook",
            "nccl-hang",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["root_cause"] == "collective-hung"
    assert "node-drain" not in [p["kind"] for p in verdict["proposals"]]
