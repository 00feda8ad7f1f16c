"""The example inventories parse with Ansible's own inventory plugins (the loader
ansible-playbook uses, in one child process so Ansible's global state stays out of the test
run), say the same thing in YAML and INI, and name connection variables that the plugin they
select really reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.tools.ansible_env import REPO, ansible_dirs

pytestmark = pytest.mark.ansible

SOURCES = ("example.yml", "example.ini", "k8s-gpu-nodes.yml")

#: run in a child python: every host's variables (group vars merged) per inventory, and the
#: variable names the kubectl connection plugin documents
_PARSE = r"""
import json, sys
from ansible.inventory.helpers import get_group_vars
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import connection_loader, init_plugin_loader
from ansible.utils.plugin_docs import get_docstring
from ansible.utils.vars import combine_vars

init_plugin_loader()
out = {"inventories": {}}
for source in sys.argv[1:]:
    inventory = InventoryManager(loader=DataLoader(), sources=[source])
    hosts = {}
    for host in inventory.get_hosts():
        merged = combine_vars(get_group_vars(host.get_groups()), host.vars)
        merged = {k: v for k, v in merged.items() if k not in ("inventory_file", "inventory_dir")}
        hosts[host.name] = {"vars": merged, "groups": sorted(g.name for g in host.get_groups())}
    out["inventories"][source.rsplit("/", 1)[-1]] = hosts
plugin = connection_loader.find_plugin("kubernetes.core.kubectl")
doc = get_docstring(plugin, fragment_loader=None)[0] if plugin else {"options": {}}
out["kubectl_vars"] = sorted(
    v["name"] for opt in doc["options"].values() for v in opt.get("vars", []))
print(json.dumps(out, default=str))
"""


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = {**os.environ, **ansible_dirs(tmp_path_factory.mktemp("ansible"))}
    proc = subprocess.run(
        [sys.executable, "-c", _PARSE, *(str(REPO / "inventory" / s) for s in SOURCES)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_the_yaml_and_ini_examples_describe_the_same_bastioned_gpu_nodes(parsed) -> None:  # type: ignore[no-untyped-def]
    yaml_hosts = parsed["inventories"]["example.yml"]
    ini_hosts = parsed["inventories"]["example.ini"]
    assert set(yaml_hosts) == {"gpu-node-07", "gpu-node-08"}
    assert yaml_hosts == ini_hosts
    node = yaml_hosts["gpu-node-07"]
    assert node["groups"] == ["all", "gpu_nodes"]
    assert node["vars"]["ansible_host"] == "10.40.3.17"
    assert "-o ProxyJump=ops@bastion.example.org" in node["vars"]["ansible_ssh_common_args"]
    assert int(node["vars"]["nccl_ab_test_gpus"]) == 8


def test_the_kubernetes_example_reaches_each_node_through_its_agent_pod(parsed) -> None:  # type: ignore[no-untyped-def]
    hosts = parsed["inventories"]["k8s-gpu-nodes.yml"]
    assert {name: h["vars"]["ansible_kubectl_pod"] for name, h in hosts.items()} == {
        "gpu-node-07": "node-agent-x7k2p", "gpu-node-08": "node-agent-m4q9d"}
    for host in hosts.values():
        assert host["vars"]["ansible_connection"] == "kubernetes.core.kubectl"
        assert host["vars"]["ansible_kubectl_namespace"] == "kube-system"
    assert parsed["kubectl_vars"], "kubernetes.core is not installed"
    used = {v for h in hosts.values() for v in h["vars"] if v.startswith("ansible_kubectl_")}
    assert used <= set(parsed["kubectl_vars"]), used - set(parsed["kubectl_vars"])
