"""The other engine's path gives the same verdicts: playbooks/collect.yml (roles/evidence_collect,
through the real ansible-runner and ansible-playbook, over SSH to the same test hosts and the
same inventory file) writes the evidence bundle on each host and fetches it; `runbook
analyze-dir` analyses the fetched bundles; a live `runbook sweep` of the same hosts must reach
the same root cause and the same first anomaly on every host."""

from __future__ import annotations

import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from runbook.spec import load_file, resolve
from runbook.sweep.plan import collection_plan, dump_plan
from tests.sweep import fleet
from tests.sweep.helpers import runbook
from tests.tools.ansible_env import run_playbook

pytestmark = [pytest.mark.ansible, pytest.mark.ssh]

#: one collection plan serves every host, so no host's inventory entry names a job here: the
#: neighbour's OOM (no job on the node) is what both engines must agree is no finding
KINDS = ["healthy", "neighbour-oom", "xid"]


def test_ansible_collection_and_live_sweep_give_the_same_verdicts(
    ssh_host: Any,
    host_network: Any,
    tmp_path: Path,
    env: dict[str, str],
    ansible_env: dict[str, str],
) -> None:
    hosts, known = fleet.build(ssh_host, host_network, KINDS, tmp_path, prefix="c")
    inventory = fleet.write_inventory(
        tmp_path / "inventory.yml", fleet.inventory(host_network, hosts, known)
    )
    plan = tmp_path / "plan.yml"  # what `runbook collect-plan nccl-init-failure -o` writes
    plan.write_text(dump_plan(collection_plan(load_file(resolve("nccl-init-failure")))))
    probes = yaml.safe_load(plan.read_text().replace("!unsafe ", ""))["evidence_collect_probes"]
    assert {"hostname.txt", "dmesg.txt", "nvidia-smi-q.txt", "app/*.log"} <= {
        p["name"] for p in probes
    }

    remote = tmp_path / "node-work"  # the hosts share this filesystem: look at it afterwards
    remote.mkdir()
    bundles = tmp_path / "bundles"
    result = run_playbook(
        tmp_path / "runner",
        "collect.yml",
        inventory=str(inventory),
        envvars=ansible_env,
        extravars={
            "evidence_collect_dest": str(bundles),
            "evidence_collect_remote_dir": str(remote),
        },
        cmdline=f"-e @{plan}",
    )
    assert (result.status, result.rc) == ("successful", 0), result.stdout.read()[-4000:]
    assert sorted(p.name for p in bundles.iterdir()) == [f"{n}.tar.gz" for n in sorted(hosts)]
    assert list(remote.iterdir()) == []  # the work directory left the node
    with tarfile.open(bundles / f"{next(iter(hosts))}.tar.gz") as tar:
        members = set(tar.getnames())
    assert {"bundle/bundle.yaml", "bundle/dmesg.txt", "bundle/dmesg.txt.rc"} <= members

    # the offline analysis and the live sweep are independent: run them side by side
    with ThreadPoolExecutor(max_workers=2) as both:
        offline_run = both.submit(
            runbook,
            [
                "analyze-dir",
                str(bundles),
                "--report",
                str(tmp_path / "offline"),
                "--format",
                "json",
            ],
            env,
        )
        live_run = both.submit(
            runbook,
            [
                "sweep",
                "nccl-init-failure",
                "-i",
                str(inventory),
                "--report",
                str(tmp_path / "live"),
                "--format",
                "json",
            ],
            env,
        )
        analyzed, swept = offline_run.result(), live_run.result()
    assert analyzed.rc == 1 and swept.rc == 1, (analyzed.stderr, swept.stderr)
    offline = {h["host"]: h["verdict"] for h in analyzed.json()["hosts"]}
    live = {h["host"]: h["verdict"] for h in swept.json()["hosts"]}
    assert set(offline) == set(live) == set(hosts)
    for name, (_, kind) in hosts.items():
        assert offline[name]["root_cause"] == live[name]["root_cause"] == fleet.EXPECTED[kind]
        assert offline[name]["first_anomaly"] == live[name]["first_anomaly"], name
        also = [[a["finding"] for a in v[name]["also_seen"]] for v in (offline, live)]
        assert also[0] == also[1], name
        assert offline[name]["node"] == live[name]["node"] == name
        statuses = [(s["id"], s["status"]) for s in offline[name]["stages"]]
        assert statuses == [(s["id"], s["status"]) for s in live[name]["stages"]], name
    for report in ("sweep.json", "sweep.md", "junit.xml", "runbook.prom"):
        assert (tmp_path / "offline" / report).is_file()
