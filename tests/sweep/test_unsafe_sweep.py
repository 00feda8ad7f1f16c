"""Jinja in what a sweep reads is never run by Ansible, from the sweep to the approved remedy.

A sweep reads host names from the inventory and output from the node; both end up in what the
queued remedy hands Ansible (the node's inventory name names its output directory; the node's
`all_reduce_perf` output is written to the controller by the A/B test's role). Here the host's
inventory name holds an expression (`6*7`), the node's `all_reduce_perf` prints a lookup that
would create a marker file on the controller, and the state directory's path (where the A/B
test's output goes, an extra variable) holds the same expression. After the sweep, `approvals
preview` and `approvals approve` (which runs the A/B test on the node over SSH), the marker
does not exist, the output lands under the directories as named (not `…-42`), and the lookup's
text is in the recorded log as the node printed it. (Ansible itself never templates an
inventory host name or a module's output; the state directory's path is what a missing
`!unsafe` would let through.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sweep import fleet
from tests.sweep.helpers import RUNBOOKS, queued, runbook

pytestmark = [pytest.mark.ansible, pytest.mark.ssh]

PRINTING_ALL_REDUCE = """#!/bin/sh
# test shim: all_reduce_perf whose output carries Jinja (evidence is text, never a template)
echo "# nccl-tests shim {lookup}"
echo "NCCL WARN {{% set x = 1 %}}"
"""


def test_jinja_from_the_inventory_and_the_node_is_text_to_the_approved_remedy(
    ssh_host: Any, host_network: Any, tmp_path: Path, env: dict[str, str]
) -> None:
    env = {**env, "RUNBOOK_STATE_DIR": str(tmp_path / "state-{{ 6*7 }}")}
    marker = tmp_path / "pwned"
    lookup = "{{ lookup('ansible.builtin.pipe', 'touch " + str(marker) + "') }}"
    host = ssh_host("ib-less-jinja")
    host.write_shim("all_reduce_perf", PRINTING_ALL_REDUCE.format(lookup=lookup))
    known = tmp_path / "known_hosts"
    known.write_text(Path(host_network.known_hosts_path).read_text())
    name = "gpu-{{ 6*7 }}"
    inventory = fleet.write_inventory(
        tmp_path / "inventory.yml", fleet.inventory(host_network, {name: (host, "healthy")}, known)
    )
    swept = runbook(["sweep", str(RUNBOOKS / "ab-proposal.yaml"), "-i", str(inventory),
                     "--report", str(tmp_path / "report"), "--format", "json"], env)  # fmt: skip
    assert swept.rc == 1, swept.stderr  # a finding, its proposal queued
    assert [h["host"] for h in swept.json()["hosts"]] == [name]
    (proposal,) = queued(env)
    assert proposal.node == name and proposal.kind == "nccl-ib-disable-ab"
    assert not marker.exists()

    previewed = runbook(["approvals", "preview", proposal.id], env, timeout=180)
    assert previewed.rc == 0, previewed.stdout + previewed.stderr
    assert not marker.exists(), "approvals preview ran a lookup"

    approved = runbook(["approvals", "approve", proposal.id, "--no-recheck"], env, timeout=180)
    assert approved.rc == 0, approved.stdout + approved.stderr
    assert not marker.exists(), "the approved remedy ran a lookup from the node's output"
    out = Path(proposal.plan["extravars"]["nccl_ab_test_output_dir"])
    assert out.is_relative_to(env["RUNBOOK_STATE_DIR"]), out
    assert not (tmp_path / "state-42").exists(), "the output directory was templated"
    assert sorted(p.name for p in out.iterdir()) == [name], "the host name was templated"
    log = (out / name / "ib-enabled.log").read_text()
    assert lookup in log and "{% set x = 1 %}" in log
