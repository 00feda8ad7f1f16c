"""node-drain through the approval queue: proposed only on hardware evidence, and refused by the
blast-radius guard read live from the cluster.

The cluster is the recorded Kubernetes API double of tests/k8s (no API server can run here);
kubectl, the CLI, SQLite and the audit trail are real.
"""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest

from runbook.config import load
from runbook.remedies.approval import Desk, Refused
from runbook.verdict import Proposal, Verdict
from tests.k8s.fixtures import k8s_api, kubectl_env  # noqa: F401
from tests.tools import bundles

pytestmark = pytest.mark.ansible



def seed_node(api, bundle: Path) -> str:  # type: ignore[no-untyped-def]
    """The bundle's node (its recorded node.json) as a GPU-pool node of the cluster."""
    node = json.loads((bundle / "node.json").read_text())
    node["metadata"].setdefault("labels", {})["nvidia.com/gpu.present"] = "true"
    node.setdefault("spec", {}).pop("unschedulable", None)
    api.state.put(node)
    return str(node["metadata"]["name"])


def cordon(api, name: str) -> None:  # type: ignore[no-untyped-def]
    node = api.state.get("nodes", name)
    node.setdefault("spec", {})["unschedulable"] = True
    api.state.put(node)


def proposals(cli, state: str = "all") -> list[dict]:  # type: ignore[no-untyped-def, type-arg]
    listed = cli("approvals", "list", "--state", state, "--format", "json")
    assert listed.rc == 0, listed.stderr
    return json.loads(listed.stdout)  # type: ignore[no-any-return]


def test_a_drain_is_refused_by_the_guard_when_the_pool_already_has_a_cordoned_node(
    cli, k8s_api, tmp_path: Path  # noqa: F811
) -> None:
    bundle = tmp_path / "xid79"
    bundles.materialize("gpu-hardware-xid79", bundle)
    node = seed_node(k8s_api, bundle)
    cordon(k8s_api, "gpu-node-01")
    env = kubectl_env(k8s_api, tmp_path)
    env = {k: env[k] for k in ("HOME", "KUBECACHEDIR")}
    ran = cli("run", "nccl-init-failure", "--target", f"replay://{bundle}", "--no-input",
              "--var", f"kubeconfig={k8s_api.kubeconfig}", extra_env=env, timeout=120)
    assert ran.rc == 0, ran.stderr
    (drain,) = [p for p in proposals(cli) if p["kind"] == "node-drain"]
    assert drain["plan"]["extravars"]["node_drain_node"] == node
    k8s_api.clear_log()
    # a drain needs a second person (runbook.remedies.two_person): the OS user queued it and
    # alone is refused before anything reads or writes the cluster; the proposal waits
    alone = cli("approvals", "approve", drain["id"], extra_env=env, timeout=120)
    assert alone.rc == 1, alone.stdout + alone.stderr
    assert "a node drain needs a second person: you queued it" in alone.stderr, alone.stderr
    assert k8s_api.writes() == [] and not k8s_api.requests
    (waiting,) = [p for p in proposals(cli) if p["id"] == drain["id"]]
    assert waiting["state"] == "pending"
    # the approver is then another name the config vouches for
    me = getpass.getuser()
    config = tmp_path / "config" / "nccl-runbook" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"approvers: [{me}, oncall2]\ndelegation: {{{me}: [oncall2]}}\n")
    refused = cli("approvals", "approve", drain["id"], "--as", "oncall2", extra_env=env,
                  timeout=120)  # fmt: skip
    assert refused.rc == 1, refused.stdout + refused.stderr
    assert "refused" in refused.stderr and "gpu-node-01" in refused.stderr, refused.stderr
    # the guard read the pool and wrote nothing: no cordon, no eviction
    assert k8s_api.requests, "the guard never asked the cluster"
    assert k8s_api.writes() == []
    assert not k8s_api.state.get("nodes", node).get("spec", {}).get("unschedulable")
    (after,) = [p for p in proposals(cli) if p["id"] == drain["id"]]
    assert after["state"] == "refused" and "cordoned" in after["reason"]


def test_a_memory_verdict_never_proposes_a_drain(cli) -> None:
    ran = cli("run", "nccl-init-failure", "--target", f"replay://{bundles.path('article-incident')}",
              "--no-input", "--format", "json", timeout=120)
    assert ran.rc == 0, ran.stderr
    verdict = ran.json()
    assert verdict["root_cause"] == "host-memory-oom"
    assert "node-drain" not in {p["kind"] for p in verdict["proposals"]}
    assert "node-drain" not in {p["kind"] for p in proposals(cli)}


def test_a_drain_slipped_into_a_memory_verdict_cannot_be_approved(tmp_path, monkeypatch) -> None:
    """Even a runbook that proposes node-drain on a memory verdict gets no runnable plan."""
    monkeypatch.setenv("RUNBOOK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    drain = Proposal("node-drain-1", "node-drain", True, "drain", {"node": "gpu-node-03"})
    verdict = Verdict("gpu-node-03", "host-memory-oom", "high", proposals=(drain,))
    with Desk(load(None)) as desk:
        (queued,) = desk.queue_verdict(verdict, node="gpu-node-03", target=None,
                                       runbook_id="custom", variables={}, run_dir=None)
        assert queued.plan is None
        assert "only proposed on gpu-hardware or pcie-error" in str(queued.plan_error)
        with pytest.raises(Refused, match="cannot be executed"):
            desk.approve(queued.proposal.id)
        assert desk.store.get(queued.proposal.id).state == "refused"
