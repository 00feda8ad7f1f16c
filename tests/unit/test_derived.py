"""Derived facts decided in Python (runbook/derived.py): what each predicate says, that it says
what the runbook's expressions said before them for every combination of facts, that a node
missing any fact gets an answer, and how a runbook names them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook import derived, templating
from runbook.conductor import Conductor
from runbook.spec import load_text
from runbook.spec.inspect import names_of
from runbook.spec.loader import SHIPPED_DIR, read
from runbook.spec.models import Stage

RDMA_SOCKET = ["multi_node", "single_node", "expects_ib", "ib_missing_for_job", "rdma_fine_because"]

#: the rdma-socket stage's `derive:` expressions as the runbook held them before they moved
#: here: the reference the predicates are held to
FORMER = {
    "multi_node": (
        "true if (nodes > 1 or (facts.nccl_log.nnodes or 0) > 1"
        " or (facts.nccl_log.transport_kinds | select('match', 'NET/') | list)"
        " or (facts.nccl_log.nranks and facts.nvidia_smi.gpu_count"
        " and facts.nccl_log.nranks > facts.nvidia_smi.gpu_count)) else false"
    ),
    "single_node": (
        "true if (nodes == 1 or (not facts.derived.multi_node and (facts.nccl_log.nnodes == 1"
        " or (facts.nccl_log.nranks and facts.nvidia_smi.gpu_count"
        " and facts.nccl_log.nranks <= facts.nvidia_smi.gpu_count)))) else false"
    ),
    "expects_ib": (
        "true if (facts.kube.node.rdma_labels or facts.nccl_log.env.NCCL_NET == 'IB'"
        " or facts.nccl_log.env.NCCL_IB_HCA or facts.nccl_log.env.NCCL_IB_DISABLE == '0')"
        " else false"
    ),
    "ib_missing_for_job": (
        "true if (facts.rdma.collected and not facts.rdma.usable"
        " and not facts.nccl_log.warn_categories.ib"
        " and (facts.derived.multi_node or facts.nccl_log.warn_categories['ib-missing'])"
        " and facts.derived.expects_ib"
        " and (facts.nccl_log.warns or facts.nccl_log.first_result_code)) else false"
    ),
    "rdma_fine_because": (
        "'no IB verbs failure ' ~ ('in the NCCL logs' if facts.nccl_log.collected"
        " else '(NCCL logs not collected)') ~ ('' if facts.rdma.usable"
        " else ('; the node has no RDMA device, which a single-node job does not need'"
        " if facts.derived.single_node"
        " else ('; the node has no RDMA device, and nothing shows this job spanning nodes"
        " (a single-node job does not need one)' if not facts.derived.multi_node"
        " else '; the node has no RDMA device and NCCL did not fail for want of one')))"
    ),
}


#: the gpu-pcie and shm-p2p stages' former expressions, the same way
FORMER_GPU = {
    "gpus_missing": (
        "true if (facts.rdma.gpus_on_pci and facts.nvidia_smi.gpu_count"
        " and facts.nvidia_smi.gpu_count < facts.rdma.gpus_on_pci) else false"
    ),
    "gpu_drain_fault": (
        "true if (facts.nvidia_smi.gpu_lost or facts.nvidia_smi.remap_failure"
        " or (facts.nvidia_smi.uncorrectable_ecc_volatile or 0) > 0"
        " or facts.nvidia_smi.retired_pages_pending or facts.derived.gpus_missing"
        " or (facts.nvidia_smi.recovery_actions | selectattr('action', 'search',"
        " '(?i)drain|reboot') | list)) else false"
    ),
    "p2p_warns": (
        "facts.nccl_log.warns | selectattr('message', 'search',"
        " '(?i)peer access|peer mapping|P2P|cudaIpc|IPC handle') | list"
    ),
}


def _former(
    facts: dict[str, Any], variables: dict[str, Any], former: dict[str, str] = FORMER
) -> dict[str, Any]:
    """What the former expressions gave, each seeing the ones before it (as a stage did)."""
    found: dict[str, Any] = {}
    for name, expression in former.items():
        ctx = {**variables, "facts": {**facts, "derived": dict(found)}}
        found[name] = templating.evaluate(expression, ctx)
    return found


def _now(
    facts: dict[str, Any], variables: dict[str, Any], former: dict[str, str] = FORMER
) -> dict[str, Any]:
    return {name: derived.compute(name, facts, variables) for name in former}


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A fact the node may not have given: absent one time in five (the key dropped below),
    else a value (absent half the time, a fact deep down would rarely meet its siblings)."""
    return st.integers(0, 4).flatmap(lambda n: st.just(ABSENT) if n == 0 else strategy)


