"""Four real hangs of a CPU gloo job (tests/hang/hangjob.py, PyTorch 2.13), each diagnosed
live by `runbook run nccl-hang --target local` while it hangs: the ranks' flight recorder dumps
(written by the job's own watchdog thread with `_dump_fr_trace` / `_dump_fr_trace_json`: gloo
has no dump-on-timeout), the real `py-spy dump` of every live rank process, and their logs are
the evidence. Each verdict must name the right rank and cause:

- a rank sleeping before the collective the others entered: rank-stalled, its stack in
  `wait_for_data`;
- a rank blocked reading a FIFO: rank-stalled, its stack in `load_next_batch`;
- a rank calling broadcast where the others call all_reduce: collective-desync (op);
- a rank all-reducing an empty tensor where the others reduce 8 elements: collective-desync
  (size);
- a rank whose process is stopped (SIGSTOP) inside the collective it entered before the
  others: every rank entered, none completes: collective-hung.

Every rank process is killed at the end of its test (tests/hang/realjob.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.hang.realjob import PY_SPY, HangingJob, hanging_job
from tests.integration.conftest import cli_env
from tests.sweep.helpers import runbook

pytestmark = [pytest.mark.live]


def diagnose(job: HangingJob, work: Path) -> dict[str, Any]:
    run = runbook(
        [
            "run",
            "nccl-hang",
            "--target",
            "local",
            "--no-input",
            "--format",
            "json",
            "--run-dir",
            str(work / "run"),
            "--var",
            f"app_log_dir={job.dir}",
            "--var",
            f"job_env=HANG_JOB={job.token}",
            "--var",
            f"fr_dump_prefix={job.dir / 'nowhere' / 'prefix_'}",
            "--var",
            f"py_spy={PY_SPY}",
            "--var",
            f"nccl_log_dir={job.dir / 'no-nccl-logs'}",
        ],
        cli_env(work),
        timeout=180,
    )
    assert run.rc == 0, run.stderr[-3000:]
    verdict: dict[str, Any] = json.loads(run.stdout)
    (work / "verdict-for-report.json").write_text(json.dumps(verdict, indent=2))
    return verdict


def finding(verdict: dict[str, Any]) -> str:
    return str(verdict["chain"][0]["finding"]) if verdict["chain"] else ""


def stage(verdict: dict[str, Any], stage_id: str) -> dict[str, Any]:
    return next(s for s in verdict["stages"] if s["id"] == stage_id)


def test_a_rank_sleeping_before_the_collective_is_named_stalled_with_its_stack(
    tmp_path: Path,
) -> None:
    with hanging_job(tmp_path / "job", world=3, mode="sleep", bad_rank=1) as job:
        job.wait_for_dumps()
        # a file in the dump directory that is not the ranks' own (another user's): the job's
        # environment names the directory, so it must not lead the probe to that file
        planted = job.dir / "fr" / "nccl_trace_rank_7"
        planted.write_text('{"secret": "not the job\'s"}')
        os.chown(planted, 65534, 65534)
        verdict = diagnose(job, tmp_path)
        assert job.alive() == [0, 1, 2], job.logs()
    text = finding(verdict)
    print("VERDICT sleep:", text)
    assert verdict["root_cause"] == "rank-stalled", text
    assert text.startswith("rank 1 (") and "never entered all_reduce #4 of pg 0" in text
    assert "→ wait_for_data (" in text and "hangjob.py:" in text
    assert "ranks 0, 2 wait in all_reduce #4" in text
    stalled = verdict["stalled_ranks"]
    assert [s["rank"] for s in stalled] == [1]
    assert stalled[0]["stack"][-1].startswith("wait_for_data (")
    assert stalled[0]["since"]
    # the first anomaly is rank 1's own last collective (its dump), not a waiting rank's line
    assert verdict["first_anomaly"]["source"] == "fr/nccl_trace_rank_1.b64"
    facts = stage(verdict, "collective-state")["facts"]["hang"]
    assert facts["pyspy"]["ranks"] == [0, 1, 2]
    assert facts["fr"]["ranks"] == [0, 1, 2], "another user's file was read as a dump"
    bundle = tmp_path / "run" / "bundle" / "fr"
    assert not list(bundle.glob("nccl_trace_rank_7*"))
    # no drain on a stalled rank: nothing on the node is at fault
    assert not [p for p in verdict["proposals"] if p["kind"] == "node-drain"]


def test_a_rank_blocked_on_a_fifo_read_is_named_stalled_in_its_reader(tmp_path: Path) -> None:
    with hanging_job(tmp_path / "job", world=4, mode="fifo", bad_rank=2, dump_format="json") as job:
        job.wait_for_dumps()
        verdict = diagnose(job, tmp_path)
    text = finding(verdict)
    print("VERDICT fifo:", text)
    assert verdict["root_cause"] == "rank-stalled", text
    assert text.startswith("rank 2 (") and "never entered all_reduce #4" in text
    assert "→ load_next_batch (" in text and "hangjob.py:" in text
    assert "ranks 0, 1, 3 wait in all_reduce #4" in text
    assert [s["rank"] for s in verdict["stalled_ranks"]] == [2]
    assert verdict["first_anomaly"]["source"] == "fr/nccl_trace_rank_2.json"


def test_a_rank_calling_another_collective_is_a_desync_naming_both_ops(tmp_path: Path) -> None:
    with hanging_job(tmp_path / "job", world=2, mode="op", bad_rank=1) as job:
        job.wait_for_dumps()
        verdict = diagnose(job, tmp_path)
    text = finding(verdict)
    print("VERDICT op:", text)
    assert verdict["root_cause"] == "collective-desync", text
    assert "as #4 of pg 0" in text
    assert "rank 0 called all_reduce" in text and "rank 1 called broadcast" in text
    assert "rank 0 waits in all_reduce, rank 1 waits in broadcast" in text
    assert "stalled_ranks" not in verdict
    analysis = stage(verdict, "collective-state")["facts"]["hang"]["analysis"]
    assert analysis["mismatch"] == "op"


def test_a_rank_reducing_another_size_is_a_desync_naming_both_sizes(tmp_path: Path) -> None:
    with hanging_job(tmp_path / "job", world=2, mode="size", bad_rank=1, dump_format="json") as job:
        job.wait_for_dumps()
        verdict = diagnose(job, tmp_path)
    text = finding(verdict)
    print("VERDICT size:", text)
    assert verdict["root_cause"] == "collective-desync", text
    assert "called all_reduce #4 of pg 0 (default_pg) with different sizes" in text
    assert "rank 0 called all_reduce with sizes [[8]]" in text
    assert "rank 1 called all_reduce with sizes [[0]]" in text
    analysis = stage(verdict, "collective-state")["facts"]["hang"]["analysis"]
    assert analysis["mismatch"] == "size"


def test_every_rank_inside_the_collective_with_a_frozen_peer_is_collective_hung(
    tmp_path: Path,
) -> None:
    with hanging_job(
        tmp_path / "job", world=2, mode="freeze", bad_rank=1, dump_format="json"
    ) as job:
        job.freeze_once_dumped(1)
        job.wait_for_dumps()
        verdict = diagnose(job, tmp_path)
    text = finding(verdict)
    print("VERDICT freeze:", text)
    assert verdict["root_cause"] == "collective-hung", text
    assert "every rank of pg 0 (default_pg) (2) entered all_reduce #4" in text
    assert "stalled_ranks" not in verdict
    # a transport question: the A/B test is offered, a drain never is
    kinds = [p["kind"] for p in verdict["proposals"]]
    assert "node-drain" not in kinds
