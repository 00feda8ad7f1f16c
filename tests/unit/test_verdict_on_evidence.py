"""What the verdict may conclude from what was (and was not) read: attribution of OOMs without a
pod, healthy against inconclusive, parser failures that stay visible."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runbook.cli.app import cli
from runbook.parsers import registry
from tests.tools import bundles


def analyze(bundle: Path, *extra: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        cli, ["analyze", str(bundle), "--format", "json", *extra], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def copy_without(tmp_path: Path, name: str, *drop: str) -> Path:
    dest = tmp_path / name
    bundles.materialize(name, dest)
    for item in drop:
        (dest / item).unlink()
    (dest / "expected.yaml").unlink()
    return dest


def test_a_neighbours_oom_without_pod_json_is_also_seen_never_the_verdict(tmp_path: Path) -> None:
    # the same node with the pod unknown (plain SSH, no kubeconfig): only the app log and the
    # kernel log remain; the OOM killed stress-ng in a cgroup nothing ties to the job
    bundle = copy_without(tmp_path, "oom-other-cgroup", "pod.json")
    v = analyze(bundle)
    assert v["root_cause"] == "network-socket", v["chain"]
    also = "\n".join(a["finding"] for a in v["also_seen"])
    assert "stress-ng" in also and "nothing ties" in also
    assert not [c for c in v["chain"] if c.get("cause") == "host-memory-oom"]
    assert "memory-limit" not in {p["kind"] for p in v["proposals"]}


def test_an_unattributed_oom_alone_is_low_confidence(tmp_path: Path) -> None:
    bundle = copy_without(tmp_path, "oom-other-cgroup", "pod.json")
    for log in (bundle / "app").iterdir():
        log.write_text("training step 1\n")
    v = analyze(bundle)
    assert (v["root_cause"], v["confidence"]) == ("host-memory-oom", "low")


def node_without_job(tmp_path: Path) -> Path:
    """The node of oom-other-cgroup as a sweep or a node check sees it: no pod named, no
    cgroup given, no application or NCCL log; its kernel log and containerd's journal still
    hold another pod's OOM kill."""
    bundle = copy_without(tmp_path, "oom-other-cgroup", "pod.json")
    for tree in ("app", "cgroup"):
        shutil.rmtree(bundle / tree)
    (bundle / "bundle.yaml").write_text(
        "format: 1\nnode: gpu-node-12\ncollected_at: '2026-02-10T14:00:00+00:00'\n"
    )
    return bundle


def test_a_memcg_oom_on_a_node_running_no_job_is_also_seen_and_the_node_healthy(
    tmp_path: Path,
) -> None:
    v = analyze(node_without_job(tmp_path))
    assert (v["root_cause"], v["first_anomaly"]) == ("healthy", None), v["also_seen"]
    also = "\n".join(a["finding"] for a in v["also_seen"])
    assert "memcg OOM killed stress-ng" in also and "no job is under diagnosis" in also
    assert "containerd/kubelet recorded 1 OOM event(s) of containers on this node" in also
    assert not [a for a in v["also_seen"] if a.get("cause") == "host-memory-oom"]
    assert v["chain"] == []
    kinds = {p["kind"] for p in v["proposals"]}
    assert not kinds & {"memory-limit", "reduce-loader-memory", "node-drain"}, kinds


def test_naming_the_job_on_that_node_keeps_the_low_confidence_attribution(
    tmp_path: Path,
) -> None:
    # the same evidence with a job named whose cgroup is unknown: an OOM nothing ties to it
    # is still the only cause on offer, blamed weakly, as before
    v = analyze(node_without_job(tmp_path), "--var", "pod=llm-sft-worker-0")
    assert (v["root_cause"], v["confidence"]) == ("host-memory-oom", "low"), v["chain"]


@pytest.mark.parametrize("unrelated", ["lspci.txt", "journal-containerd.txt", "meminfo.txt"])
def test_healthy_does_not_flip_on_an_unrelated_file(tmp_path: Path, unrelated: str) -> None:
    if not (bundles.path("healthy") / unrelated).exists():
        pytest.fail(f"the healthy bundle lost {unrelated}: pick another unrelated file")
    full = analyze(bundles.path("healthy"))
    bundle = copy_without(tmp_path, "healthy", unrelated)
    assert full["root_cause"] == "healthy"
    assert analyze(bundle)["root_cause"] == "healthy"