ABSENT = object()
COUNTS = st.one_of(st.none(), st.integers(0, 20))


def _drop_absent(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_absent(v) for k, v in value.items() if v is not ABSENT}
    return value


NCCL_LOG = st.fixed_dictionaries(
    {
        "collected": _maybe(st.booleans()),
        "nnodes": _maybe(COUNTS),
        "nranks": _maybe(COUNTS),
        "transport_kinds": _maybe(
            st.lists(st.sampled_from(["P2P/IPC", "SHM", "NET/IB", "NET/Socket", "CollNet"]))
        ),
        "env": _maybe(
            st.fixed_dictionaries(
                {
                    "NCCL_NET": _maybe(st.sampled_from(["IB", "Socket", ""])),
                    "NCCL_IB_HCA": _maybe(st.sampled_from(["mlx5", ""])),
                    "NCCL_IB_DISABLE": _maybe(st.sampled_from(["0", "1"])),
                }
            )
        ),
        "warn_categories": _maybe(
            st.dictionaries(
                st.sampled_from(["ib", "ib-missing", "socket", "shm"]),
                st.integers(1, 3),
                max_size=2,
            )
        ),
        "warns": _maybe(st.lists(st.fixed_dictionaries({"message": st.just("x")}), max_size=2)),
        "first_result_code": _maybe(st.one_of(st.none(), st.integers(0, 7))),
    }
)
FACTS = st.fixed_dictionaries(
    {
        "nccl_log": _maybe(NCCL_LOG),
        "nvidia_smi": _maybe(st.fixed_dictionaries({"gpu_count": _maybe(COUNTS)})),
        "rdma": _maybe(
            st.fixed_dictionaries(
                {"collected": _maybe(st.booleans()), "usable": _maybe(st.booleans())}
            )
        ),
        "kube": _maybe(
            st.fixed_dictionaries(
                {
                    "node": _maybe(
                        st.fixed_dictionaries(
                            {
                                "rdma_labels": _maybe(
                                    st.dictionaries(
                                        st.sampled_from(["rdma/ib", "nvidia.com/rdma"]),
                                        st.just("true"),
                                    )
                                )
                            }
                        )
                    )
                }
            )
        ),
    }
)


@settings(max_examples=400, deadline=None)
@given(facts=FACTS, nodes=st.integers(0, 4))
def test_the_predicates_say_what_the_runbooks_expressions_said_for_any_facts(
    facts: dict[str, Any], nodes: int
) -> None:
    facts = _drop_absent(facts)
    variables = {"nodes": nodes}
    assert _now(facts, variables) == _former(facts, variables)


TEXTS = st.sampled_from(
    [None, 3, "", "None", "Drain and Reset", "Reboot", "RESET", "GPU peer access failed",
     "cudaIpcOpenMemHandle failed", "IPC handle", "P2P/IPC", "socket timeout"]
)  # fmt: skip


def _items(key: str) -> st.SearchStrategy[list[Any]]:
    """Lists of mappings with `key` (or without it, or not mappings at all)."""
    return st.lists(
        st.one_of(
            st.fixed_dictionaries({key: TEXTS}),
            st.fixed_dictionaries({"gpu": TEXTS}),
            st.just("not a mapping"),
        ),
        max_size=3,
    )


