"""The bundle corpus: every evidence bundle under tests/bundles/ analysed the way
`runbook analyze BUNDLE --format json` analyses it, and held to its expected.yaml.

expected.yaml keys (all but `root_cause` optional):

- `proves`: what the bundle is for (one sentence, for humans)
- `vars`: passed as `--var NAME=VALUE`, as an operator would (e.g. `cgroup_dir` for `--cgroup`)
- `runbook`: the runbook to analyse with (default nccl-init-failure; a hang's: nccl-hang)
- `root_cause`, `root_cause_not` (list), `confidence`, `surfaced_as_contains`
- `first_anomaly`: `{source, line}` of the verdict's first anomaly (line only where meaningful)
- `chain_contains` / `chain_excludes`: substrings that some / no chain finding holds
- `also_seen_contains`: substrings that some finding listed apart (`also_seen`) holds: an
  anomaly that is not part of the causal chain (a neighbour's OOM, a stale label)
- `chain_causes`: causes some chain finding must carry
- `facts`: `[{stage, path, equals}]` (path dotted into that stage's facts; integers index lists)
  or `{stage, path, contains}` for a substring of the value
- `stage_status`: stage id -> status
- `ruled_out` / `not_ruled_out`: causes that must / must not appear in ruled_out
- `proposals` / `no_proposals`: proposal kinds that must / must not appear
- `collect_more_mentions`: substrings the collect-more proposal's summary must hold
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from runbook.cli.app import cli
from tests.tools import bundles

NAMES = [n for n in bundles.names() if (bundles.path(n) / "expected.yaml").is_file()]
ROOT_CAUSES = {
    "host-memory-oom", "gpu-memory-oom", "gpu-hardware", "pcie-error", "shm-exhausted",
    "p2p-unavailable", "rdma-misconfigured", "network-socket", "peer-rank-exited", "healthy",
    "inconclusive", "collective-desync", "rank-stalled", "collective-hung",
}  # fmt: skip
MEMORY_VERDICTS = {"host-memory-oom", "gpu-memory-oom", "shm-exhausted"}
HARDWARE_VERDICTS = {"gpu-hardware", "pcie-error"}


def expected(name: str) -> dict[str, Any]:
    data = yaml.safe_load((bundles.path(name) / "expected.yaml").read_text())
    assert isinstance(data, dict), f"{name}/expected.yaml is not a mapping"
    return data


@functools.cache
def verdict(name: str) -> dict[str, Any]:
    args = ["analyze", str(bundles.path(name)), "--format", "json"]
    if expected(name).get("runbook"):  # a hang's bundle is read by nccl-hang
        args += ["--runbook", str(expected(name)["runbook"])]
    for key, value in (expected(name).get("vars") or {}).items():
        args += ["--var", f"{key}={value}"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def stage_facts(v: dict[str, Any], stage: str) -> dict[str, Any]:
    found = [s for s in v["stages"] if s["id"] == stage]
    assert found, f"no stage {stage!r} in the verdict"
    facts: dict[str, Any] = found[0]["facts"]
    return facts


def dig(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict):
            assert part in value, f"{part!r} not in {sorted(value)[:20]} (path {path})"
            value = value[part]
        else:
            raise AssertionError(f"cannot descend into {value!r} at {part!r} (path {path})")
    return value


def findings(v: dict[str, Any]) -> list[str]:
    return [c["finding"] for c in v["chain"]]


def kinds(v: dict[str, Any]) -> list[str]:
    return [p["kind"] for p in v["proposals"]]


by_bundle = pytest.mark.parametrize("name", NAMES)


def test_the_corpus_has_a_bundle_for_every_root_cause() -> None:
    covered = {expected(n)["root_cause"] for n in NAMES}
    assert ROOT_CAUSES <= covered, f"no bundle for {sorted(ROOT_CAUSES - covered)}"


def test_every_bundle_directory_has_a_bundle_yaml_and_an_expected_verdict() -> None:
    dirs = bundles.names()
    assert dirs == NAMES
    for name in dirs:
        meta = yaml.safe_load((bundles.path(name) / "bundle.yaml").read_text())
        assert meta["format"] == 1 and meta["node"] and meta["collected_at"], name
        assert expected(name).get("proves"), f"{name}/expected.yaml says nothing it proves"


@by_bundle
def test_the_verdict_names_the_expected_root_cause(name: str) -> None:
    want = expected(name)
    v = verdict(name)
    assert v["root_cause"] == want["root_cause"], findings(v)
    assert v["root_cause"] not in want.get("root_cause_not", [])
    if "confidence" in want:
        assert v["confidence"] == want["confidence"]
    if "surfaced_as_contains" in want:
        assert want["surfaced_as_contains"] in (v["surfaced_as"] or "")


@pytest.mark.parametrize("name", [n for n in NAMES if "first_anomaly" in expected(n)])
def test_the_first_anomaly_is_the_expected_evidence(name: str) -> None:
    want = expected(name)["first_anomaly"]
    if want is None:
        assert verdict(name)["first_anomaly"] is None
        return
    first = verdict(name)["first_anomaly"] or {}
    for key, value in want.items():
        assert first.get(key) == value, first


@by_bundle
def test_the_evidence_chain_says_what_the_bundle_shows(name: str) -> None:
    want = expected(name)
    v = verdict(name)
    text = "\n".join(findings(v))
    for needle in want.get("chain_contains", []):
        assert needle in text, f"{needle!r} not in the chain:\n{text}"
    for needle in want.get("chain_excludes", []):
        assert needle not in text, f"{needle!r} is in the chain:\n{text}"
    also = "\n".join(c["finding"] for c in v.get("also_seen", []))
    for needle in want.get("also_seen_contains", []):
        assert needle in also, f"{needle!r} not in also_seen:\n{also}"
        assert needle not in text, f"{needle!r} is in the chain too:\n{text}"
    causes = {c.get("cause") for c in v["chain"]}
    for cause in want.get("chain_causes", []):
        assert cause in causes, f"no finding blames {cause}:\n{text}"


@by_bundle
def test_the_key_facts_are_parsed_from_the_real_formats(name: str) -> None:
    v = verdict(name)
    for fact in expected(name).get("facts", []):
        value = dig(stage_facts(v, fact["stage"]), fact["path"])
        if "equals" in fact:
            assert value == fact["equals"], f"{fact['stage']}:{fact['path']} = {value!r}"
        if "contains" in fact:
            assert fact["contains"] in str(value), f"{fact['stage']}:{fact['path']} = {value!r}"
    statuses = {s["id"]: s["status"] for s in v["stages"]}
    for stage, status in (expected(name).get("stage_status") or {}).items():
        assert statuses[stage] == status, statuses


@by_bundle
def test_the_causes_the_evidence_excludes_are_ruled_out(name: str) -> None:
    want = expected(name)
    out = {r["cause"]: r["because"] for r in verdict(name)["ruled_out"]}
    for cause in want.get("ruled_out", []):
        assert cause in out, f"{cause} not ruled out; ruled out: {out}"
    for cause in want.get("not_ruled_out", []):
        assert cause not in out, f"{cause} ruled out: {out[cause]}"


@by_bundle
def test_the_expected_fixes_are_proposed_and_no_others_that_are_forbidden(name: str) -> None:
    want = expected(name)
    v = verdict(name)
    for kind in want.get("proposals", []):
        assert kind in kinds(v), kinds(v)
    for kind in want.get("no_proposals", []):
        assert kind not in kinds(v), kinds(v)
    for p in v["proposals"]:
        assert not p.get("errors"), p
    mentions = want.get("collect_more_mentions", [])
    if mentions:
        summaries = " ".join(p["summary"] for p in v["proposals"] if p["kind"] == "collect-more")
        for needle in mentions:
            assert needle in summaries, summaries


@by_bundle
def test_a_node_is_drained_only_on_hardware_evidence(name: str) -> None:
    v = verdict(name)
    if "node-drain" in kinds(v):
        assert v["root_cause"] in HARDWARE_VERDICTS, v["root_cause"]
        blamed = {c.get("cause") for c in v["chain"]}
        assert blamed & HARDWARE_VERDICTS
    if v["root_cause"] in MEMORY_VERDICTS | {"healthy", "inconclusive"}:
        assert "node-drain" not in kinds(v)


@pytest.mark.parametrize("name", [n for n in NAMES if expected(n)["root_cause"] == "inconclusive"])
def test_an_inconclusive_verdict_says_what_to_collect_next(name: str) -> None:
    v = verdict(name)
    assert v["root_cause"] == "inconclusive"
    more = [p for p in v["proposals"] if p["kind"] == "collect-more"]
    assert more and more[0]["summary"].strip(), v["proposals"]


@by_bundle
def test_no_stage_failed_on_a_rule_or_parser_error(name: str) -> None:
    for stage in verdict(name)["stages"]:
        assert not stage.get("errors"), (stage["id"], stage.get("errors"))
