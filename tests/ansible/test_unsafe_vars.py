"""Nothing from evidence or the command line is templated by Ansible.

Every value `runbook` hands a playbook (a manifest's content, `--var`s such as manifest_dest,
names read from pod.json or an inventory) reaches Ansible marked `!unsafe`: Jinja in it is
text, never run. Each test plants a lookup that would create a marker file if it ran, in
check mode (what `approvals preview` and the guided prompt's diff run) and in the real run
(what `approvals approve` runs), and shows the marker is never made — while the same values
handed to ansible-runner the plain way do make it, so the test can fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
import yaml

from runbook.ansible_text import unsafe_yaml
from runbook.remedies.plans import localhost_inventory
from runbook.remedies.playbook import run_playbook
from tests.tools.ansible_env import run_playbook as run_ansible_playbook

pytestmark = pytest.mark.ansible

SAMPLE = Path(__file__).with_name("data") / "trainer-job.yaml"
SHM_PATCH = {"spec": {"template": {"spec": {"volumes": [
    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "48Gi"}}]}}}}  # fmt: skip


def planted(marker: Path) -> dict[str, str]:
    """The forms Jinja can take in a value, each of which would touch `marker` if run."""
    pipe = f"lookup('ansible.builtin.pipe', 'touch {marker}')"
    return {
        "expression": "{{ " + pipe + " }}",
        "statement": "{% set x = " + pipe + " %}",
        "filter": "{{ 'x' | regex_replace('x', " + pipe + ") }}",
    }


def workload_vars(tmp_path: Path, marker: Path, form: str) -> dict[str, Any]:
    jinja = planted(marker)[form]
    manifest = tmp_path / "gitops" / "trainer-job.yaml"
    manifest.parent.mkdir(exist_ok=True)
    shutil.copy(SAMPLE, manifest)
    content = SAMPLE.read_text() + f"# {jinja}\n"  # a comment in the workload's own file
    return {
        "workload_patch_manifest": str(manifest),
        "workload_patch_content": content,
        "workload_patch_patch": json.dumps(SHM_PATCH),
        "workload_patch_type": "strategic",
        "workload_patch_kustomize": f"# {jinja}\n",
        "workload_patch_output_dir": str(tmp_path / "proposal"),
        "workload_patch_apply": "file",
        "workload_patch_dest": str(manifest),
        "workload_patch_commit_message": f"runbook: {jinja}",
    }


@pytest.mark.parametrize("form", ["expression", "statement", "filter"])
def test_jinja_in_a_manifest_and_its_variables_is_text_in_check_mode_and_the_real_run(
    ansible_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    for name, value in ansible_env.items():
        monkeypatch.setenv(name, value)
    marker = tmp_path / "pwned"
    extravars = workload_vars(tmp_path, marker, form)
    inventory = localhost_inventory()
    check = run_playbook("shm-size-limit.yml", inventory=inventory, extravars=extravars,
                         private_dir=tmp_path / "run", check=True)  # fmt: skip
    assert check.ok, check.stdout[-3000:]
    assert not marker.exists(), "check mode ran Jinja from a variable"
    apply = run_playbook("shm-size-limit.yml", inventory=inventory, extravars=extravars,
                         private_dir=tmp_path / "run", check=False)  # fmt: skip
    assert apply.ok, apply.stdout[-3000:]
    assert not marker.exists(), "the real run ran Jinja from a variable"
    # the text arrived as it was: the planted line is in the written manifest, untouched
    written = Path(extravars["workload_patch_dest"]).read_text()
    assert planted(marker)[form] in written
    # the variables file is the owner's alone
    assert oct((tmp_path / "run" / "env" / "extravars").stat().st_mode & 0o777) == "0o600"


def test_the_plain_way_would_run_it(ansible_env: dict[str, str], tmp_path: Path) -> None:
    """The control: the same values as plain extra vars do run the lookup (ansible-core
    templates variable values), so the test above can fail."""
    marker = tmp_path / "pwned"
    extravars = workload_vars(tmp_path, marker, "expression")
    run_ansible_playbook(
        tmp_path / "plain", "shm-size-limit.yml", envvars=ansible_env, extravars=extravars,
        inventory=localhost_inventory(), cmdline="--check --diff",
    )  # fmt: skip
    assert marker.exists()


def test_inventory_values_from_evidence_are_text(
    ansible_env: dict[str, str], tmp_path: Path
) -> None:
    """A node name or address taken from evidence reaches the inventory marked unsafe too: a
    play that prints it gets the text, not what the Jinja in it would do."""
    marker = tmp_path / "pwned"
    jinja = planted(marker)["expression"]
    private = tmp_path / "run"
    host = {**localhost_inventory()["all"]["hosts"]["localhost"], "node_label": jinja}
    (private / "inventory").mkdir(parents=True)
    (private / "inventory" / "hosts.yml").write_text(
        unsafe_yaml({"all": {"hosts": {"node-1": host}}})
    )
    (private / "env").mkdir()
    (private / "env" / "extravars").write_text(unsafe_yaml({"node_name": jinja}))
    project = tmp_path / "project"
    project.mkdir()
    task = {"ansible.builtin.debug": {"msg": "{{ node_label }} {{ node_name }}"}}
    play = {"hosts": "all", "gather_facts": False, "tasks": [task]}
    (project / "show.yml").write_text(yaml.safe_dump([play]))
    runner = ansible_runner.run(private_data_dir=str(private), project_dir=str(project),
                                playbook="show.yml", envvars=ansible_env, quiet=True)  # fmt: skip
    assert runner.status == "successful"
    results = [e["event_data"].get("res", {}) for e in runner.events
               if e.get("event") == "runner_on_ok"]  # fmt: skip
    assert [r.get("msg") for r in results if "msg" in r] == [f"{jinja} {jinja}"]
    assert not marker.exists()


def test_every_string_written_for_ansible_is_untrusted_as_a_template(
    ansible_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ansible's own loader, reading the file the way `-e @file` does, trusts none of its
    strings as templates; numbers and booleans keep their types."""
    monkeypatch.setenv("ANSIBLE_HOME", ansible_env["ANSIBLE_HOME"])
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import is_trusted_as_template

    data = {"a": "{{ x }}", "n": 3, "b": True, "nested": {"list": ["{% y %}", 1.5]}}
    path = tmp_path / "vars.yml"
    path.write_text(unsafe_yaml(data))
    loaded = DataLoader().load_from_file(str(path), trusted_as_template=True)
    assert loaded == data
    assert not is_trusted_as_template(loaded["a"])
    assert not is_trusted_as_template(loaded["nested"]["list"][0])
    assert isinstance(loaded["n"], int) and loaded["b"] is True
