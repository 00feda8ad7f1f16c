"""The node-drain guards: label-selector parsing, the blast-radius rule, drainable verdicts."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from runbook.errors import UsageError
from runbook.remedies.guards import (
    GuardConfigError,
    SelectorError,
    drain_guard,
    parse_selector,
    selector_matches,
)
from runbook.remedies.kinds.drain import drain_allowed_for
from runbook.spec.models import ROOT_CAUSES

NODELIST = Path(__file__).parents[1] / "k8s" / "fixtures" / "nodes.json"
POOL = "nvidia.com/gpu.present=true"


def node(
    name: str, labels: dict[str, str] | None = None, *, cordoned: bool = False
) -> dict[str, Any]:
    spec: dict[str, Any] = {"unschedulable": True} if cordoned else {}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def pool(size: int, cordoned: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    return [
        node(f"gpu-{i:02d}", {"nvidia.com/gpu.present": "true"}, cordoned=i in cordoned)
        for i in range(size)
    ]


# --- label selectors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=b,c!=d,e", {"a": "b", "c": "x", "e": ""}, True),
        ("a=b,c!=d,e", {"a": "b", "e": "1"}, True),  # != matches an absent label
        ("a=b,c!=d,e", {"a": "b", "c": "d", "e": "1"}, False),
        ("a=b,c!=d,e", {"a": "b", "c": "x"}, False),  # e must exist
        ("a==b", {"a": "b"}, True),
        ("!gpu", {"cpu": "1"}, True),
        ("!gpu", {"gpu": ""}, False),
        ("zone in (x, y)", {"zone": "y"}, True),
        ("zone in (x,y)", {"zone": "z"}, False),
        ("zone in (x,y)", {}, False),
        ("zone notin (x,y)", {}, True),
        ("zone notin (x,y),tier=gpu", {"zone": "z", "tier": "gpu"}, True),
        ("zone notin (x,y)", {"zone": "x"}, False),
        ("nvidia.com/gpu.present=true", {"nvidia.com/gpu.present": "true"}, True),
        ("nvidia.com/gpu.present=true", {"nvidia.com/gpu.present": "false"}, False),
        ("", {"anything": "x"}, True),
        ("a=", {"a": ""}, True),
    ],
)
def test_label_selectors_match_as_kubernetes_does(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert selector_matches(selector, labels) is expected


def test_a_mapping_selector_is_matchlabels() -> None:
    assert selector_matches({"a": "b", "c": "d"}, {"a": "b", "c": "d", "x": "y"})
    assert not selector_matches({"a": "b", "c": "d"}, {"a": "b"})
    assert parse_selector({}) == ()


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [
        ("a=b,,c", "empty term"),
        ("a in (x,y", "unclosed"),
        ("a in x,y)", "unbalanced"),
        ("a in ((x))", "nested"),
        ("a in ()", "bad value set"),
        ("a = b c", "cannot parse"),
        ("a>1", "cannot parse"),
        ("-bad=1", "cannot parse"),
    ],
)
def test_a_bad_selector_is_refused_with_one_clear_line(selector: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as err:
        parse_selector(selector)
    assert fragment in str(err.value)
    assert repr(selector) in str(err.value)
    assert "\n" not in str(err.value)
    assert isinstance(err.value, UsageError)


# --- the blast-radius guard ----------------------------------------------------------------


def test_a_drain_in_a_healthy_pool_of_ten_is_allowed_at_exactly_the_fraction() -> None:
    result = drain_guard(pool(10), "gpu-03", max_cordoned=1, max_fraction=0.1, pool_selector=POOL)
    assert result.allowed
    assert result.pool_size == 10
    assert result.cordoned == []
    assert result.reason == (
        "drain of gpu-03 allowed: 0 other node(s) of the pool nvidia.com/gpu.present=true "
        "(10 nodes) already cordoned (none), limit 1; 1 of 10 cordoned after the drain = 0.10, "
        "limit 0.10"
    )


def test_a_pool_too_small_for_the_fraction_refuses_even_the_first_drain() -> None:
    result = drain_guard(pool(8), "gpu-03", max_cordoned=1, max_fraction=0.1, pool_selector=POOL)
    assert not result.allowed
    assert "1 of 8 cordoned after the drain = 0.12, limit 0.10" in result.reason
    assert result.reason.startswith("refusing to drain gpu-03: ")


def test_an_already_cordoned_node_reaching_the_count_limit_refuses() -> None:
    result = drain_guard(
        pool(40, cordoned=(5,)), "gpu-03", max_cordoned=1, max_fraction=0.5, pool_selector=POOL
    )
    assert not result.allowed
    assert result.cordoned == ["gpu-05"]
    assert (
        "1 other node(s) of the pool nvidia.com/gpu.present=true (40 nodes) already "
        "cordoned (gpu-05), limit 1" in result.reason
    )
    allowed = drain_guard(
        pool(40, cordoned=(5,)), "gpu-03", max_cordoned=2, max_fraction=0.5, pool_selector=POOL
    )
    assert allowed.allowed and "2 of 40 cordoned after the drain = 0.05" in allowed.reason


def test_the_fraction_limit_refuses_when_the_count_limit_would_allow() -> None:
    result = drain_guard(
        pool(20, cordoned=(1, 2)), "gpu-03", max_cordoned=5, max_fraction=0.1, pool_selector=POOL
    )
    assert not result.allowed
    assert "3 of 20 cordoned after the drain = 0.15, limit 0.10" in result.reason


def test_the_target_itself_being_cordoned_is_not_counted_against_it() -> None:
    result = drain_guard(
        pool(10, cordoned=(3,)), "gpu-03", max_cordoned=1, max_fraction=0.1, pool_selector=POOL
    )
    assert result.allowed
    assert result.cordoned == []


def test_a_node_outside_the_pool_is_refused() -> None:
    nodes = [*pool(10), node("cpu-01", {"node-pool": "system"})]
    result = drain_guard(nodes, "cpu-01", max_cordoned=1, max_fraction=0.1, pool_selector=POOL)
    assert not result.allowed
    assert result.reason == (
        "refusing to drain cpu-01: it is not in the pool nvidia.com/gpu.present=true (10 nodes)"
    )
    missing = drain_guard(nodes, "gpu-99", max_cordoned=1, max_fraction=0.1, pool_selector=POOL)
    assert not missing.allowed


def test_cordoned_nodes_outside_the_pool_do_not_count() -> None:
    nodes = [*pool(10), node("cpu-01", {"node-pool": "system"}, cordoned=True)]
    result = drain_guard(nodes, "gpu-01", max_cordoned=1, max_fraction=0.1, pool_selector=POOL)
    assert result.allowed and result.cordoned == []


def test_the_guard_reads_a_kubectl_nodelist() -> None:
    """The items of a NodeList as `kubectl get nodes -o json` writes it (tests/k8s/fixtures/)."""
    nodes = json.loads(NODELIST.read_text())["items"]
    result = drain_guard(nodes, "gpu-node-07", max_cordoned=1, max_fraction=0.1, pool_selector=POOL)
    assert result.allowed and result.pool_size == 10

    cordoned = copy.deepcopy(nodes)
    next(n for n in cordoned if n["metadata"]["name"] == "gpu-node-02")["spec"]["unschedulable"] = (
        True
    )
    refused = drain_guard(
        cordoned,
        "gpu-node-07",
        max_cordoned=1,
        max_fraction=0.1,
        pool_selector={"nvidia.com/gpu.present": "true"},
    )
    assert not refused.allowed
    assert refused.cordoned == ["gpu-node-02"]
    by_product = drain_guard(
        nodes,
        "gpu-node-07",
        max_cordoned=1,
        max_fraction=0.1,
        pool_selector="nvidia.com/gpu.product in (NVIDIA-H100-80GB-HBM3)",
    )
    assert by_product.pool_size == 10


@pytest.mark.parametrize(("max_cordoned", "max_fraction"), [(-1, 0.1), (1, 0.0), (1, 1.5)])
def test_nonsense_limits_are_a_usage_error(max_cordoned: int, max_fraction: float) -> None:
    with pytest.raises(GuardConfigError):
        drain_guard(
            pool(10),
            "gpu-01",
            max_cordoned=max_cordoned,
            max_fraction=max_fraction,
            pool_selector=POOL,
        )


# --- which verdicts may drain ----------------------------------------------------------------


def test_only_the_hardware_verdicts_of_the_runbook_may_drain() -> None:
    assert [c for c in ROOT_CAUSES if drain_allowed_for(c)] == ["gpu-hardware", "pcie-error"]
    assert not drain_allowed_for("GPU-HARDWARE")
    assert not drain_allowed_for("")
