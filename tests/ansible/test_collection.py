"""The Ansible content as the collection nccl_runbook.fleet, the way its users get it:
`ansible-galaxy collection build` of the repository root, `ansible-galaxy collection install`
of the tarball into a temporary collections path, `ansible-doc` of its module and a real
playbook run over SSH to a test host with its FQCN role and module; what the tarball holds
(the content, not the Python product, its tests or a secret-looking file); every documented
`ansible-playbook` command parsed from the repository root (docs and content stay in step);
and nccl_ab_test's deprecated variable names giving the same run as the new ones.

The installed collection is used from a directory outside the repository, with
ANSIBLE_COLLECTIONS_PATH naming only the install (no ansible.cfg, no playbook-adjacent
collections), and the tests check from the events' task paths that it is the installed copy
that ran.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.tools.ansible_env import (
    REPO,
    VENV_BIN,
    ansible_dirs,
    run_playbook,
    runner_output,
    ssh_inventory,
    task_results,
)
from tests.tools.collective import install_ab_all_reduce_perf

pytestmark = pytest.mark.ansible

NAMESPACE, NAME = "nccl_runbook", "fleet"
FQCN = f"{NAMESPACE}.{NAME}"
ROLES = ("evidence_collect", "nccl_ab_test", "node_drain", "workload_patch")
#: where the documented commands are (README.md, docs/, each role's README, molecule/README.md,
#: and the example inventories' comments)
DOCS = sorted([
    REPO / "README.md",
    REPO / "molecule" / "README.md",
    *(REPO / "docs").glob("*.md"),
    *(REPO / "roles").glob("*/README.md"),
    *(REPO / "inventory").glob("*.yml"),
    *(REPO / "inventory").glob("*.ini"),
])
#: a path in the tarball that is not Ansible content, or that looks like a credential
NOT_CONTENT = re.compile(
    r"^(runbook|tests|benchmarks|docs|examples|molecule|\.venv|\.git|\.ci|build|dist)(/|$)"
    r"|\.egg-info(/|$)|^playbooks/collections(/|$)|__pycache__|\.pyc$"
)
SECRET_LOOKING = re.compile(
    r"(^|/)(id_(rsa|ecdsa|ed25519|dsa)[^/]*|\.env|known_hosts|[^/]*kubeconfig[^/]*)$"
    r"|\.(pem|key|crt|p12|pfx|kdbx)$|secret|token|vault|password|credential",
    re.IGNORECASE,
)


def galaxy(args: list[str], env: Mapping[str, str], cwd: Path) -> str:
    proc = subprocess.run([str(VENV_BIN / "ansible-galaxy"), *args], cwd=cwd, env={**env},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def outside_env(ansible_env: Mapping[str, str], collections: Path) -> dict[str, str]:
    """The Ansible environment for using the installed collection: only its path."""
    env = {**os.environ, **ansible_env, "ANSIBLE_COLLECTIONS_PATH": str(collections)}
    env.pop("ANSIBLE_CONFIG", None)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Build the collection from the repository root and install the tarball into a fresh
    collections path (no dependencies: kubernetes.core is on sys.path already and Galaxy is
    not reachable). Everything under one temp dir, removed by pytest."""
    root = tmp_path_factory.mktemp("collection")
    env = {**os.environ, **ansible_dirs(root / "ansible"), "ANSIBLE_NOCOLOR": "1"}
    env.pop("ANSIBLE_CONFIG", None)
    out = root / "dist"
    galaxy(["collection", "build", "--output-path", str(out), str(REPO)], env, cwd=root)
    (tarball,) = out.glob(f"{NAMESPACE}-{NAME}-*.tar.gz")
    collections = root / "collections"
    galaxy(["collection", "install", "--no-deps", "--offline", "-p", str(collections),
            str(tarball)], env, cwd=root)  # fmt: skip
    yield {
        "root": root,
        "tarball": tarball,
        "collections": collections,
        "path": collections / "ansible_collections" / NAMESPACE / NAME,
    }


