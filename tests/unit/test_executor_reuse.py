"""The executor fetches a file once when several stages collect it with the same command (the
shipped runbook reads NCCL's logs in three stages): one round trip per file, the same content
for every parser. Real bundle, real replay transport; the transport only counts its calls."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from runbook.executor import execute
from runbook.spec.loader import load_file, resolve
from runbook.transports.base import CommandResult, Probe
from runbook.transports.replay import ReplayTransport
from tests.tools import bundles

BUNDLE = bundles.path("peer-rank-exited")


class CountingReplay(ReplayTransport):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: Counter[str] = Counter()

    def run(self, probe: Probe) -> CommandResult:
        self.calls[probe.name] += 1
        return super().run(probe)


def test_a_file_collected_by_several_stages_is_fetched_once_and_parsed_by_each() -> None:
    runbook = load_file(resolve("nccl-init-failure"))
    stages_reading = [
        s.id for s in runbook.stages if any(c.name == "nccl/*.log" for c in s.collect)
    ]
    assert len(stages_reading) >= 2, stages_reading
    transport = CountingReplay(BUNDLE)
    try:
        result = execute(runbook, transport, collect_all=True)
    finally:
        transport.close()
    # NCCL's logs and the nccl-tests outputs are each read by two or three stages
    assert transport.calls["nccl/*.log"] == 1, transport.calls
    assert transport.calls["nccl-tests/*.txt"] == 1, transport.calls
    for stage_id in stages_reading:
        facts = result.conductor.records[stage_id].facts
        assert any(isinstance(f, dict) and f.get("collected") for f in facts.values()), stage_id
