"""The OOM attribution and GPU fault facts decided in Python (runbook/derived.py): what each
says, and that it says exactly what the rank-lifecycle and kernel-logs stages' `derive:`
expressions said before them, for any facts the parsers give and any `--cgroup`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook import derived
from tests.unit.test_derived import ABSENT, _drop_absent, _former, _maybe, _now

#: the rank-lifecycle stage's `derive:` expressions as the runbook held them before they moved
#: to Python: the reference the predicates are held to
FORMER_JOURNAL = {
    "pod_container_ids": (
        "facts.kube.pod.containers | map(attribute='container_id')"
        " | map('regex_search', '[0-9a-f]{64}|<CONTAINER_ID_[0-9]+>') | select | list"
        " if facts.kube.pod.uid else []"
    ),
    "journal_ooms_mine": (
        "((facts.journal.oom_events | selectattr('container_id', 'in',"
        " facts.derived.pod_container_ids) | list) or (facts.journal.oom_events"
        " | selectattr('pod_uid', 'equalto', facts.kube.pod.uid) | list))"
        " if facts.kube.pod.uid and facts.journal.oom_events else []"
    ),
    "journal_ooms_other": (
        "(facts.journal.oom_events | rejectattr('container_id', 'in',"
        " facts.derived.pod_container_ids) | rejectattr('pod_uid', 'equalto', facts.kube.pod.uid)"
        " | list) if facts.kube.pod.uid and facts.journal.oom_events else []"
    ),
}

#: the kernel-logs stage's, the same way
FORMER_KERNEL = {
    "job_cgroup": (
        "('^' ~ (cgroup_dir | regex_search('^.*?(?=/*$)') | replace('/sys/fs/cgroup/memory/', '/')"
        " | replace('/sys/fs/cgroup/', '/')) ~ '(/|$)') if cgroup_dir"
        " else (('pod' ~ (facts.kube.pod.uid | replace('-', '[-_]')))"
        " if facts.kube.pod.uid else '')"
    ),
    "job_ooms": (
        "(facts.dmesg.memcg_ooms | selectattr('memcg', 'search', facts.derived.job_cgroup) | list)"
        " + (facts.dmesg.memcg_ooms | rejectattr('memcg', 'search', facts.derived.job_cgroup)"
        " | selectattr('task_memcg', 'search', facts.derived.job_cgroup) | list)"
        " if facts.derived.job_cgroup and facts.dmesg.memcg_ooms else []"
    ),
    "foreign_ooms": (
        "(facts.dmesg.memcg_ooms | rejectattr('memcg', 'search', facts.derived.job_cgroup)"
        " | rejectattr('task_memcg', 'search', facts.derived.job_cgroup) | list)"
        " if facts.derived.job_cgroup and facts.dmesg.memcg_ooms else []"
    ),
    "unattributed_ooms": (
        "(facts.dmesg.memcg_ooms | rejectattr('killed_pid', 'in', facts.applog.pids or []) | list)"
        " if not facts.derived.job_cgroup and facts.dmesg.memcg_ooms else []"
    ),
    "pid_ooms": (
        "((facts.dmesg.memcg_ooms | list) + (facts.dmesg.global_ooms | list))"
        " | selectattr('killed_pid', 'in', facts.applog.pids or []) | list"
        " if not facts.derived.job_cgroup and facts.applog.pids else []"
    ),
    "job_global_ooms": (
        "((facts.dmesg.global_ooms | selectattr('task_memcg', 'search', facts.derived.job_cgroup)"
        " | list) if facts.derived.job_cgroup else ((facts.dmesg.global_ooms | list)"
        " if facts.applog.killed else [])) if facts.dmesg.global_ooms else []"
    ),
    "unattributed_global_ooms": (
        "(facts.dmesg.global_ooms | rejectattr('killed_pid', 'in', facts.applog.pids or []) | list)"
        " if facts.dmesg.global_ooms and not facts.derived.job_cgroup"
        " and not facts.derived.job_global_ooms else []"
    ),
    "gpu_faults": (
        "facts.dmesg.drain_xids + facts.dmesg.fallen_off_bus + facts.dmesg.gpu_fault_xids"
        " + facts.dmesg.nvswitch_faults if facts.dmesg.collected else []"
    ),
}

HEX = "0123456789abcdef" * 4
UIDS = st.sampled_from([None, "", "1234-ab", "5678-cd", 7])
CONTAINER_IDS = st.sampled_from(
    [None, "", f"containerd://{HEX}", f"docker://{'a' * 64}", HEX, "a" * 64,
     "<CONTAINER_ID_1>", "<CONTAINER_ID_x>", "containerd://short", f"{HEX.upper()}", 3]
)  # fmt: skip
#: memcg paths: the job's (by --cgroup, by pod UID, dash or systemd spelling), a child, a
#: sibling with the same prefix, another pod's, the root, and what no parser gives
MEMCGS = st.sampled_from(
    [None, "", "/", "/job", "/job/rank0", "/jobs", "/other/job", "/sys/fs/cgroup/job",
     "/kubepods/burstable/pod1234-ab/c1", "/kubepods.slice/kubepods-pod1234_ab.slice/c",
     "/kubepods/pod5678-cd", "line\n/job", 4]
)  # fmt: skip
CGROUP_DIRS = st.sampled_from(
    [None, "", "/job", "/job/", "job", "/sys/fs/cgroup/job", "/sys/fs/cgroup/memory/job//",
     "/sys/fs/cgroup/", "/sys/fs/cgroup/memory/", "/", "///", "/kubepods-slice", "/job\n/x",
     0, 5, True]
)  # fmt: skip
PIDS = st.sampled_from([None, 0, 1, 2, 4711, "2"])


def _records(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[list[Any]]:
    """Lists of records, each key maybe absent; now and then an item that is no mapping."""
    record = st.fixed_dictionaries({k: _maybe(v) for k, v in fields.items()})
    return st.lists(st.one_of(record, record, record, st.just("not a mapping")), max_size=4)


def _maybe_none(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return _maybe(st.one_of(st.none(), strategy))


OOM = {"memcg": MEMCGS, "task_memcg": MEMCGS, "killed_pid": PIDS}
GPU_LISTS = ("drain_xids", "fallen_off_bus", "gpu_fault_xids", "nvswitch_faults")
GPU_RECORD = {"text": st.sampled_from(["Xid 79", "fallen off the bus", "SXid 12028"])}
FACTS = st.fixed_dictionaries(
    {
        "kube": _maybe(
            st.fixed_dictionaries(
                {
                    "pod": _maybe(
                        st.fixed_dictionaries(
                            {
                                "uid": _maybe(UIDS),
                                "containers": _maybe(_records({"container_id": CONTAINER_IDS})),
                            }
                        )
                    )
                }
            )
        ),
        "journal": _maybe(
            st.fixed_dictionaries(
                {
                    "oom_events": _maybe(
                        _records(
                            {
                                "container_id": st.sampled_from(
                                    [None, HEX, "a" * 64, "<CONTAINER_ID_1>", "b" * 64]
                                ),
                                "pod_uid": UIDS,
                            }
                        )
                    )
                }
            )
        ),
        "dmesg": _maybe(
            st.fixed_dictionaries(
                {
                    "collected": _maybe(st.booleans()),
                    "memcg_ooms": _maybe(_records(OOM)),
                    "global_ooms": _maybe(_records(OOM)),
                    **{key: _maybe(_records(GPU_RECORD)) for key in GPU_LISTS},
                }
            )
        ),
        "applog": _maybe(
            st.fixed_dictionaries(
                {
                    "pids": _maybe_none(st.lists(st.sampled_from([1, 2, 3, 4711]), max_size=3)),
                    "killed": _maybe_none(st.lists(st.just({"text": "SIGKILL"}), max_size=1)),
                }
            )
        ),
    }
)


def _as_the_parser_gives(facts: dict[str, Any]) -> dict[str, Any]:
    """A kernel log that was read has every one of its record lists (dmesg_facts); only then
    did the former gpu_faults expression add them up without failing."""
    dmesg = facts.get("dmesg")
    if isinstance(dmesg, dict) and dmesg.get("collected"):
        for key in GPU_LISTS:
            dmesg.setdefault(key, [])
    return facts


def _variables(cgroup_dir: Any) -> dict[str, Any]:
    return {} if cgroup_dir is ABSENT else {"cgroup_dir": cgroup_dir}


@settings(max_examples=500, deadline=None)
@given(facts=FACTS, cgroup_dir=_maybe(CGROUP_DIRS))
def test_the_oom_and_gpu_fault_predicates_say_what_their_expressions_said_for_any_facts(
    facts: dict[str, Any], cgroup_dir: Any
) -> None:
    facts = _as_the_parser_gives(_drop_absent(facts))
    variables = _variables(cgroup_dir)
    assert _now(facts, variables, FORMER_JOURNAL) == _former(facts, variables, FORMER_JOURNAL)
    assert _now(facts, variables, FORMER_KERNEL) == _former(facts, variables, FORMER_KERNEL)


def test_a_node_that_gave_no_facts_at_all_attributes_nothing() -> None:
    expected = {name: [] for name in (*FORMER_JOURNAL, *FORMER_KERNEL)} | {"job_cgroup": ""}
    assert _now({}, {}, FORMER_JOURNAL) | _now({}, {}, FORMER_KERNEL) == expected


# -- rank-lifecycle: the journal's OOM events ------------------------------------------------

POD = {
    "uid": "1234-ab",
    "containers": [
        {"container_id": f"containerd://{HEX}"},
        {"container_id": "<CONTAINER_ID_2>"},
        {"container_id": None},
        {"name": "no id yet"},
    ],
}


def test_the_pods_container_ids_are_its_64_hex_digits_or_a_placeholder() -> None:
    facts = {"kube": {"pod": POD}}
    assert derived.compute("pod_container_ids", facts, {}) == [HEX, "<CONTAINER_ID_2>"]
    # no UID: pod.json was not read, and its containers say nothing
    assert derived.compute("pod_container_ids", {"kube": {"pod": {**POD, "uid": ""}}}, {}) == []


def test_the_journals_ooms_are_the_pods_by_container_id_before_its_uid() -> None:
    mine = {"container_id": HEX, "pod_uid": None}
    by_uid = {"container_id": "b" * 64, "pod_uid": "1234-ab"}
    other = {"container_id": "c" * 64, "pod_uid": "9999-zz"}
    facts = {"kube": {"pod": POD}, "journal": {"oom_events": [mine, by_uid, other]}}
    assert derived.compute("journal_ooms_mine", facts, {}) == [mine]
    assert derived.compute("journal_ooms_other", facts, {}) == [other]
    # no event of its containers: those naming its UID are its own
    facts["journal"] = {"oom_events": [by_uid, other]}
    assert derived.compute("journal_ooms_mine", facts, {}) == [by_uid]
    # no pod.json: nothing is the pod's, nor anyone else's
    assert derived.compute("journal_ooms_other", {"journal": facts["journal"]}, {}) == []


# -- kernel-logs: the kernel's OOM kills and GPU faults -------------------------------------


@pytest.mark.parametrize(
    ("cgroup_dir", "pattern"),
    [
        ("/sys/fs/cgroup/memory/job/", "^/job(/|$)"),  # v1
        ("/sys/fs/cgroup/job", "^/job(/|$)"),  # v2
        ("/job//", "^/job(/|$)"),
        ("/", "^(/|$)"),
    ],
)
def test_the_jobs_cgroup_from_cgroup_is_the_kernels_memcg_path(
    cgroup_dir: str, pattern: str
) -> None:
    pod = {"kube": {"pod": {"uid": "1234-ab"}}}
    assert derived.compute("job_cgroup", pod, {"cgroup_dir": cgroup_dir}) == pattern


def test_the_jobs_cgroup_is_the_literal_path_whatever_characters_it_holds() -> None:
    """A dot in --cgroup is a dot, and a bracket is no pattern error (the former expression
    put the path in the pattern as it was: `[` failed every OOM predicate of the stage)."""
    dotted = {"cgroup_dir": "/kubepods.slice/kubepods-pod1.slice"}
    oom = _oom("/kubepods.slice/kubepods-pod1.slice/c")
    near = _oom("/kubepodsXslice/kubepods-pod1Xslice/c")
    facts = {"dmesg": {"collected": True, "memcg_ooms": [oom, near], "global_ooms": []}}
    assert derived.compute("job_ooms", facts, dotted) == [oom]
    odd = {"cgroup_dir": "/job[(+"}
    assert derived.compute("job_cgroup", {}, odd) == r"^/job\[\(\+(/|$)"
    facts["dmesg"]["memcg_ooms"] = [_oom("/job[(+/rank0"), _oom("/jobs")]
    assert derived.compute("job_ooms", facts, odd) == [facts["dmesg"]["memcg_ooms"][0]]
    assert derived.compute("job_cgroup", {"kube": {"pod": {"uid": "a.b-c"}}}, {}) == r"poda\.b[-_]c"


def test_the_jobs_cgroup_from_the_pod_uid_matches_both_spellings() -> None:
    pattern = derived.compute("job_cgroup", {"kube": {"pod": {"uid": "1234-ab"}}}, {})
    assert pattern == "pod1234[-_]ab"
    assert derived.compute("job_cgroup", {}, {"cgroup_dir": ""}) == ""


def _oom(memcg: str | None, task: str | None = None, pid: int | None = None) -> dict[str, Any]:
    return {"memcg": memcg, "task_memcg": task, "killed_pid": pid}


def test_an_oom_is_the_jobs_by_its_limit_then_by_its_task_never_by_a_sibling_prefix() -> None:
    by_task = _oom("/", "/job/rank1")
    by_limit = _oom("/job/rank0", "/job/rank0")
    sibling = _oom("/jobs", "/jobs")
    facts = {"dmesg": {"memcg_ooms": [by_task, by_limit, sibling]}}
    variables = {"cgroup_dir": "/sys/fs/cgroup/job"}
    assert derived.compute("job_ooms", facts, variables) == [by_limit, by_task]
    assert derived.compute("foreign_ooms", facts, variables) == [sibling]
    # a cgroup known: nothing is left to attribute by pid
    assert derived.compute("unattributed_ooms", facts, variables) == []


def test_with_no_cgroup_known_an_oom_is_the_jobs_when_it_killed_a_pid_its_logs_name() -> None:
    memcg = _oom("/x", "/x", 4711)
    stranger = _oom("/y", "/y", 99)
    global_ = _oom("/", "/z", 4711)
    facts = {
        "dmesg": {"memcg_ooms": [memcg, stranger], "global_ooms": [global_]},
        "applog": {"pids": [4711]},
    }
    assert derived.compute("pid_ooms", facts, {}) == [memcg, global_]
    assert derived.compute("unattributed_ooms", facts, {}) == [stranger]
    assert derived.compute("job_ooms", facts, {}) == []
    assert derived.compute("unattributed_global_ooms", facts, {}) == []
    # the logs name no pid: nothing is the job's by pid
    no_pids = {**facts, "applog": {"pids": []}}
    assert derived.compute("pid_ooms", no_pids, {}) == []
    assert derived.compute("unattributed_global_ooms", no_pids, {}) == [global_]


def test_a_global_oom_is_the_jobs_by_its_task_cgroup_or_a_rank_sigkilled() -> None:
    ours = _oom("/", "/kubepods/pod1234-ab/c1", 10)
    theirs = _oom("/", "/kubepods/pod5678-cd/c1", 11)
    facts: dict[str, Any] = {"dmesg": {"global_ooms": [ours, theirs]}}
    pod = {**facts, "kube": {"pod": {"uid": "1234-ab"}}}
    assert derived.compute("job_global_ooms", pod, {}) == [ours]
    assert derived.compute("unattributed_global_ooms", pod, {}) == []
    killed = {**facts, "applog": {"killed": [{"text": "rank 3 killed by SIGKILL"}]}}
    assert derived.compute("job_global_ooms", killed, {}) == [ours, theirs]
    assert derived.compute("unattributed_global_ooms", killed, {}) == []
    assert derived.compute("job_global_ooms", facts, {}) == []
    assert derived.compute("unattributed_global_ooms", facts, {}) == [ours, theirs]


def test_an_absent_cgroup_key_is_empty_text_to_the_pattern_and_none_matches_nothing() -> None:
    """As the expressions read them: `--cgroup /` is the pattern `^(/|$)`, which empty text
    matches; a memcg the parser left none matches no pattern."""
    absent, none = {"killed_pid": 1}, _oom(None, None, 1)
    facts = {"dmesg": {"memcg_ooms": [absent, none]}}
    assert derived.compute("job_ooms", facts, {"cgroup_dir": "/"}) == [absent]
    assert derived.compute("foreign_ooms", facts, {"cgroup_dir": "/"}) == [none]


def test_the_gpu_faults_are_every_kind_in_order_and_none_when_the_log_was_not_read() -> None:
    dmesg = {
        "collected": True,
        "drain_xids": [{"text": "Xid 79"}],
        "fallen_off_bus": [{"text": "fallen off the bus"}],
        "gpu_fault_xids": [{"text": "Xid 48"}],
        "nvswitch_faults": [{"text": "SXid 12028"}],
    }
    assert [f["text"] for f in derived.compute("gpu_faults", {"dmesg": dmesg}, {})] == [
        "Xid 79", "fallen off the bus", "Xid 48", "SXid 12028"
    ]  # fmt: skip
    assert derived.compute("gpu_faults", {"dmesg": {**dmesg, "collected": False}}, {}) == []


def test_every_moved_fact_is_registered_with_a_summary() -> None:
    for name in (*FORMER_JOURNAL, *FORMER_KERNEL):
        assert derived.get(name).summary, name
