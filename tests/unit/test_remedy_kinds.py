"""The remedy kinds (runbook/remedies/kinds): one module per kind implementing one protocol,
listed in one table whose order every proposal list follows, and whose answers the verdict, the
spec check and the plans take. The expected plans were taken from the code before the kinds
had their own modules (plan_for's if-chain)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import shutil
from pathlib import Path
from typing import Any

import pytest

from runbook.conductor import Conductor
from runbook.diagnosis import build_verdict
from runbook.errors import RunbookError
from runbook.job.merge import merge_job
from runbook.remedies import kinds
from runbook.remedies.kinds import RemedyKind
from runbook.remedies.plans import PlanContext, PlanError, Target
from runbook.spec import inspect_text
from runbook.spec.models import ROOT_CAUSES, Collect, Remedy, Rule, Runbook, Stage
from runbook.transports.base import CommandResult
from runbook.verdict import Proposal

from ..job.test_job_merge import node_verdict, result, spec_of

KINDS_DIR = Path(kinds.__file__).parent
MANIFEST = Path(__file__).parents[1] / "fixtures" / "manifests" / "job.yaml"
TABLE_ORDER = (
    "collect-more",
    "reduce-loader-memory",
    "shm-size-limit",
    "memory-limit",
    "nccl-ib-disable-ab",
    "node-drain",
)
#: a memory-limit / reduce-loader-memory proposal's params as the shipped runbook renders them
MEMORY_PARAMS = {
    "peak_bytes": "34359738368", "limit_bytes": "34359738368", "anon_bytes": "30000000000",
    "shmem_bytes": "1073741824", "ranks": "8", "per_rank_anon_bytes": "3000000000",
    "workers_per_rank": "4", "per_worker_anon_bytes": "200000000",
    "other_anon_bytes": "100000000", "headroom": "1.2", "node_allocatable_bytes": "1000000000000",
}  # fmt: skip


def _members() -> tuple[list[str], list[str]]:
    """The protocol's attributes and methods, read from RemedyKind itself."""
    attributes = list(RemedyKind.__annotations__)
    methods = [n for n, v in vars(RemedyKind).items() if inspect.isfunction(v) and n[0] != "_"]
    return attributes, methods


def test_every_module_is_one_kind_of_the_table_implementing_the_whole_protocol() -> None:
    modules = sorted(p.stem for p in KINDS_DIR.glob("*.py") if not p.stem.startswith("_"))
    attributes, methods = _members()
    assert {"name", "advice", "proposed_on", "takes_node_out"} <= set(attributes)
    assert {"plan", "missing", "after_apply", "advice_lines"} <= set(methods)
    found = []
    for stem in modules:
        module = importlib.import_module(f"runbook.remedies.kinds.{stem}")
        kind = module.KIND
        assert kind.name == module.NAME
        assert kind in kinds.KINDS, f"{stem}.KIND is not in the table"
        for name in attributes:
            assert hasattr(kind, name), f"{stem}: no {name}"
        for name in methods:
            assert callable(getattr(kind, name, None)), f"{stem}: no method {name}"
        assert isinstance(kind.advice, bool) and isinstance(kind.takes_node_out, bool)
        found.append(kind)
    assert len(found) == len(kinds.KINDS) == len(set(kinds.names()))


def test_the_table_is_in_fix_order_and_holds_every_kind_the_shipped_runbook_uses() -> None:
    from runbook.spec import load_file, resolve

    assert kinds.names() == TABLE_ORDER
    assert [kinds.fix_rank(n) for n in TABLE_ORDER] == list(range(len(TABLE_ORDER)))
    assert kinds.fix_rank("frobnicate") > kinds.fix_rank("node-drain")
    used = {r.kind for r in load_file(resolve("nccl-init-failure")).remedies}
    assert used == set(kinds.names())