def test_nothing_read_is_inconclusive_not_healthy(tmp_path: Path) -> None:
    bundle = tmp_path / "empty"
    bundle.mkdir()
    (bundle / "bundle.yaml").write_text(
        "format: 1\nnode: n1\ncollected_at: '2025-03-04T10:00:00+00:00'\n"
    )
    v = analyze(bundle)
    assert v["root_cause"] == "inconclusive" and v["first_anomaly"] is None
    assert any(p["kind"] == "collect-more" for p in v["proposals"])


def test_a_failing_parser_is_reported_in_every_format_and_the_rest_is_still_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(files: Any, context: Any) -> dict[str, Any]:
        raise ValueError("invalid literal for int() with base 10")

    entry = registry.get("host")
    monkeypatch.setitem(registry._REGISTRY, "host", registry.ParserEntry("host", broken, ""))
    try:
        v = analyze(bundles.path("shm-exhausted"))
        stage = next(s for s in v["stages"] if s["id"] == "shm-p2p")
        assert stage["status"] in ("error", "anomaly")
        assert any("parser host failed" in e for e in stage["errors"])
        assert stage["facts"]["nccl_log"]["collected"]  # the stage's other parser still read
        for fmt in ("text", "markdown"):
            out = CliRunner().invoke(
                cli, ["analyze", str(bundles.path("shm-exhausted")), "--format", fmt]
            ).output
            assert "parser host failed" in out, fmt
    finally:
        registry._REGISTRY["host"] = entry


def _without_nvidia_smi(tmp_path: Path, *, exit_code: int, stderr: str, gpus: bool) -> Path:
    """The healthy node as it reads when nvidia-smi cannot answer: every nvidia-smi file
    replaced by the exit status and words the real tool gives (a `.rc` and an `.err`)."""
    dest = copy_without(tmp_path, "healthy")
    for smi in dest.glob("nvidia-smi*"):
        if smi.suffix not in (".rc", ".err"):
            smi.write_text("")
            Path(f"{smi}.rc").write_text(f"{exit_code}\n")
            Path(f"{smi}.err").write_text(stderr)
    if not gpus:
        lspci = dest / "lspci.txt"
        lspci.write_text(
            "".join(ln for ln in lspci.read_text().splitlines(True) if "NVIDIA" not in ln)
        )
        (dest / "node.json").unlink()
    return dest


@pytest.mark.parametrize(
    ("exit_code", "stderr", "said"),
    [
        (127, "sh: 1: nvidia-smi: not found\n", "nvidia-smi not found"),
        (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n",
         "the driver not loaded (nvidia-smi exit 9)"),
    ],
)  # fmt: skip
def test_a_gpu_node_whose_driver_does_not_answer_is_never_healthy(
    tmp_path: Path, exit_code: int, stderr: str, said: str
) -> None:
    """A tool's absence is no clean bill: the GPUs' state is unknown, so the node is not
    healthy (and nothing is drained on that alone)."""
    verdict = analyze(_without_nvidia_smi(tmp_path, exit_code=exit_code, stderr=stderr, gpus=True))
    assert verdict["root_cause"] == "inconclusive", verdict["chain"]
    finding = next(c for c in verdict["chain"] if c["stage"] == "gpu-pcie")
    assert said in finding["finding"] and "NVIDIA GPU(s) on the PCI bus" in finding["finding"]
    kinds = [p["kind"] for p in verdict["proposals"]]
    assert "collect-more" in kinds and "node-drain" not in kinds


def test_a_node_without_gpus_and_without_nvidia_smi_can_be_healthy(tmp_path: Path) -> None:
    bundle = _without_nvidia_smi(
        tmp_path, exit_code=127, stderr="sh: 1: nvidia-smi: not found\n", gpus=False
    )
    verdict = analyze(bundle)
    # no NVIDIA device on the bus and no node object saying otherwise: no GPU to answer for
    assert verdict["root_cause"] == "healthy", verdict["chain"]
    assert not any(c["stage"] == "gpu-pcie" for c in verdict["chain"]), verdict["chain"]
