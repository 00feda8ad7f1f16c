"""The selections the rules check and their messages quote, decided in Python
(runbook/derived.py): each says exactly what the filter expression the rule held before said,
for any facts the parsers give, so a rule's `when:` names a fact and its message only formats."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runbook import derived
from tests.unit.test_derived import _drop_absent, _former, _maybe, _now

#: the expressions the rules' `when:` (and their messages' `{% set %}`) held before
FORMER = {
    "nccl_ib_missing_context": (
        "facts.applog.context | selectattr('signature', 'equalto', 'nccl-ib-missing') | list"
    ),
    "sigkilled_containers": "facts.kube.pod.containers | selectattr('sigkilled') | list",
    "pinning_alloc_failures": (
        "facts.dmesg.page_alloc_failures | selectattr('nvidia_pinning') | list"
    ),
    "other_alloc_failures": "facts.dmesg.page_alloc_failures | rejectattr('nvidia_pinning') | list",
    "sized_pin_failures": "facts.dmesg.pin_failures | selectattr('bytes') | list",
    "application_xids": (
        "facts.dmesg.xids | selectattr('category', 'equalto', 'application') | list"
    ),
}


def _record(**keys: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A parser's list item: each key absent, None or a value."""
    return st.fixed_dictionaries({k: _maybe(st.one_of(st.none(), v)) for k, v in keys.items()})


ITEMS = st.lists(
    st.one_of(
        _record(signature=st.sampled_from(["nccl-ib-missing", "nccl-socket", ""]),
                text=st.text(max_size=5)),
        _record(sigkilled=st.booleans(), name=st.sampled_from(["trainer", "sidecar"])),
        _record(nvidia_pinning=st.booleans(), order=st.integers(0, 9), comm=st.just("python")),
        _record(bytes=st.sampled_from([0, 4096, 1 << 30]), pages=st.integers(0, 9)),
        _record(category=st.sampled_from(["application", "hardware", "driver", ""]),
                code=st.integers(0, 150)),
    ),
    max_size=5,
)  # fmt: skip
#: a list the node gave (or, through _maybe, none at all)
LISTS = ITEMS

FACTS = st.fixed_dictionaries(
    {
        "applog": _maybe(st.fixed_dictionaries({"context": _maybe(LISTS)})),
        "kube": _maybe(st.fixed_dictionaries(
            {"pod": _maybe(st.fixed_dictionaries({"containers": _maybe(LISTS)}))})),
        "dmesg": _maybe(st.fixed_dictionaries({
            "page_alloc_failures": _maybe(LISTS), "pin_failures": _maybe(LISTS),
            "xids": _maybe(LISTS)})),
    }
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(facts=FACTS)
def test_each_selection_says_what_its_filter_said_for_any_facts(facts: dict[str, Any]) -> None:
    facts = _drop_absent(facts)
    assert _now(facts, {}, FORMER) == _former(facts, {}, FORMER)


def test_a_list_the_node_gave_as_none_selects_nothing() -> None:
    """(the filters could not iterate None and failed the stage; a predicate reads none)"""
    facts = {"applog": {"context": None}, "kube": {"pod": {"containers": None}},
             "dmesg": {"page_alloc_failures": None, "pin_failures": None, "xids": None}}
    assert all(derived.compute(name, facts, {}) == [] for name in FORMER)


def test_the_page_allocation_failures_are_split_by_where_they_happened() -> None:
    inside = {"nvidia_pinning": True, "order": 0, "comm": "python"}
    outside = {"nvidia_pinning": False, "order": 3, "comm": "kswapd0"}
    unsaid = {"order": 1, "comm": "x"}
    facts = {"dmesg": {"page_alloc_failures": [outside, inside, unsaid]}}
    assert derived.compute("pinning_alloc_failures", facts, {}) == [inside]
    assert derived.compute("other_alloc_failures", facts, {}) == [outside, unsaid]


def test_only_the_application_xids_and_the_sized_pin_failures_are_chosen() -> None:
    xids = [{"category": "hardware", "code": 79}, {"category": "application", "code": 13}]
    pins = [{"bytes": 0, "pages": 0}, {"bytes": 1 << 30, "pages": 262144}]
    facts = {"dmesg": {"xids": xids, "pin_failures": pins}}
    assert derived.compute("application_xids", facts, {}) == [xids[1]]
    assert derived.compute("sized_pin_failures", facts, {}) == [pins[1]]
    assert derived.compute("application_xids", {}, {}) == []