def _verdict_proposals(cause: str, remedy_ids: tuple[str, ...]) -> list[Proposal]:
    """The proposals of a node verdict whose one finding names `cause` and proposes
    `remedy_ids` (each remedy's id is its kind)."""
    runbook = Runbook(
        id="t",
        title="t",
        stages=(
            Stage(
                "s",
                "s",
                collect=(Collect("x.txt", "cat x"),),
                parse=("keyvalue",),
                decide=(Rule(when="true", finding="found", cause=cause, propose=remedy_ids),),
            ),
        ),
        remedies=tuple(Remedy(k, k, k) for k in TABLE_ORDER),
    )
    conductor = Conductor(runbook, {})
    conductor.record("s", {"x.txt": CommandResult("x.txt", "cat x", stdout="a=1", exited=0)},
                     {"keyvalue": {"a": 1}})  # fmt: skip
    return list(build_verdict(conductor, node="n").proposals)


def _verdict_proposing(cause: str, remedy_ids: tuple[str, ...]) -> list[str]:
    return [p.kind for p in _verdict_proposals(cause, remedy_ids)]


def test_a_node_verdict_lists_its_proposals_in_table_order_whatever_the_rule_said() -> None:
    backwards = tuple(reversed(TABLE_ORDER))
    # on a host OOM the A/B test and the drain do not apply; the rest keep the table's order
    assert _verdict_proposing("host-memory-oom", backwards) == [
        "collect-more", "reduce-loader-memory", "shm-size-limit", "memory-limit",
    ]  # fmt: skip


def test_a_job_verdict_merges_node_proposals_in_the_same_table_order() -> None:
    swept = []
    for number, name in enumerate(reversed(TABLE_ORDER)):
        data = node_verdict(f"n{number}")
        data["proposals"] = [{"id": f"{name}-1", "kind": name, "requires_approval": False,
                              "summary": name, "params": {}}]  # fmt: skip
        swept.append(result(f"n{number}", data))
    merged = merge_job(spec_of(*((f"n{i}", (i,)) for i in range(len(swept)))), swept)
    assert [p["kind"] for p in merged["proposals"]] == list(TABLE_ORDER)


