"""The job merge of a hang (runbook/job/hang.py), pure: each node's `hang` facts as its verdict
carries them, lined up across nodes. The ranks are the real PyTorch 2.13 dumps of
tests/hang/samples (rank 1 behind rank 0 at all_reduce #4), placed on two nodes."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from runbook import hang
from runbook.cli.app import cli
from runbook.job import hang as job_hang
from runbook.parsers import flight_recorder, pyspy
from runbook.sweep.results import HostResult, HostStatus
from runbook.verdict import StageSummary, Verdict

SAMPLES = Path(__file__).parent / "samples"


def views() -> dict[int, hang.RankView]:
    fr = {
        "dumps": [
            flight_recorder.parse_dump(
                f"fr/nccl_trace_rank_{r}.b64",
                base64.b64encode(
                    (SAMPLES / f"fr-2.13-pickle-rank{r}.pickle").read_bytes()
                ).decode(),
            )
            for r in (0, 1)
        ]
    }
    spy = {
        "dumps": [
            pyspy.parse_dump(
                "pyspy/rank-1.pid-2.txt", (SAMPLES / "pyspy-0.4.3-sleeping-rank.txt").read_text()
            )
        ]
    }
    return hang.views_from_facts(fr, spy, {})


def node(name: str, ranks: list[hang.RankView], *, offset: float = 0.0) -> HostResult:
    """A node whose verdict read `ranks` (its own analysis is the node's business here)."""
    facts = {
        "hang": {
            "collected": True,
            "read_at": "2026-12-06T01:00:00Z",
            "views": [v.to_json() for v in ranks],
            "watchdog": {},
        }
    }
    verdict = Verdict(
        node=name,
        root_cause="inconclusive",
        confidence="low",
        stages=(StageSummary(id="collective-state", status="anomaly", facts=facts),),
    )
    return HostResult(
        host=name,
        target=f"ssh://root@{name}",
        status=HostStatus.INCONCLUSIVE,
        verdict=verdict,
        clock={"offset_s": offset, "uncertainty_s": 0.001},
    )


def job_verdict(root_cause: str = "inconclusive") -> dict[str, Any]:
    return {"root_cause": root_cause, "confidence": "high", "first_anomaly": None, "node": None}


def test_the_rank_behind_on_another_node_is_named_with_its_node_and_stack() -> None:
    v = views()
    results = [node("gpu-node-01", [v[0]]), node("gpu-node-03", [v[1]])]
    out = job_hang.apply(job_verdict(), results)
    assert out["root_cause"] == "rank-stalled" and out["scope"] == "node"
    assert out["node"] == "gpu-node-03"
    assert out["statement"].startswith("rank 1 (gpu-node-03) never entered all_reduce #4")
    assert out["stalled_ranks"][0]["stack"][-1].startswith("wait_for_data (")
    assert out["hang"]["waiting"] == [0] and out["hang"]["behind"] == [1]


def test_a_size_mismatch_no_node_sees_alone_is_the_jobs_desync_with_its_first_anomaly() -> None:
    v = views()
    other = copy.deepcopy(v[0])
    other.rank = 1
    other.fr_source = "fr/nccl_trace_rank_1.b64"
    last = other.groups["0"]["entries"][-1]
    last["input_sizes"] = [[16]]
    results = [node("gpu-node-01", [v[0]]), node("gpu-node-02", [other])]
    out = job_hang.apply(job_verdict(), results)
    assert out["root_cause"] == "collective-desync" and out["scope"] == "shared"
    assert "with different sizes: rank 0 called all_reduce with sizes [[8]]" in out["statement"]
    assert "rank 1 called all_reduce with sizes [[16]]" in out["statement"]
    assert out["first_anomaly"]["source"].startswith("fr/nccl_trace_rank_")
    assert out["first_anomaly"]["node"] in ("gpu-node-01", "gpu-node-02")


def test_a_nodes_clock_offset_moves_its_ranks_times_onto_the_collectors_clock() -> None:
    v = views()
    created = v[1].groups["0"]["entries"][-1]["created"]
    moved = job_hang.node_views(node("gpu-node-03", [v[1]], offset=60.0))[1]
    assert moved.groups["0"]["entries"][-1]["created"] < created
    out = job_hang.apply(
        job_verdict(), [node("gpu-node-01", [v[0]]), node("gpu-node-03", [v[1]], offset=60.0)]
    )
    assert out["stalled_ranks"][0]["since"] == moved.groups["0"]["entries"][-1]["created"]


def test_another_cause_that_came_first_is_kept_over_the_hang() -> None:
    v = views()
    results = [node("gpu-node-01", [v[0]]), node("gpu-node-03", [v[1]])]
    out = job_hang.apply(job_verdict("gpu-hardware"), results)
    assert out["root_cause"] == "gpu-hardware" and "stalled_ranks" not in out


def test_a_job_no_node_read_a_rank_of_is_left_as_it_was() -> None:
    verdict = job_verdict()
    assert job_hang.apply(verdict, [node("gpu-node-01", [])]) == verdict


def test_a_node_without_any_evidence_of_a_job_is_inconclusive_never_healthy(
    tmp_path: Path,
) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "bundle.yaml").write_text(
        "format: 1\nnode: gpu-node-09\ncollected_at: '2026-12-06T01:00:00Z'\n"
    )
    (bundle / "dmesg.txt").write_text("[Sat Dec  6 00:00:01 2026] Linux version 6.1.0\n")
    result = CliRunner().invoke(
        cli, ["analyze", str(bundle), "--runbook", "nccl-hang", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["root_cause"] == "inconclusive"
    assert (
        "no rank process, flight recorder dump or watchdog line" in verdict["chain"][0]["finding"]
    )
