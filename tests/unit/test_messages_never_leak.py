"""Every message of every shipped runbook, rendered from facts with any of them missing, is
text for a person: never template source, never a word of Jinja's error vocabulary.

A node is rarely complete: an SSH or Slurm node has no node.json, a node without NCCL logs has
no `nccl_log` facts, a stage that failed left nothing. Each message (a rule's finding, a
rule-out's reason, a remedy's summary and params) is rendered here the way the walk renders it
(Conductor.record, and the verdict's proposals), from the facts the recorded corpus
(tests/bundles) gives, with groups of facts and random sets of keys taken away.

Every rule is made to match (its `when`, `else` and routing dropped), so each message is
rendered whatever its condition would say of the facts drawn; the stage's own `derive` facts
are computed from them as in a walk.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runbook import diagnosis
from runbook.conductor import Conductor
from runbook.session import analyze
from runbook.spec import load_file
from runbook.spec.loader import SHIPPED_DIR, shipped
from runbook.spec.models import Runbook, Stage
from tests.tools import bundles

#: what must never reach a person: template source, or Jinja's word for a missing value
LEAK = re.compile(r"\{\{|\{%|undefined", re.IGNORECASE)

#: the optional groups of facts a node commonly lacks, as dotted paths under `facts`: no
#: Kubernetes (an SSH or Slurm node), no node object, no NCCL logs, no RDMA tools, no
#: nvidia-smi, no host files, no memory cgroup, no derived facts (their stage failed)
GROUPS = ("kube", "kube.node", "nccl_log", "rdma", "nvidia_smi", "host", "cgroup", "derived")
#: further groups, drawn by the property test with random sets of keys
MORE_GROUPS = ("kube.pod", "applog", "dmesg", "journal", "procmem", "dcgm", "nccl_tests")

#: bundles whose facts are the drawn bases (one of each kind of fault, and the healthy node)
BASES = (
    "healthy", "rdma-misconfigured-multinode", "host-oom-cgroup-dir-v2", "gpu-hardware-xid79",
    "gpu-hardware-ecc-remap", "shm-exhausted", "p2p-unavailable", "network-socket",
    "pcie-fatal-aer", "oom-other-cgroup", "rdma-label-single-node", "peer-rank-exited",
    "real-shm-exhausted-nccl-docker-64m", "real-healthy-nccl-tests-3node-a100-hdr",
    "xid-application-13-31-43",
)  # fmt: skip


def _deep_merge(into: dict[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in more.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        elif key not in into or not into[key]:
            into[key] = _copy(value)
    return into


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@functools.cache
def _bases() -> tuple[dict[str, Any], ...]:
    """Each base bundle's facts as its walk left them, and all of them merged into one node
    that has everything (what no single bundle has: every template's every branch)."""
    found = []
    for name in BASES:
        if name not in bundles.names():
            continue
        found.append(analyze(bundles.path(name), "nccl-init-failure", {}).conductor.facts())
    assert found, "no base bundle found"
    merged: dict[str, Any] = {}
    for facts in found:
        _deep_merge(merged, facts)
    return (merged, *found)


def _paths(value: Mapping[str, Any], prefix: str = "", depth: int = 3) -> Iterator[str]:
    for key, item in value.items():
        path = f"{prefix}{key}"
        yield path
        if depth > 1 and isinstance(item, Mapping):
            yield from _paths(item, path + ".", depth - 1)


@functools.cache
def _all_paths() -> tuple[str, ...]:
    every = {*GROUPS, *MORE_GROUPS, *(p for base in _bases() for p in _paths(base))}
    return tuple(sorted(every))


def _without(facts: Mapping[str, Any], paths: set[str] | tuple[str, ...]) -> dict[str, Any]:
    out = _copy(facts)
    for path in paths:
        *parents, last = path.split(".")
        node: Any = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return out


@functools.cache
def _runbooks() -> tuple[Runbook, ...]:
    return tuple(load_file(SHIPPED_DIR / f"{name}.yaml") for name in shipped())


def _every_rule_matches(stage: Stage) -> Stage:
    rules = tuple(
        dataclasses.replace(rule, when=None, otherwise=False, next=None, conclude=None)
        for rule in stage.decide
    )
    return dataclasses.replace(stage, decide=rules, match="all", when=None)


_OPENED: dict[str, Runbook] = {}


def _opened(runbook: Runbook) -> Runbook:
    """`runbook` with a first stage that only holds the drawn facts, and every rule matching."""
    if runbook.id in _OPENED:
        return _OPENED[runbook.id]
    holder = Stage("drawn-facts", "drawn facts")
    stages = (holder, *(_every_rule_matches(s) for s in runbook.stages))
    _OPENED[runbook.id] = dataclasses.replace(runbook, stages=stages)
    return _OPENED[runbook.id]


def _messages(runbook: Runbook, facts: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, text) for every message `runbook` renders from `facts`, and every error its
    stages and proposals record while rendering them."""
    opened = _opened(runbook)
    for stage in opened.stages[1:]:
        conductor = Conductor(opened)
        conductor.records["drawn-facts"].facts = dict(facts)  # read, never changed
        conductor.path = ["drawn-facts"]
        record = conductor.record(stage.id, {}, {})
        for finding in record.findings:
            yield f"{stage.id} finding {finding.rule + 1}", finding.text
        for out in record.ruled_out:
            yield f"{stage.id} rules out {out['cause']}", out["because"]
        for error in record.errors:
            yield f"{stage.id} error", error
    conductor = Conductor(opened)
    conductor.records["drawn-facts"].facts = dict(facts)
    conductor.path = ["drawn-facts"]
    context = conductor.context()
    for remedy in runbook.remedies:
        proposal = diagnosis._proposal(conductor, remedy.id, context)
        yield f"remedy {remedy.id} summary", proposal["summary"]
        for key, value in proposal["params"].items():
            yield f"remedy {remedy.id} param {key}", str(value)
        for error in proposal.get("errors", []):
            yield f"remedy {remedy.id} error", error


def _leaks(facts: Mapping[str, Any]) -> list[str]:
    return [
        f"{runbook.id} {where}: {text[:200]}"
        for runbook in _runbooks()
        for where, text in _messages(runbook, facts)
        if LEAK.search(text)
    ]


def test_the_shipped_runbooks_have_messages_to_render() -> None:
    count = sum(1 for runbook in _runbooks() for _ in _messages(runbook, _bases()[0]))
    assert count > 60, count


def test_no_message_leaks_template_text_whichever_groups_of_facts_are_missing() -> None:
    """Every combination of the common groups (256), over the node that has everything."""
    base = _bases()[0]
    found = []
    for size in range(len(GROUPS) + 1):
        for dropped in itertools.combinations(GROUPS, size):
            without = _without(base, dropped)
            found += [f"without {', '.join(dropped) or 'nothing'}: {leak}" for leak in
                      _leaks(without)]  # fmt: skip
    assert not found, "\n".join(found[:20])


def test_no_message_leaks_template_text_on_a_node_without_node_json() -> None:
    """The field's commonest case (an SSH or Slurm node: `kubectl get node` gives nothing),
    on the bundle where it was first seen."""
    base = _bases()[BASES.index("rdma-misconfigured-multinode") + 1]
    leaks = _leaks(_without(base, ("kube.node",)))
    assert not leaks, "\n".join(leaks)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_no_message_leaks_template_text_whatever_facts_are_missing(data: st.DataObject) -> None:
    base = _bases()[data.draw(st.integers(0, len(_bases()) - 1), label="base")]
    dropped = data.draw(st.sets(st.sampled_from(_all_paths()), max_size=12), label="dropped")
    leaks = _leaks(_without(base, dropped))
    assert not leaks, "\n".join(leaks[:20])