def test_both_orders_follow_the_table_when_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the node verdict nor the job merge keeps an order of its own."""
    monkeypatch.setattr(kinds, "KINDS", tuple(reversed(kinds.KINDS)))
    assert _verdict_proposing("host-memory-oom", TABLE_ORDER) == [
        "memory-limit", "shm-size-limit", "reduce-loader-memory", "collect-more",
    ]  # fmt: skip
    swept = []
    for number, name in enumerate(TABLE_ORDER):
        data = node_verdict(f"n{number}")
        data["proposals"] = [{"id": f"{name}-1", "kind": name, "requires_approval": False,
                              "summary": name, "params": {}}]  # fmt: skip
        swept.append(result(f"n{number}", data))
    merged = merge_job(spec_of(*((f"n{i}", (i,)) for i in range(len(swept)))), swept)
    assert [p["kind"] for p in merged["proposals"]] == list(reversed(TABLE_ORDER))


def _context(tmp_path: Path, **kw: Any) -> PlanContext:
    return PlanContext(node="gpu1", target=kw.pop("target", None), variables=kw.pop("vars", {}),
                       work_dir=tmp_path / "work", **kw)  # fmt: skip


def test_advice_kinds_never_yield_a_playbook_and_are_never_queued(tmp_path: Path) -> None:
    advice = [k.name for k in kinds.KINDS if k.advice]
    assert advice == ["collect-more", "reduce-loader-memory"]
    for name in advice:
        ctx = _context(tmp_path, root_cause="host-memory-oom", vars={"manifest": str(MANIFEST)})
        with pytest.raises(PlanError, match=f"^{name} is advice, nothing to run$"):
            kinds.plan_for({"kind": name, "params": MEMORY_PARAMS}, ctx)
        assert kinds.is_advice(name) and name not in kinds.queued_names()
    assert kinds.queued_names() == ("shm-size-limit", "memory-limit", "nccl-ib-disable-ab",
                                    "node-drain")  # fmt: skip
    # the verdict marks them as needing no approval; the others as needing one
    proposals = _verdict_proposals("host-memory-oom", ("collect-more", "reduce-loader-memory",
                                                        "shm-size-limit"))  # fmt: skip
    assert [(p.kind, p.requires_approval) for p in proposals] == [
        ("collect-more", False), ("reduce-loader-memory", False), ("shm-size-limit", True),
    ]  # fmt: skip


def test_a_drain_is_proposed_and_planned_only_on_hardware_root_causes(tmp_path: Path) -> None:
    from runbook import metrics, npd

    hardware = [c for c in ROOT_CAUSES if kinds.proposed_on("node-drain", c)]
    assert hardware == ["gpu-hardware", "pcie-error"]
    assert kinds.drain_root_causes() == npd.HARDWARE_CAUSES == ("gpu-hardware", "pcie-error")
    assert [c for c in ROOT_CAUSES if metrics.severity(c) == "critical"] == hardware
    assert [k.name for k in kinds.KINDS if k.takes_node_out] == ["node-drain"]
    assert _verdict_proposing("gpu-hardware", ("node-drain",)) == ["node-drain"]
    assert _verdict_proposing("host-memory-oom", ("node-drain",)) == []
    with pytest.raises(PlanError, match="only proposed on gpu-hardware or pcie-error evidence, "
                                        "not on host-memory-oom"):  # fmt: skip
        kinds.plan_for({"kind": "node-drain", "params": {"node": "gpu-7"}},
                       _context(tmp_path, root_cause="host-memory-oom"))  # fmt: skip


def test_spec_validation_accepts_the_table_kinds_and_rejects_any_other() -> None:
    def kind_issues(kind: str) -> list[str]:
        text = (f"id: x\nstages:\n  - id: a\n    decide: [{{propose: r}}]\n"
                f"remedies:\n  - id: r\n    kind: {kind}\n")  # fmt: skip
        return [i.message for i in inspect_text(text, "rb.yaml") if i.path == "remedies[0].kind"]

    for name in kinds.names():
        assert kind_issues(name) == []
    known = ", ".join(sorted(kinds.names()))
    assert kind_issues("frobnicate") == [f"'frobnicate' is not a proposal kind (known: {known})"]
    with pytest.raises(PlanError, match="no playbook for proposals of kind 'frobnicate'"):
        kinds.plan_for({"kind": "frobnicate"}, PlanContext("n", None, {}, Path("/nonexistent")))


@pytest.fixture
def manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the Job fixture; kubectl's rendering stands in as the manifest unchanged (the
    patch, its size and the variables are the kind's; the rendering is kubectl's)."""
    from runbook.remedies import kubectl

    monkeypatch.setattr(kubectl, "render_patch", lambda path, patch: path.read_text())
    path = tmp_path / "job.yaml"
    shutil.copy(MANIFEST, path)
    return path


def test_the_workload_kinds_plan_as_before(tmp_path: Path, manifest: Path) -> None:
    ctx = _context(tmp_path, root_cause="shm-exhausted", vars={"manifest": str(manifest)})
    shm = kinds.plan_for(
        {"kind": "shm-size-limit", "params": {"measured_bytes": "2147483648", "headroom": "1.5"}},
        ctx,
    )
    assert (shm.playbook, shm.inventory["all"]["hosts"]["localhost"]["ansible_connection"]) == (
        "shm-size-limit.yml", "local",
    )  # fmt: skip
    assert shm.describe == ("set sizeLimit 3Gi on volume dshm of Job/train (was unbounded)",
                            "size = measured 2147483648 B × 1.5")  # fmt: skip
    assert shm.extravars["workload_patch_patch"] == (
        '{"spec":{"template":{"spec":{"volumes":[{"name":"dshm","emptyDir":{"sizeLimit":"3Gi"}}]}}}}'
    )
    assert shm.extravars["workload_patch_output_dir"] == str(tmp_path / "work" / "patch")
    assert list(shm.sources) == [str(manifest)] and shm.guard == {}

    ctx = _context(tmp_path, root_cause="host-memory-oom",
                   vars={"manifest": str(manifest), "git_commit": "yes"})  # fmt: skip
    memory = kinds.plan_for({"kind": "memory-limit", "params": MEMORY_PARAMS}, ctx)
    assert memory.playbook == "memory-limit.yml"
    change = ("set memory request 30112Mi and limit 36134Mi on container trainer of Job/train "
              "(was request 480Gi, limit 480Gi)")  # fmt: skip
    assert memory.describe[0] == change
    assert memory.describe[-2:] == (
        "pod peak 29.4 GiB: request 30112Mi (× 1), limit 36134Mi (× 1.2)",
        "node allocatable 931.3 GiB less 46.6 GiB system headroom: limits up to 884.8 GiB accepted",
    )
    assert memory.extravars["workload_patch_patch"] == (
        '{"spec":{"template":{"spec":{"containers":[{"name":"trainer","resources":'
        '{"requests":{"memory":"30112Mi"},"limits":{"memory":"36134Mi"}}}]}}}}'
    )
    assert memory.extravars["workload_patch_commit_message"] == f"runbook: {change}"
    assert kinds.missing({"kind": "memory-limit", "params": {"peak_bytes": ""}}) == [
        "a measured memory peak (the pod's memory cgroup files or its processes)"
    ]


