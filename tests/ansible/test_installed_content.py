"""A non-editable install (`pip install .`, as the README's demo installs) carries the
collection nccl_runbook.fleet under <prefix>/share/nccl-runbook, and runbook's own playbook
runs (runbook.remedies.playbook.run_playbook, what an approval runs) work from that copy: the
playbooks' FQCN roles and module resolve to it through the collections path run_playbook links.

The package is built from a copy of the sources in the test's temp dir (setuptools writes
build/ and *.egg-info next to what it builds: not in the repository), without dependencies
(they are this venv's) and installed under a temporary prefix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runbook.remedies.playbook import run_playbook
from tests.tools.ansible_env import REPO, ssh_inventory
from tests.tools.collective import install_ab_all_reduce_perf

pytestmark = [pytest.mark.ansible, pytest.mark.ssh]

SOURCES = ("pyproject.toml", "README.md", "runbook", "playbooks", "roles", "plugins", "meta")


def install_copy(tmp_path: Path) -> Path:
    """`pip install` of a copy of the sources under tmp_path/prefix; its share/nccl-runbook."""
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            # playbooks/collections is the checkout's own link to itself: not part of a build
            shutil.copytree(path, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "collections"))
        else:
            shutil.copy2(path, src / name)
    prefix = tmp_path / "prefix"
    # --ignore-installed: without it pip first uninstalls the project from the environment the
    # tests run in (the same distribution name), and every later test loses `runbook`
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--no-deps", "--no-build-isolation", "--no-index", "--ignore-installed",
         "--prefix", str(prefix), str(src)],
        capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the environment the suite runs in still has its own install of the project
    still = subprocess.run([sys.executable, "-c", "import runbook"], cwd="/",
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert still.returncode == 0, still.stderr
    return prefix / "share" / "nccl-runbook"


def test_the_installed_copy_carries_the_collection_and_runbook_runs_its_playbooks(
    ssh_host, host_network, ansible_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    share = install_copy(tmp_path)
    shipped = {p.relative_to(share).as_posix() for p in share.rglob("*") if p.is_file()}
    wanted = {
        p.relative_to(REPO).as_posix()
        for top in ("playbooks", "roles", "plugins", "meta")
        for p in (REPO / top).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.is_symlink()
    }
    assert "plugins/modules/evidence_bundle.py" in wanted and "meta/runtime.yml" in wanted
    assert wanted - shipped == set()

    node = ssh_host("inst-a")
    calls = install_ab_all_reduce_perf(node)
    out = tmp_path / "ab"
    for name in ("ANSIBLE_HOME", "ANSIBLE_LOCAL_TEMP", "ANSIBLE_REMOTE_TEMP"):
        monkeypatch.setenv(name, ansible_env[name])
    monkeypatch.setenv("RUNBOOK_ANSIBLE_DIR", str(share))  # this copy, not the checkout
    result = run_playbook(
        "nccl-ib-disable-ab.yml",
        inventory=ssh_inventory(host_network, [node]),
        extravars={"nccl_ab_test_output_dir": str(out), "nccl_ab_test_gpus": 2,
                   "nccl_ab_test_args": "-b 8M -e 16M -f 2"},
        private_dir=tmp_path / "private",
        check=False,
    )  # fmt: skip
    assert result.ok, result.stdout[-4000:]
    # the role ran from the installed copy (linked in as the collection), not the checkout
    events = [json.loads(p.read_text())
              for p in (Path(result.artifact_dir) / "job_events").glob("*.json")]
    paths = {e["event_data"]["task_path"] for e in events
             if e.get("event") == "runner_on_ok"
             and e["event_data"].get("task", "").startswith("Run the collective test")}
    assert len(paths) == 1, paths
    (path,) = paths
    assert not path.startswith(str(REPO)), path
    assert path.startswith(str(share)) or (
        "/ansible_collections/nccl_runbook/fleet/roles/nccl_ab_test/" in path), path
    assert [json.loads(line)["argv"][-1] for line in calls.read_text().splitlines()] == ["2", "2"]
    assert sorted(p.name for p in (out / "inst-a").iterdir()) == [
        "ib-disabled.log", "ib-disabled.rc", "ib-enabled.log", "ib-enabled.rc"]
    # the link run_playbook made for the run is gone, the installed copy is whole
    assert (share / "roles" / "nccl_ab_test" / "tasks" / "main.yml").is_file()