GPU_FACTS = st.fixed_dictionaries(
    {
        "nvidia_smi": _maybe(
            st.fixed_dictionaries(
                {
                    "gpu_count": _maybe(COUNTS),
                    "gpu_lost": _maybe(st.booleans()),
                    "remap_failure": _maybe(st.one_of(st.none(), st.booleans())),
                    "uncorrectable_ecc_volatile": _maybe(COUNTS),
                    "retired_pages_pending": _maybe(st.one_of(st.none(), st.booleans())),
                    "recovery_actions": _maybe(_items("action")),
                }
            )
        ),
        "rdma": _maybe(st.fixed_dictionaries({"gpus_on_pci": _maybe(COUNTS)})),
        "nccl_log": _maybe(st.fixed_dictionaries({"warns": _maybe(_items("message"))})),
    }
)


@settings(max_examples=300, deadline=None)
@given(facts=GPU_FACTS)
def test_the_gpu_and_p2p_predicates_say_what_their_expressions_said_for_any_facts(
    facts: dict[str, Any],
) -> None:
    facts = _drop_absent(facts)
    assert _now(facts, {}, FORMER_GPU) == _former(facts, {}, FORMER_GPU)


@pytest.mark.parametrize(
    "smi",
    [{"gpu_lost": True}, {"remap_failure": True}, {"uncorrectable_ecc_volatile": 2},
     {"retired_pages_pending": True}],
)  # fmt: skip
def test_each_hardware_fault_alone_justifies_a_drain(smi: dict[str, Any]) -> None:
    assert derived.compute("gpu_drain_fault", {"nvidia_smi": smi}, {}) is True
    healthy = {key: False if value is True else 0 for key, value in smi.items()}
    assert derived.compute("gpu_drain_fault", {"nvidia_smi": healthy}, {}) is False


def test_a_drain_is_justified_by_a_recovery_action_or_missing_gpus_not_a_reset() -> None:
    reset = {"nvidia_smi": {"recovery_actions": [{"gpu": 0, "action": "GPU Reset"}]}}
    assert derived.compute("gpu_drain_fault", reset, {}) is False
    for action in ("Drain and Reset", "Node Reboot Required"):
        drain = {"nvidia_smi": {"recovery_actions": [{"gpu": 0, "action": action}]}}
        assert derived.compute("gpu_drain_fault", drain, {}) is True, action
    missing = {"nvidia_smi": {"gpu_count": 7}, "rdma": {"gpus_on_pci": 8}}
    assert derived.compute("gpus_missing", missing, {}) is True
    assert derived.compute("gpu_drain_fault", missing, {}) is True
    assert derived.compute("gpus_missing", {"nvidia_smi": {"gpu_count": 8}}, {}) is False


def test_p2p_warns_are_nccls_warnings_about_peer_access_only() -> None:
    warns = [
        {"message": "Cuda failure 'peer access is not supported'"},
        {"message": "timeout"},
        {"message": "cudaIpcOpenMemHandle failed"},
        {"message": "failed to get peer mapping"},
        {"message": "invalid IPC handle"},
        {"message": "P2P is disabled"},
        {"text": "no message"},
    ]
    found = derived.compute("p2p_warns", {"nccl_log": {"warns": warns}}, {})
    assert found == [warns[0], *warns[2:6]]
    assert derived.compute("p2p_warns", {}, {}) == []


def test_a_node_that_gave_no_facts_at_all_gets_an_answer_not_an_error() -> None:
    assert _now({}, {"nodes": 0}) == {
        "multi_node": False,
        "single_node": False,
        "expects_ib": False,
        "ib_missing_for_job": False,
        "rdma_fine_because": (
            "no IB verbs failure (NCCL logs not collected); the node has no RDMA device, and "
            "nothing shows this job spanning nodes (a single-node job does not need one)"
        ),
    }