def test_the_node_kinds_plan_as_before(tmp_path: Path) -> None:
    target = Target(url="ssh://alice@gpu1:2222", identities=("/k/id",), known_hosts="/k/kh",
                    jump="bastion", ssh_config="none")  # fmt: skip
    ab = kinds.plan_for({"kind": "nccl-ib-disable-ab", "params": {"gpus": "8"}},
                        _context(tmp_path, target=target))  # fmt: skip
    out = str(tmp_path / "work" / "ab")
    assert ab.as_dict() == {
        "playbook": "nccl-ib-disable-ab.yml",
        "inventory": {"all": {"hosts": {"gpu1": {
            "ansible_host": "gpu1", "ansible_port": 2222, "ansible_user": "alice",
            # every hop with the run's key and known_hosts (runbook/remedies/reach.py)
            "ansible_ssh_common_args": "-o HostName=gpu1 -F none -o StrictHostKeyChecking=yes "
            "-o ForwardAgent=no -o GlobalKnownHostsFile=/dev/null -o UserKnownHostsFile=/k/kh "
            "-i /k/id -o 'ProxyCommand=ssh -F none -o StrictHostKeyChecking=yes "
            "-o ForwardAgent=no -o GlobalKnownHostsFile=/dev/null -o UserKnownHostsFile=/k/kh "
            "-i /k/id -o ProxyCommand=none -o BatchMode=yes -p 22 -l root -W gpu1:2222 bastion'",
            "ansible_ssh_timeout": 10,
            "ansible_python_interpreter": "/usr/bin/python3",
        }}}},
        "extravars": {"nccl_ab_test_gpus": 8, "nccl_ab_test_output_dir": out},
        "describe": [
            "on gpu1: all_reduce_perf -b 8M -e 1G -f 2 -g 8 twice, with NCCL_IB_DISABLE unset "
            "and =1 (NCCL_DEBUG=INFO); nothing is left set",
            f"outputs under {out}",
        ],
        "limit": None, "guard": {}, "sources": {},
        # what the approver reads: the typed name, the address, the jump host
        "runs_on": "gpu1:2222 = alice@gpu1:2222 via root@bastion:22",
    }  # fmt: skip
    with pytest.raises(PlanError, match="no target to run the A/B test on"):
        kinds.plan_for({"kind": "nccl-ib-disable-ab", "params": {"gpus": "8"}}, _context(tmp_path))

    drain = kinds.plan_for(
        {"kind": "node-drain", "params": {"node": "gpu-7"}},
        _context(tmp_path, root_cause="pcie-error", kubeconfig="/kc", kube_context="ctx"),
    )
    assert (drain.playbook, drain.extravars, drain.guard) == (
        "node-drain.yml",
        {"node_drain_node": "gpu-7", "node_drain_pool_selector": "nvidia.com/gpu.present=true",
         "node_drain_max_cordoned": 1, "node_drain_max_fraction": 0.1,
         "node_drain_kubeconfig": "/kc", "node_drain_context": "ctx"},
        {"node": "gpu-7", "pool_selector": "nvidia.com/gpu.present=true", "max_cordoned": 1,
         "max_fraction": 0.1},
    )  # fmt: skip
    assert drain.describe[1] == ("refused if the pool (nvidia.com/gpu.present=true) already has "
                                 "1 cordoned or the drain takes it past 10%")  # fmt: skip


