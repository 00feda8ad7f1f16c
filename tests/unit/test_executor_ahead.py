"""Probes sent ahead: every probe whose command reads no earlier stage's facts goes out in the
first burst (the walk waits for one round trip, not one per stage), while a probe that reads
facts is rendered and sent when its stage comes, a stage with its own `when` is never sent
ahead, and the walk, its output and its verdict stay in the chain's order.

The transport here is a real replay of a real bundle, wrapped to watch the probes: it holds
every independent probe at a barrier until all of them are in flight at once — which only a
walk that sent them ahead can reach."""

from __future__ import annotations

import threading

from runbook.executor import PREAMBLE, NullObserver, execute
from runbook.spec.loader import load_file, load_text, resolve
from runbook.transports.base import CommandResult, Probe
from runbook.transports.replay import ReplayTransport
from tests.tools import bundles

BUNDLE = bundles.path("article-incident")

RUNBOOK = """
id: ahead
title: probes sent ahead (test)
vars:
  where: /dev/shm
stages:
  - id: first
    title: first
    collect:
      a.txt: "echo a"
      b.txt: "echo b {{ where }}"
    parse: text
    decide:
      - finding: "a says {{ facts.text['a.txt'].stdout | trim }}"
  - id: second
    title: second
    collect:
      c.txt: "echo c"
      dependent.txt: "echo {{ facts.text['a.txt'].stdout | trim }}-seen"
    parse: text
  - id: gated
    title: gated
    when: facts.text['a.txt'].stdout is search('never')
    collect:
      gated.txt: "echo gated"
    parse: text
  - id: third
    title: third
    collect:
      d.txt: "echo d"
    parse: text
"""


class Watched(ReplayTransport):
    """Echoes each command's words after `echo`; independent probes wait at a barrier."""

    def __init__(self, independent: int) -> None:
        super().__init__(BUNDLE)
        self.barrier = threading.Barrier(independent, timeout=10)
        self.order: list[str] = []
        self.lock = threading.Lock()

    def run(self, probe: Probe) -> CommandResult:
        with self.lock:
            self.order.append(probe.name)
        if probe.name in ("a.txt", "b.txt", "c.txt", "d.txt"):
            self.barrier.wait()  # BrokenBarrierError unless all four are in flight together
        if probe.command.startswith("echo "):
            return CommandResult(probe.name, probe.command, stdout=probe.command[5:] + "\n",
                                 exited=0)  # fmt: skip
        return super().run(probe)


class Seen(NullObserver):
    def __init__(self) -> None:
        self.stages: list[str] = []

    def stage_done(self, stage, record) -> None:  # type: ignore[no-untyped-def]
        self.stages.append(stage.id)


def test_independent_probes_go_in_one_burst_and_dependent_ones_when_their_stage_comes() -> None:
    runbook = load_text(RUNBOOK)
    transport = Watched(independent=4)
    seen = Seen()
    result = execute(runbook, transport, observer=seen, max_parallel=8)
    records = result.conductor.records
    statuses = {s: r.status.value for s, r in records.items()}
    assert statuses == {"first": "anomaly", "second": "ok", "gated": "skipped", "third": "ok"}
    # the dependent probe was rendered with the first stage's facts, after they existed
    assert result.results["dependent.txt"].stdout == "a-seen\n"
    order = transport.order[len(PREAMBLE):]
    assert set(order[:4]) == {"a.txt", "b.txt", "c.txt", "d.txt"}, order
    assert order[4:] == ["dependent.txt"], order
    # a stage with its own `when` was neither sent ahead nor run; the walk kept its order
    assert "gated.txt" not in transport.order
    assert seen.stages == ["first", "second", "gated", "third"]
    assert [f.text for f in records["first"].findings] == ["a says a"]


def test_the_shipped_runbook_gives_the_same_verdict_sent_ahead_or_one_stage_at_a_time() -> None:
    runbook = load_file(resolve("nccl-init-failure"))
    transport = ReplayTransport(BUNDLE)
    ahead = execute(runbook, transport).verdict.to_json()
    sequential = execute(runbook, transport, max_parallel=1).verdict.to_json()
    for verdict in (ahead, sequential):
        verdict.pop("duration_s", None)
    assert ahead == sequential
    assert ahead["root_cause"] == "host-memory-oom"


class Hinted(Watched):
    """A transport that starts its next channel ahead (kubectl exec): it is told, before each
    burst, whether the walk may send another after it."""

    def __init__(self, independent: int) -> None:
        super().__init__(independent)
        self.hints: list[bool] = []

    def expect_more(self, more: bool) -> None:
        self.hints.append(more)


def test_the_transport_is_told_when_no_burst_can_follow_so_it_starts_none_ahead() -> None:
    transport = Hinted(independent=4)
    result = execute(load_text(RUNBOOK), transport, max_parallel=8)
    assert result.results["dependent.txt"].stdout == "a-seen\n"
    # the preamble, every independent probe ahead, then each stage's own probes as it comes:
    # after the first stage, `second` still has a probe that reads its facts (a burst to come);
    # after `second`'s, none: `gated` runs on some evidence only (its channel is started when
    # it runs), and `third`'s probe was sent ahead
    assert transport.hints == [True, True, True, False, False], transport.hints