def test_the_tarball_holds_the_ansible_content_and_no_product_test_or_secret_file(
    installed: dict[str, Path],
) -> None:
    with tarfile.open(installed["tarball"]) as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
        manifest = json.load(tar.extractfile(members["MANIFEST.json"]))  # type: ignore[arg-type]
    names = set(members)
    assert manifest["collection_info"]["namespace"] == NAMESPACE
    assert manifest["collection_info"]["name"] == NAME
    wanted = {
        "galaxy.yml" if "galaxy.yml" in names else "MANIFEST.json",
        "meta/runtime.yml",
        "plugins/modules/evidence_bundle.py",
        "CHANGELOG.md",
        "README.md",
        "execution-environment.yml",
        *(f"playbooks/{p.name}" for p in (REPO / "playbooks").glob("*.yml")),
        *(f"roles/{r}/{part}" for r in ROLES
          for part in ("tasks/main.yml", "defaults/main.yml", "meta/main.yml",
                       "meta/argument_specs.yml", "README.md")),
    }  # fmt: skip
    assert wanted - names == set()
    assert sorted(n for n in names if NOT_CONTENT.search(n)) == []
    assert sorted(n for n in names if SECRET_LOOKING.search(n)) == []
    # no link out of the collection either (a link to ../.. would carry the whole checkout)
    assert [n for n, m in members.items() if m.issym() or m.islnk()] == []
    with tarfile.open(installed["tarball"]) as tar:
        for member in tar.getmembers():
            if member.isfile():
                text = tar.extractfile(member).read()  # type: ignore[union-attr]
                assert b"PRIVATE KEY-----" not in text, member.name