def test_only_the_ab_test_reads_something_after_its_run(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    (out / "gpu1").mkdir(parents=True)
    plan = kinds.plan_for({"kind": "nccl-ib-disable-ab", "params": {"gpus": "2"}},
                          _context(tmp_path, target=Target(url="local://")))  # fmt: skip
    plan = dataclasses.replace(plan, extravars={"nccl_ab_test_output_dir": str(out)})
    found = kinds.after_apply("nccl-ib-disable-ab", plan)
    assert list(found["comparison"]) == ["gpu1"]
    # a host whose directory holds no output measured nothing, and the result says so
    assert found["not_run"] == "could not measure: no output came back from gpu1"
    for kind in kinds.KINDS:
        if kind.name != "nccl-ib-disable-ab":
            assert kind.after_apply(plan) == {}


def test_only_reduce_loader_memory_shows_advice_and_it_is_the_estimates() -> None:
    from runbook.remedies import advice, estimate

    shown = [k.name for k in kinds.KINDS if k.advice_title is not None]
    assert shown == ["reduce-loader-memory"]
    kind = kinds.find("reduce-loader-memory")
    assert kind is not None
    assert kind.advice_lines(MEMORY_PARAMS) == advice.advise(
        estimate.from_params(MEMORY_PARAMS)).lines()  # fmt: skip
    with pytest.raises(RunbookError):
        kind.advice_lines({"peak_bytes": "lots"})


def test_an_ab_on_a_typed_port_keeps_the_port_in_every_name_it_reports(tmp_path: Path) -> None:
    """Ansible reads `host:port` in an inventory as an address and a port: the host key loses
    the `:`, the node's typed name travels beside it, and the comparison comes back under it."""
    target = Target(url="ssh://root@10.0.0.5:24510", ssh_config="none")
    ctx = PlanContext(node="10.0.0.5:24510", target=target, variables={},
                      work_dir=tmp_path / "work")  # fmt: skip
    plan = kinds.plan_for({"kind": "nccl-ib-disable-ab", "params": {"gpus": "8"}}, ctx)
    hosts = plan.inventory["all"]["hosts"]
    assert list(hosts) == ["10.0.0.5_24510"]
    assert hosts["10.0.0.5_24510"]["runbook_node"] == "10.0.0.5:24510"
    out = tmp_path / "work" / "ab" / "10.0.0.5_24510"
    out.mkdir(parents=True)
    for case in ("ib-enabled", "ib-disabled"):
        (out / f"{case}.log").write_text("sh: 1: all_reduce_perf: not found\n")
        (out / f"{case}.rc").write_text("127\n")
    kind = kinds.find("nccl-ib-disable-ab")
    assert kind is not None
    found = kind.after_apply(plan)
    assert list(found["comparison"]) == ["10.0.0.5:24510"]
    assert "all_reduce_perf not found on 10.0.0.5:24510" in found["not_run"]


def test_an_ab_through_a_node_agent_runs_in_the_nodes_namespaces(tmp_path: Path) -> None:
    """The walk entered the node with nsenter (a kubectl:// agent, or --nsenter over SSH): the
    A/B runs there too, its time limit and environment included, not in the agent's container."""
    wrapper = "nsenter --target 1 --mount --uts --ipc --net --pid --"
    for target, expected in (
        (Target(url="kubectl://kube-system/node-agent-x"), wrapper),
        (Target(url="ssh://root@gpu1", ssh_config="none", nsenter=4242),
         wrapper.replace("1", "4242", 1)),
        (Target(url="ssh://root@gpu1", ssh_config="none"), None),
    ):  # fmt: skip
        plan = kinds.plan_for({"kind": "nccl-ib-disable-ab", "params": {"gpus": "8"}},
                              _context(tmp_path, target=target))  # fmt: skip
        assert plan.extravars.get("nccl_ab_test_wrapper") == expected, target
