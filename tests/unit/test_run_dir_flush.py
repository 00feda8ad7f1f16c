"""A guided run's evidence files are renamed into place whole but not fsynced one by one (about
three files a probe, once the walk's largest cost in system calls); the files a resume and a
report rest on — state.json after every stage, verdict.json, bundle.yaml — are. Counted on a
real walk over the demo incident with the real writer; only os.fsync and os.replace are
wrapped, to see which file each call was for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runbook.executor import execute
from runbook.rundir import RunDirectory
from runbook.spec.loader import load_file, resolve
from runbook.transports.replay import ReplayTransport

DEMO = Path(__file__).resolve().parents[2] / "runbook" / "demo" / "incident"
DURABLE = ("state.json", "verdict.json", "bundle.yaml")


def test_only_the_files_a_resume_rests_on_are_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def replace(src: str, dst: str, **kw: object) -> None:
        calls.append(f"rename {dst}")
        real_replace(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    runbook = load_file(resolve("nccl-init-failure"))
    directory = RunDirectory(tmp_path / "run")
    try:
        result = execute(runbook, ReplayTransport(DEMO), run_dir=directory)
    finally:
        directory.close()
    assert result.verdict.root_cause == "host-memory-oom"
    renames = [c.split()[1] for c in calls if c.startswith("rename")]
    assert renames.count("state.json") == len(runbook.stages)
    assert len([r for r in renames if r not in DURABLE]) > 40  # the evidence
    # each durable file is fsynced just before its rename; no evidence file is
    for i, call in enumerate(calls):
        if call.startswith("rename"):
            fsynced = i > 0 and calls[i - 1] == "fsync"
            assert fsynced == (call.split()[1] in DURABLE), calls[max(0, i - 2) : i + 1]
    # and the evidence is there, whole
    bundle = tmp_path / "run" / "bundle"
    assert (bundle / "dmesg.txt").read_text() == (DEMO / "dmesg.txt").read_text()


def test_state_json_is_the_whole_state_encoded_and_redacted_after_every_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """save_state reuses the JSON of records that did not change: after every stage of a real
    walk, state.json must still read as json.dumps(redact_data(state)) would write it, byte
    for byte — a credential in a fact redacted, a record that changed written anew."""
    import json

    from runbook.conductor import Conductor
    from runbook.redact import redact_data

    written: list[tuple[str, str]] = []
    real_save = RunDirectory.save_state

    def save_state(self: RunDirectory, state: dict) -> None:  # type: ignore[type-arg]
        real_save(self, state)
        whole = json.dumps(redact_data(state), default=str) + "\n"
        written.append(((self.path / "state.json").read_text(), whole))

    monkeypatch.setattr(RunDirectory, "save_state", save_state)
    real_record = Conductor.record

    def record(self: Conductor, stage_id: str, results, facts, errors=None):  # type: ignore[no-untyped-def]
        facts = {**facts, "leak": {"password": "hunter2", "note": "token=abc123def456"}}
        return real_record(self, stage_id, results, facts, errors)

    monkeypatch.setattr(Conductor, "record", record)
    runbook = load_file(resolve("nccl-init-failure"))
    directory = RunDirectory(tmp_path / "run")
    try:
        execute(runbook, ReplayTransport(DEMO), run_dir=directory)
    finally:
        directory.close()
    assert len(written) == len(runbook.stages)
    for on_disk, whole in written:
        assert on_disk == whole
        assert "hunter2" not in on_disk and "abc123def456" not in on_disk
    assert written[0][0] != written[-1][0]