def test_ansible_doc_renders_the_module_and_roles_from_the_installed_collection(
    installed: dict[str, Path], ansible_env: dict[str, str],
) -> None:
    env = outside_env(ansible_env, installed["collections"])
    doc = subprocess.run(
        [str(VENV_BIN / "ansible-doc"), "-t", "module", f"{FQCN}.evidence_bundle"],
        cwd=installed["root"], env=env, capture_output=True, text=True, timeout=120)
    assert doc.returncode == 0, doc.stdout + doc.stderr
    assert str(installed["path"] / "plugins" / "modules" / "evidence_bundle.py") in doc.stdout
    for word in ("probes", "archive_size", "bundle_size", "EXAMPLES", "check_mode"):
        assert word in doc.stdout, (word, doc.stdout)

    as_json = subprocess.run(
        [str(VENV_BIN / "ansible-doc"), "--json", "-t", "module", f"{FQCN}.evidence_bundle"],
        cwd=installed["root"], env=env, capture_output=True, text=True, timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    module = json.loads(as_json.stdout)[f"{FQCN}.evidence_bundle"]
    assert module["doc"]["options"]["probes"]["required"] is True
    assert module["doc"]["attributes"]["check_mode"]["support"] == "full"
    assert {"workdir", "archive", "archive_size", "bundle_size", "files", "probes"} <= set(
        module["return"])
    assert yaml.safe_load(module["examples"])  # the examples are YAML

    role = subprocess.run(
        [str(VENV_BIN / "ansible-doc"), "--json", "-t", "role", f"{FQCN}.nccl_ab_test"],
        cwd=installed["root"], env=env, capture_output=True, text=True, timeout=120)
    assert role.returncode == 0, role.stderr
    options = json.loads(role.stdout)[f"{FQCN}.nccl_ab_test"]["entry_points"]["main"]["options"]
    assert sorted(options) == [f"nccl_ab_test_{v}" for v in
                               ("args", "command", "gpus", "output_dir", "timeout", "wrapper")]


COLLECT_PLAYBOOK = f"""\
- name: Check the plan with the module in check mode, then collect with the role
  hosts: all
  gather_facts: false
  tasks:
    - name: Check the probes without running them.
      {FQCN}.evidence_bundle:
        probes: "{{{{ evidence_collect_probes }}}}"
      check_mode: true
      register: planned

    - name: Write a bundle with the module itself, in the given parent directory.
      {FQCN}.evidence_bundle:
        probes: "{{{{ evidence_collect_probes }}}}"
        parent: "{{{{ evidence_collect_remote_dir }}}}"
        meta: {{pod: trainer-0, namespace: ml}}
      register: direct

    - name: Remove the module's work directory.
      ansible.builtin.file:
        path: "{{{{ direct.workdir }}}}"
        state: absent

    - name: Collect and fetch the bundle with the role.
      ansible.builtin.include_role:
        name: {FQCN}.evidence_collect
"""

PROBES = [
    {"name": "hostname.txt", "command": "hostname", "timeout": 10},
    {"name": "kernel.txt", "command": "uname -r", "timeout": 10},
    {"name": "nvidia-smi-L.txt", "command": "nvidia-smi-not-installed -L", "timeout": 10},
    {"name": "hostname.txt", "command": "echo a second probe of that name is dropped"},
]


@pytest.mark.ssh
def test_the_installed_collection_collects_a_bundle_over_ssh_with_its_role_and_module(
    installed: dict[str, Path], ssh_host, host_network, ansible_env: dict[str, str],  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    node = ssh_host("coll-a")
    project = tmp_path / "project"  # outside the repository: nothing adjacent to find
    project.mkdir()
    (project / "collect.yml").write_text(COLLECT_PLAYBOOK)
    remote = tmp_path / "node-work"  # the test host shares this filesystem
    remote.mkdir()
    dest = tmp_path / "bundles"
    runner = run_playbook(
        tmp_path / "runner",
        "collect.yml",
        project_dir=project,
        inventory=ssh_inventory(host_network, [node]),
        envvars={**ansible_env, "ANSIBLE_COLLECTIONS_PATH": str(installed["collections"])},
        extravars={
            "evidence_collect_probes": PROBES,
            "evidence_collect_dest": str(dest),
            "evidence_collect_remote_dir": str(remote),
        },
        cmdline=None,
    )
    assert (runner.status, runner.rc) == ("successful", 0), runner_output(runner)

    ran = [e["event_data"] for e in runner.events if e.get("event") == "runner_on_ok"]
    by_task = {d["task"]: d for d in ran}
    # the installed copy ran, not the checkout
    role_task = by_task[
        "Run the runbook's probes and write the bundle in a private work directory."]
    assert role_task["task_path"].startswith(str(installed["path"] / "roles" / "evidence_collect"))
    assert role_task["resolved_action"] == f"{FQCN}.evidence_bundle"

    planned = by_task["Check the probes without running them."]["res"]
    assert planned["probes"] == ["hostname.txt", "kernel.txt", "nvidia-smi-L.txt"]
    assert "workdir" not in planned and not planned["changed"]

    direct = by_task["Write a bundle with the module itself, in the given parent directory."]["res"]
    assert not direct["changed"]
    assert Path(direct["workdir"]).parent == remote
    assert direct["node"] == "coll-a"
    assert direct["failed_probes"] == {"nvidia-smi-L.txt": "command not found"}
    assert direct["archive_size"] > 0 and direct["bundle_size"] > 0
    # 3 outputs + 3 .rc + 1 .err (the missing command's) + bundle.yaml
    assert direct["files"] == 8
    assert list(remote.iterdir()) == []  # both work directories left the node

    with tarfile.open(dest / "coll-a.tar.gz") as tar:
        files = {m.name: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                 for m in tar.getmembers() if m.isfile()}
    assert files["bundle/hostname.txt"].strip() == "coll-a"
    assert files["bundle/nvidia-smi-L.txt.rc"].strip() == "127"
    meta = yaml.safe_load(files["bundle/bundle.yaml"])
    assert (meta["format"], meta["node"]) == (1, "coll-a")


def documented_commands() -> list[tuple[str, str]]:
    """(where, command) for every `ansible-playbook …` command the docs show, with its
    backslash-continued lines joined."""
    start = re.compile(r"^\s*(?:[#$]\s*)?(ansible-playbook\s+(?:-|\S+\.ya?ml\b).*)$")
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for number, line in enumerate(lines):
            match = start.match(line)
            if not match:
                continue
            command = match.group(1)
            following = iter(lines[number + 1:])
            while command.endswith("\\"):
                command = command[:-1] + " " + next(following).strip().lstrip("#").strip()
            found.append((f"{doc.relative_to(REPO)}:{number + 1}", command))
    return found


def test_every_documented_ansible_playbook_command_parses_from_the_repository_root(
    ansible_env: dict[str, str], tmp_path: Path,
) -> None:
    commands = documented_commands()
    playbooks = {word for _, c in commands for word in c.split() if word.startswith("playbooks/")}
    # the extraction found the commands the roles' READMEs and the sweep docs show
    assert {"playbooks/collect.yml", "playbooks/nccl-ib-disable-ab.yml",
            "playbooks/node-drain.yml", "playbooks/shm-size-limit.yml"} <= playbooks, commands
    env = {**os.environ, **ansible_env}
    env.pop("ANSIBLE_CONFIG", None)  # the repository's ansible.cfg, as a user has it
    failures = []
    for where, command in commands:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            failures.append(f"{where}: cannot be split ({exc}): {command}")
            continue
        # an extra-vars file the reader writes first (plan.yml, proposal-vars.yml): an empty one
        for i, arg in enumerate(argv):
            if arg.startswith("@") and not (REPO / arg[1:]).exists():
                stand_in = tmp_path / Path(arg[1:]).name
                stand_in.write_text("{}\n")
                argv[i] = f"@{stand_in}"
        proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), *argv[1:], "--syntax-check"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            failures.append(f"{where}: {command}\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    assert failures == [], "\n\n".join(failures)


@pytest.mark.ssh
def test_the_deprecated_nccl_ab_names_give_the_same_run_as_the_prefixed_ones(
    ssh_host, host_network, ansible_env, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    node = ssh_host("ab-old")
    calls = install_ab_all_reduce_perf(node)
    inventory = ssh_inventory(host_network, [node])
    results: dict[str, Any] = {}
    for generation, prefix in (("old", "nccl_ab_"), ("new", "nccl_ab_test_")):
        out = tmp_path / generation
        extravars = {f"{prefix}output_dir": str(out), f"{prefix}gpus": 2,
                     f"{prefix}args": "-b 8M -e 16M -f 2", f"{prefix}timeout": 120}
        runner = run_playbook(tmp_path / f"run-{generation}", "nccl-ib-disable-ab.yml",
                              envvars=ansible_env, extravars=extravars, inventory=inventory)
        assert (runner.status, runner.rc) == ("successful", 0), runner_output(runner)
        results[generation] = {
            "files": {p.name: p.read_text() for p in sorted((out / "ab-old").iterdir())},
            "calls": calls.read_text().splitlines(),
            "warned": [d["res"].get("msg", "") for d in task_results(runner, "ok")
                       if str(d["res"].get("msg", "")).startswith("DEPRECATED")],
        }
        calls.unlink()
    old, new = results["old"], results["new"]
    assert sorted(old["files"]) == ["ib-disabled.log", "ib-disabled.rc", "ib-enabled.log",
                                    "ib-enabled.rc"]
    assert old["files"] == new["files"]
    assert old["calls"] == new["calls"] and len(old["calls"]) == 2
    assert json.loads(old["calls"][0])["argv"] == ["-b", "8M", "-e", "16M", "-f", "2", "-g", "2"]
    assert old["warned"] == [
        "DEPRECATED: nccl_ab_args, nccl_ab_gpus, nccl_ab_output_dir, nccl_ab_timeout; use "
        "nccl_ab_test_args, nccl_ab_test_gpus, nccl_ab_test_output_dir, nccl_ab_test_timeout "
        "(the old names go in nccl_runbook.fleet 2.0.0)"]
    assert new["warned"] == []