@pytest.mark.parametrize(
    ("facts", "variables", "spans"),
    [
        ({"nccl_log": {"nnodes": 2}}, {}, True),
        ({"nccl_log": {"transport_kinds": ["P2P/IPC", "NET/IB"]}}, {}, True),
        ({"nccl_log": {"nranks": 16}, "nvidia_smi": {"gpu_count": 8}}, {}, True),
        ({"nccl_log": {"nranks": 8}, "nvidia_smi": {"gpu_count": 8}}, {}, False),
        ({}, {"nodes": 3}, True),
        ({}, {"nodes": "three"}, False),  # a word for a count is no count
    ],
)
def test_a_job_spans_nodes_by_the_var_or_by_what_nccl_logged(
    facts: dict[str, Any], variables: dict[str, Any], spans: bool
) -> None:
    assert derived.compute("multi_node", facts, variables) is spans


def test_the_var_nodes_1_says_single_node_whatever_the_logs_say() -> None:
    facts = {"nccl_log": {"nnodes": 2}}
    assert derived.compute("single_node", facts, {"nodes": 1}) is True
    assert derived.compute("single_node", facts, {}) is False
    assert derived.compute("single_node", {"nccl_log": {"nnodes": 1}}, {}) is True


def test_a_label_or_nccls_settings_make_ib_expected_and_no_node_json_is_no_error() -> None:
    assert derived.compute("expects_ib", {"kube": {"node": {"rdma_labels": {"rdma": "1"}}}}, {})
    assert derived.compute("expects_ib", {"nccl_log": {"env": {"NCCL_IB_DISABLE": "0"}}}, {})
    assert not derived.compute("expects_ib", {"nccl_log": {"env": {"NCCL_IB_DISABLE": "1"}}}, {})
    assert not derived.compute("expects_ib", {"kube": {"pod": {}}}, {})  # no node.json


def test_ib_is_missing_for_a_job_only_when_nccl_failed_needing_it() -> None:
    facts: dict[str, Any] = {
        "rdma": {"collected": True, "usable": False},
        "nccl_log": {"nnodes": 2, "env": {"NCCL_NET": "IB"}, "warns": [{"message": "no IB"}]},
    }
    assert derived.compute("ib_missing_for_job", facts, {}) is True
    quiet = {**facts, "nccl_log": {**facts["nccl_log"], "warns": []}}
    assert derived.compute("ib_missing_for_job", quiet, {}) is False
    verbs = {**facts, "nccl_log": {**facts["nccl_log"], "warn_categories": {"ib": 1}}}
    assert derived.compute("ib_missing_for_job", verbs, {}) is False  # another rule's finding
    unread = {**facts, "rdma": {"collected": False}}
    assert derived.compute("ib_missing_for_job", unread, {}) is False


def test_why_rdma_is_fine_is_one_sentence_for_each_case() -> None:
    usable = {"rdma": {"usable": True}, "nccl_log": {"collected": True}}
    assert derived.compute("rdma_fine_because", usable, {}) == (
        "no IB verbs failure in the NCCL logs"
    )
    single = {"rdma": {"usable": False}, "nccl_log": {"collected": True, "nnodes": 1}}
    assert derived.compute("rdma_fine_because", single, {}).endswith(
        "; the node has no RDMA device, which a single-node job does not need"
    )
    multi = {"rdma": {"usable": False}, "nccl_log": {"collected": True, "nnodes": 2}}
    assert derived.compute("rdma_fine_because", multi, {}).endswith(
        "; the node has no RDMA device and NCCL did not fail for want of one"
    )


def test_every_registered_predicate_has_a_summary() -> None:
    assert set(RDMA_SOCKET) <= derived.names()
    assert all(derived.get(name).summary for name in derived.names())


# -- how a runbook names them ---------------------------------------------------------------


def _stage(derive: str) -> str:
    return (
        "id: x\nstages:\n  - id: a\n    parse: [nccl_log]\n"
        f"    derive: {derive}\n"
        "    decide:\n      - when: facts.derived.multi_node\n        finding: spans\n"
    )


