"""The A/B remedy planned for a node the run reached with `--target kubectl://… --kubectl PATH`
runs through that kubectl, not the one PATH finds: kubernetes.core's kubectl connection takes
no path of its own, so the approval puts the run's kubectl first on ansible-playbook's PATH.

No Kubernetes API server can run here: the run's kubectl is a recorded double (at a path that
is not on PATH, under another name) that logs its argv and runs the command after `--` on an
SSH test host standing for the node (through a real sshd, the pipelined module on its input),
where the A/B's `all_reduce_perf` is the scenario shim. A `kubectl` first on PATH that only
logs and fails stands for the cluster's other kubectl: the plan must never call it."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from runbook.remedies import plans
from runbook.remedies.kinds.nccl_ib_disable_ab import NcclIbDisableAb
from runbook.remedies.playbook import run_playbook
from tests.tools.collective import calls, install_ab_all_reduce_perf

pytestmark = [pytest.mark.ansible, pytest.mark.ssh]

DOUBLE = """#!{python}
# a recorded kubectl double: `exec … -- CMD…` runs CMD on the node over ssh, input passed on
import os, shlex, sys
with open({log!r}, "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
command = args[args.index("--") + 1:]
os.execvp("ssh", [*{ssh!r}, shlex.join(command)])
"""


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_an_ab_plan_over_kubectl_runs_through_the_kubectl_the_run_was_given(
    ssh_host, host_network, ansible_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import sys

    node = ssh_host("gpu-k")
    install_ab_all_reduce_perf(node)
    log = tmp_path / "kubectl-calls.log"
    ssh = host_network.ssh_argv(node)
    double = _executable(tmp_path / "tools" / "kubectl-1.32",
                         DOUBLE.format(python=sys.executable, log=str(log), ssh=ssh))  # fmt: skip
    decoy_log = tmp_path / "decoy.log"
    decoy_dir = tmp_path / "path-kubectl"
    _executable(decoy_dir / "kubectl", f'#!/bin/sh\necho "$*" >> {decoy_log}\nexit 1\n')
    for name, value in ansible_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{decoy_dir}{os.pathsep}{os.environ['PATH']}")

    target = plans.Target("kubectl://kube-system/agent-k", kubectl=str(double),
                          nsenter=node.sshd_pid)  # fmt: skip
    ctx = plans.PlanContext(node="gpu-k", target=target, variables={},
                            work_dir=tmp_path / "work")  # fmt: skip
    plan = NcclIbDisableAb().plan({"params": {"gpus": 4}}, ctx)
    assert plan.kubectl == str(double)
    assert plan.runs_on == f"gpu-k = kubectl://kube-system/agent-k ({double} exec)"  # approver
    assert plans.Plan.from_dict(plan.as_dict()).kubectl == str(double)  # kept in the queue
    host = plan.inventory["all"]["hosts"]["gpu-k"]
    assert host["ansible_connection"] == "kubernetes.core.kubectl"
    plan = dataclasses.replace(plan, extravars={**plan.extravars,
                                                "nccl_ab_test_args": "-b 8M -e 64M -f 2"})

    result = run_playbook(plan.playbook, inventory=plan.inventory, extravars=plan.extravars,
                          private_dir=tmp_path / "ansible", check=False, kubectl=plan.kubectl)
    assert result.status == "successful", result.stdout[-3000:]
    assert not decoy_log.exists(), decoy_log.read_text()
    execs = log.read_text().splitlines()
    assert execs and all(" agent-k " in f" {line} " for line in execs), execs
    # both cases ran on the node, inside the namespaces the run entered
    runs = calls(node)
    assert [r["env"].get("NCCL_IB_DISABLE") for r in runs] == [None, "1"]
    out = Path(plan.extravars["nccl_ab_test_output_dir"]) / "gpu-k"
    assert (out / "ib-enabled.rc").read_text().strip() == "3"
    assert (out / "ib-disabled.rc").read_text().strip() == "0"


def test_a_kubectl_the_plan_cannot_find_is_one_error_before_ansible_starts(
    tmp_path: Path,
) -> None:
    from runbook.remedies.playbook import PlaybookError

    with pytest.raises(PlaybookError, match="no such program"):
        run_playbook("nccl-ib-disable-ab.yml", inventory={"all": {"hosts": {}}}, extravars={},
                     private_dir=tmp_path / "a", check=True,
                     kubectl=str(tmp_path / "nowhere" / "kubectl"))  # fmt: skip


def test_a_case_whose_command_never_started_fails_the_host_and_saves_no_result(
    ssh_host, host_network, ansible_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Through a kubectl that cannot exec (the connection's module run fails), no case ran: the
    host fails at the run itself, and no `.rc` file passes the module's status off as the
    collective's exit status (it failed on a template error after saving nothing, or it
    would have saved rc 1 as a finding)."""
    node = ssh_host("gpu-n")
    install_ab_all_reduce_perf(node)
    said = "#!/bin/sh\necho 'error: unable to upgrade connection' >&2\nexit 1\n"
    broken = _executable(tmp_path / "tools" / "kubectl", said)
    for name, value in ansible_env.items():
        monkeypatch.setenv(name, value)
    target = plans.Target("kubectl://kube-system/agent-n", kubectl=str(broken))
    ctx = plans.PlanContext(node="gpu-n", target=target, variables={},
                            work_dir=tmp_path / "work")  # fmt: skip
    plan = NcclIbDisableAb().plan({"params": {"gpus": 4}}, ctx)
    result = run_playbook(plan.playbook, inventory=plan.inventory, extravars=plan.extravars,
                          private_dir=tmp_path / "ansible", check=False, kubectl=plan.kubectl)
    assert result.status == "failed", result.stdout[-3000:]
    failed = [t for t in result.tasks if t.status == "failed"]
    assert failed and "Run the collective test" in failed[0].task, result.stdout[-3000:]
    assert "Error while evaluating conditional" not in result.stdout
    out = Path(plan.extravars["nccl_ab_test_output_dir"]) / "gpu-n"
    assert not out.exists() or not list(out.glob("*.rc"))
    assert calls(node) == []
