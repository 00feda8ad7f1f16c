"""`molecule test` for each role's scenario (molecule/<role>/): dependency, syntax, converge,
idempotence (a second converge changes nothing), verify (asserts what the role promised).

The default driver with ``managed: false``: nothing is created or destroyed; the platforms are
a real OpenSSH test host (nccl_ab_test, whose ``all_reduce_perf`` is the A/B shim) and
localhost with a throw-away Git checkout (workload_patch, real ``kubectl patch --local``).
The scenarios read where those are from the environment (see molecule/README.md). Both run in
the background (tests/ansible/background.py), each with its own Ansible and molecule state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ansible.background import ToolResult, ToolRun, ToolRuns, register, waits_for
from tests.tools.ansible_env import REPO, VENV_BIN, ansible_environment
from tests.tools.collective import install_ab_all_reduce_perf

pytestmark = pytest.mark.ansible

STEPS = ("syntax", "converge", "idempotence", "verify")


def start_molecule(runs: ToolRuns, scenario: str, extra_env: dict[str, str]) -> ToolRun:
    """``molecule test -s SCENARIO`` from the repo root, its state under the run's workdir."""
    work = runs.base / f"molecule-{scenario}"
    env = {
        **os.environ,
        **ansible_environment(work / "ansible", runs.short_dir()),
        "MOLECULE_EPHEMERAL_DIRECTORY": str(work / "molecule"),
        "NO_COLOR": "1",
        **extra_env,
    }
    env.pop("VIRTUAL_ENV", None)  # ansible-compat would cache under the venv otherwise
    argv = [str(VENV_BIN / "molecule"), "test", "-s", scenario]
    return runs.spawn(f"molecule-{scenario}", argv, cwd=REPO, env=env)


def assert_passed(result: ToolResult) -> None:
    assert result.rc == 0, result.output[-6000:]
    for step in STEPS:
        assert f"{step}: Executed: Successful" in result.output, result.output[-3000:]


@register("molecule-nccl_ab_test", needs=("host_network",))
def start_nccl_ab_test(runs: ToolRuns) -> ToolRun:
    network = runs.fixtures["host_network"]
    node = network.add_host("mol-node")
    runs.on_close(lambda: network.remove_host(node))
    install_ab_all_reduce_perf(node)
    runs.workdir("molecule-nccl_ab_test")
    runs.fixtures["mol-node"] = node
    return start_molecule(runs, "nccl_ab_test", {
        "NCCL_RUNBOOK_TEST_HOST": node.address,
        "NCCL_RUNBOOK_TEST_PORT": str(node.port),
        "NCCL_RUNBOOK_TEST_KEY": str(network.client_key.private_path),
        "NCCL_RUNBOOK_TEST_KNOWN_HOSTS": str(network.known_hosts_path),
    })  # fmt: skip


@pytest.mark.ssh
@waits_for("molecule-nccl_ab_test")
def test_molecule_nccl_ab_test_converges_idempotently_and_verifies(tool_runs: ToolRuns) -> None:
    result = tool_runs.result("molecule-nccl_ab_test")
    assert_passed(result)
    node = tool_runs.fixtures["mol-node"]
    # converge and idempotence each ran both cases on the node: the role really ran there
    assert len((node.shim_dir / "all_reduce_perf.calls").read_text().splitlines()) == 4
    results = tool_runs.base / "molecule-nccl_ab_test" / "molecule" / "nccl-ab" / "gpu-node"
    assert sorted(p.name for p in results.iterdir()) == [
        "ib-disabled.log", "ib-disabled.rc", "ib-enabled.log", "ib-enabled.rc"]


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], check=True,
                          capture_output=True, text=True).stdout


@register("molecule-workload_patch")
def start_workload_patch(runs: ToolRuns) -> ToolRun:
    checkout = runs.workdir("molecule-workload_patch") / "gitops"
    checkout.mkdir()
    shutil.copy(REPO / "molecule" / "workload_patch" / "files" / "pytorchjob.yaml", checkout)
    _git(checkout, "init", "-q")
    _git(checkout, "config", "user.name", "Test Operator")
    _git(checkout, "config", "user.email", "operator@example.org")
    _git(checkout, "add", "pytorchjob.yaml")
    _git(checkout, "commit", "-q", "-m", "Add the llm-pretrain PyTorchJob")
    runs.fixtures["gitops"] = checkout
    return start_molecule(runs, "workload_patch", {"NCCL_RUNBOOK_TEST_CHECKOUT": str(checkout)})


@waits_for("molecule-workload_patch")
def test_molecule_workload_patch_commits_the_patch_once_and_verifies(
    tool_runs: ToolRuns,
) -> None:
    result = tool_runs.result("molecule-workload_patch")
    assert_passed(result)
    checkout = tool_runs.fixtures["gitops"]
    assert _git(checkout, "log", "--format=%s").splitlines() == [
        "llm-pretrain: cap /dev/shm at 48Gi", "Add the llm-pretrain PyTorchJob"]
    assert "sizeLimit: 48Gi" in (checkout / "pytorchjob.yaml").read_text()
