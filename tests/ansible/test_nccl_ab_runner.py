"""The `nccl-ib-disable-ab` remedy end to end: ansible-runner → ansible-playbook → real sshd on
a test host → the node's `all_reduce_perf` (a shim printing real-format nccl-tests output: no
GPU or InfiniBand here; see tests/tools/all_reduce_perf.py) → files on the controller,
read back with runbook.parsers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from runbook.parsers.nccl_log import parse_nccl_log
from runbook.parsers.nccl_tests import parse_nccl_tests
from tests.tools.ansible_env import run_playbook, runner_output, ssh_inventory, task_results
from tests.tools.collective import install_ab_all_reduce_perf

pytestmark = [pytest.mark.ansible, pytest.mark.ssh]

CASES = ("ib-enabled", "ib-disabled")


def test_check_mode_runs_nothing_then_the_real_run_records_ib_failing_and_socket_passing(
    ssh_host, host_network, ansible_env, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    node = ssh_host("gpu-a")
    calls = install_ab_all_reduce_perf(node)
    out = tmp_path / "ab"
    extravars = {
        "nccl_ab_test_output_dir": str(out),
        "nccl_ab_test_gpus": 4,
        "nccl_ab_test_args": "-b 8M -e 64M -f 2",
    }
    inventory = ssh_inventory(host_network, [node])

    check = run_playbook(tmp_path / "run-check", "nccl-ib-disable-ab.yml", envvars=ansible_env,
                         extravars=extravars, inventory=inventory, cmdline="--check --diff")
    assert check.status == "successful", runner_output(check)
    assert not calls.exists(), "check mode ran all_reduce_perf on the node"
    assert not out.exists(), "check mode wrote on the controller"
    # and it does not pretend: both cases skipped, no file "would be" written
    assert len(task_results(check, "skipped")) >= 2 + 1 + 4  # 2 cases, the dir, 4 files
    assert not [d for d in task_results(check, "ok") if d["res"].get("changed")]

    real = run_playbook(tmp_path / "run-real", "nccl-ib-disable-ab.yml", envvars=ansible_env,
                        extravars=extravars, inventory=inventory)
    assert real.status == "successful", runner_output(real)
    assert real.rc == 0
    # exactly two runs on the node, with the environment each case promises
    runs = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [r["argv"] for r in runs] == [["-b", "8M", "-e", "64M", "-f", "2", "-g", "4"]] * 2
    assert runs[0]["env"] == {"NCCL_DEBUG": "INFO"}
    assert runs[1]["env"] == {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1"}

    host_dir = out / "gpu-a"
    assert sorted(p.name for p in host_dir.iterdir()) == sorted(
        f"{c}.{ext}" for c in CASES for ext in ("log", "rc"))
    assert (host_dir / "ib-enabled.rc").read_text().strip() == "3"
    assert (host_dir / "ib-disabled.rc").read_text().strip() == "0"

    enabled = (host_dir / "ib-enabled.log").read_text().splitlines()
    e_tests, e_nccl = parse_nccl_tests(enabled), parse_nccl_log(enabled)
    assert not e_tests.passed and not e_tests.finished
    assert any("Test NCCL failure" in f.text for f in e_tests.failures)
    assert e_nccl.network == "IB" and e_nccl.warn_categories.get("ib", 0) >= 1
    assert e_nccl.first_result_code == 2  # unhandled system error

    disabled = (host_dir / "ib-disabled.log").read_text().splitlines()
    d_tests, d_nccl = parse_nccl_tests(disabled), parse_nccl_log(disabled)
    assert d_tests.passed and d_tests.oob_ok and d_tests.wrong_total == 0
    assert d_tests.nranks == 4 and len(d_tests.rows) == 4  # 8M..64M by 2, on -g 4
    assert d_tests.avg_busbw is not None and d_tests.avg_busbw > 0
    assert d_nccl.network == "Socket" and d_nccl.socket_interfaces
    assert d_nccl.env.get("NCCL_IB_DISABLE") == "1" and set(d_nccl.transports) == {"SHM"}
    assert d_nccl.init_complete_ranks == (0, 1, 2, 3)

    # a diagnostic leaves nothing behind on the node: a fresh session has no NCCL setting
    proc = subprocess.run(host_network.ssh_argv(node, "env"), capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0 and "NCCL_" not in proc.stdout
    assert not task_results(real, "failed")
