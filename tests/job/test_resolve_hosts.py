"""`--hosts-from-file FILE`: a job written down as its nodes, one per line, good and bad."""

from __future__ import annotations

from pathlib import Path

import pytest

from runbook.errors import JobError
from runbook.job.resolve import resolve_job
from runbook.job.resolve_hosts import load_hosts_file, parse_hosts_file, parse_ranks
from runbook.sweep.inventory import HostEntry

GOOD = """\
# the failed job of 2025-03-11: four nodes, eight ranks each
ssh://root@10.0.0.11:2222   ranks=0-7   app_log_dir=/var/log/training
kubectl://kube-system/node-agent-x2  node=gpu-node-07  ranks=8,9,10-15  pod=trainer-1 namespace=ml
gpu-node-03   ranks=16-23        # from the inventory
gpu-node-04   ranks=24-31  app_log_dir='/mnt/logs/run 7'  nodes=4

local
"""

INVENTORY = [
    HostEntry(
        "gpu-node-03",
        "ssh://ops@10.0.0.13:22",
        jump="ops@bastion:22",
        variables={"app_log_dir": "/data/logs", "nccl_log_dir": "/data/nccl"},
    ),
    HostEntry("gpu-node-04", "ssh://ops@10.0.0.14:22"),
]


def test_each_line_is_a_node_with_its_target_ranks_and_variables() -> None:
    spec = parse_hosts_file(GOOD, source="job.hosts", inventory=INVENTORY, ssh_user="root")
    assert spec.ref == "hosts:job.hosts"
    assert [(n.name, n.entry.target) for n in spec.nodes] == [
        ("10.0.0.11", "ssh://root@10.0.0.11:2222"),
        ("gpu-node-07", "kubectl://kube-system/node-agent-x2"),
        ("gpu-node-03", "ssh://ops@10.0.0.13:22"),
        ("gpu-node-04", "ssh://ops@10.0.0.14:22"),
        ("local", "local"),
    ]
    ssh, kube, inv, quoted, local = spec.nodes
    assert ssh.ranks == tuple(range(8)) and local.ranks == (None,)
    assert ssh.entry.variables == {"nodes": 5, "app_log_dir": "/var/log/training"}
    assert kube.entry.variables == {"nodes": 5, "pod": "trainer-1", "namespace": "ml"}
    # an inventory host keeps its bastion and runbook_vars; the line's variables win
    assert inv.entry.jump == "ops@bastion:22"
    assert inv.entry.variables == {
        "app_log_dir": "/data/logs",
        "nccl_log_dir": "/data/nccl",
        "nodes": 5,
    }
    assert quoted.entry.variables == {"nodes": "4", "app_log_dir": "/mnt/logs/run 7"}
    assert [r.rank for r in spec.ranks][:3] == [0, 1, 2] and spec.ranks[-1].rank is None
    rank8 = next(r for r in spec.ranks if r.rank == 8)
    assert (rank8.node, rank8.pod, rank8.namespace) == ("gpu-node-07", "trainer-1", "ml")


def test_a_bare_name_without_an_inventory_is_an_ssh_host() -> None:
    spec = parse_hosts_file("gpu-node-03 ranks=0\n", ssh_user="sre")
    assert spec.nodes[0].entry.target == "ssh://sre@gpu-node-03:22"


def test_every_bad_line_is_reported_at_once_with_file_and_line() -> None:
    bad = """\
ssh://root@10.0.0.11   ranks=0-7
gpu-node-99            ranks=8
ftp://somewhere
ssh://root@10.0.0.11   ranks=9
kubectl://only-a-namespace
gpu-node-03 ranks=3-1 verbose
gpu-node-04 app_log_dir='/unterminated
"""
    with pytest.raises(JobError) as err:
        parse_hosts_file(bad, source="bad.hosts", inventory=INVENTORY)
    message = err.value.one_line()
    assert message.split("; ") == [
        "bad.hosts:2: gpu-node-99 is not in the inventory",
        "bad.hosts:3: unknown target 'ftp://somewhere': use ssh://, kubectl://, local or a host "
        "name",
        "bad.hosts:4: node 10.0.0.11 is already listed on line 1",
        "bad.hosts:5: kubectl target must be kubectl://NAMESPACE/POD, not "
        "kubectl://only-a-namespace",
        "bad.hosts:6: ranks: bad rank range '3-1'",
        "bad.hosts:6: 'verbose' is not key=value",
        "bad.hosts:7: No closing quotation",
    ]


def test_a_file_with_no_node_or_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.hosts"
    empty.write_text("# nothing yet\n\n")
    with pytest.raises(JobError, match=r"empty.hosts: lists no node$"):
        load_hosts_file(empty)
    with pytest.raises(JobError, match=r"missing.hosts: No such file or directory$"):
        load_hosts_file(tmp_path / "missing.hosts")


def test_the_flag_and_the_hosts_ref_read_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "job.hosts"
    path.write_text(GOOD)
    by_flag = resolve_job(hosts_file=path, inventory=INVENTORY, ssh_user="root")
    by_ref = resolve_job(f"hosts:{path}", inventory=INVENTORY, ssh_user="root")
    assert by_flag == by_ref and len(by_flag.nodes) == 5


@pytest.mark.parametrize(
    ("text", "ranks"),
    [("0", (0,)), ("0,1", (0, 1)), ("0-3", (0, 1, 2, 3)), ("4-5,0,4", (4, 5, 0))],
)
def test_ranks_are_numbers_and_ranges(text: str, ranks: tuple[int, ...]) -> None:
    assert parse_ranks(text) == ranks


def test_two_ports_of_one_address_are_two_nodes_and_one_port_twice_is_one() -> None:
    spec = parse_hosts_file(
        "ssh://root@10.0.0.5:2201 ranks=0\nssh://root@10.0.0.5:2202 ranks=1\n", source="h"
    )
    assert [n.name for n in spec.nodes] == ["10.0.0.5:2201", "10.0.0.5:2202"]
    with pytest.raises(JobError, match="already listed on line 1"):
        parse_hosts_file("ssh://root@10.0.0.5:2201\nssh://root@10.0.0.5:2201\n", source="h")