def test_a_stage_lists_python_derived_facts_by_name_and_may_mix_in_expressions() -> None:
    runbook = load_text(_stage("[multi_node, {twice: 'facts.derived.multi_node and true'}]"))
    stage = runbook.stage("a")
    assert [(d.name, d.expression) for d in stage.derive] == [
        ("multi_node", None),
        ("twice", "facts.derived.multi_node and true"),
    ]


def test_an_unknown_derived_fact_is_a_load_error_with_a_suggestion() -> None:
    issues = [str(i) for i in read(_stage("[multinode]")).errors]
    assert any(
        "stages[0].derive[0]: no derived fact named 'multinode' (runbook/derived.py)"
        " (did you mean 'multi_node'?)" in i
        for i in issues
    ), issues
    # and the rule that reads it names a fact no stage derives
    assert any("facts.derived.multi_node: no stage derives it" in i for i in issues), issues


def test_a_derive_list_item_that_is_neither_a_name_nor_one_expression_is_a_syntax_error() -> None:
    issues = [str(i) for i in read(_stage("[multi_node, 3, {a: x, b: y}]")).errors]
    assert sum("derived fact's name, or a mapping of one" in i for i in issues) == 2, issues


def test_the_walk_computes_python_derived_facts_in_order_for_its_rules_and_later_stages() -> None:
    runbook = load_text(
        _stage("[multi_node, single_node]")
        + "  - id: b\n    decide:\n      - when: not facts.derived.single_node\n"
        "        finding: 'still {{ facts.derived.multi_node }}'\n"
    )
    conductor = Conductor(runbook)
    first = conductor.record("a", {}, {"nccl_log": {"nnodes": 2}})
    assert first.facts["derived"] == {"multi_node": True, "single_node": False}
    assert [f.text for f in first.findings] == ["spans"]
    second = conductor.record("b", {}, {})
    assert [f.text for f in second.findings] == ["still True"]


def test_a_predicate_that_fails_is_the_stages_error_and_its_fact_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(facts: Any, variables: Any) -> bool:
        raise ValueError("a bug")

    monkeypatch.setitem(
        derived._REGISTRY, "multi_node", derived.DerivedFact("multi_node", broken, "broken")
    )
    conductor = Conductor(load_text(_stage("[multi_node]")))
    record = conductor.record("a", {}, {})
    assert record.facts["derived"] == {"multi_node": None}
    assert record.errors == ["derive multi_node failed: ValueError: a bug"]


def test_the_shipped_runbooks_read_only_what_they_declare_parse_and_derive() -> None:
    """The strict load check (templating.Names): every name a shipped runbook's templates and
    expressions read is one of its variables, every `facts.<parser>` a parser a stage runs,
    every `facts.derived.<name>` a fact a stage derives."""
    for path in sorted(SHIPPED_DIR.glob("*.yaml")):
        runbook = load_text(path.read_text(encoding="utf-8"), str(path))
        names = names_of(runbook, strict=True)
        problems = []
        for stage in runbook.stages:
            problems += _strict_problems(stage, names)
        for remedy in runbook.remedies:
            for source in (remedy.summary, *remedy.params.values()):
                problems.append(templating.check_template(source, names))
        assert [p for p in problems if p] == [], path.name


def _strict_problems(stage: Stage, names: templating.Names) -> list[str | None]:
    found = [templating.check_expression(stage.when, names)] if stage.when else []
    found += [templating.check_expression(d.expression, names) for d in stage.derive
              if d.expression]  # fmt: skip
    found += [templating.check_template(c.command, names) for c in stage.collect]
    for rule in stage.decide:
        found += [templating.check_expression(e, names) for e in (rule.when, rule.evidence) if e]
        found += [templating.check_template(rule.finding, names)] if rule.finding else []
        found += [templating.check_template(out.because, names) for out in rule.rule_out]
    return found
