from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.rdma import parse_ibdev2netdev, parse_ls, parse_lspci, parse_rdma_link

from .helpers import result, roundtrip, sample, sample_lines

D = "rdma/"
NO_DEV = "ls: cannot access '/dev/infiniband': No such file or directory\n"


def incident_files() -> dict[str, Any]:
    return {
        "dev-infiniband.txt": result("dev-infiniband.txt", "", rc=2, stderr=NO_DEV),
        "sys-class-infiniband.txt": result("sys-class-infiniband.txt",
                                           sample(D + "incident-sys-class-infiniband.txt")),
        "rdma-link.txt": result("rdma-link.txt", ""),
        "ibdev2netdev.txt": result("ibdev2netdev.txt", "", rc=127,
                                   stderr="bash: line 1: ibdev2netdev: command not found\n"),
        "lspci.txt": result("lspci.txt", sample(D + "incident-lspci.txt")),
    }


def ib_files() -> dict[str, Any]:
    names = {"dev-infiniband.txt": "ib-dev-infiniband.txt",
             "sys-class-infiniband.txt": "ib-sys-class-infiniband.txt",
             "rdma-link.txt": "ib-rdma-link.txt", "ibdev2netdev.txt": "ib-ibdev2netdev.txt",
             "lspci.txt": "ib-lspci.txt"}
    return {k: result(k, sample(D + v)) for k, v in names.items()}


def test_the_incident_node_has_no_rdma_device_despite_its_label() -> None:
    facts = roundtrip(registry.get("rdma").func(incident_files(), {}))
    assert facts["dev_infiniband"] == {"collected": True, "present": False, "entries": []}
    assert facts["sys_class_infiniband"]["present"] is True
    assert facts["sys_class_infiniband"]["entries"] == []
    assert facts["devices"] == [] and facts["active_ports"] == [] and facts["nics"] == []
    assert facts["ibdev2netdev"] == {"collected": False}  # command not found: no evidence
    assert facts["usable"] is False
    assert facts["gpus_on_pci"] == 8
    assert len(facts["lspci"]["ethernet"]) == 2


def test_an_infiniband_node_has_devices_active_ports_and_is_usable() -> None:
    facts = roundtrip(registry.get("rdma").func(ib_files(), {}))
    assert facts["devices"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert facts["active_ports"] == ["mlx5_0/1", "mlx5_1/1", "mlx5_2/1"]
    assert facts["uverbs"] is True and facts["usable"] is True
    assert [n["device_id"] for n in facts["nics"]] == ["1021", "1021", "101d", "101d"]
    assert facts["gpus_on_pci"] == 2


def test_ls_listing_keeps_names_and_symlink_targets() -> None:
    dev = parse_ls(sample_lines(D + "ib-dev-infiniband.txt"))
    assert "uverbs3" in dev.entries and "." not in dev.entries and len(dev.entries) == 9
    sysfs = parse_ls(sample_lines(D + "ib-sys-class-infiniband.txt"))
    assert sysfs.targets["mlx5_0"].endswith("0000:0c:00.0/infiniband/mlx5_0")


def test_rdma_link_in_new_and_old_iproute2_formats() -> None:
    new = parse_rdma_link(sample_lines(D + "ib-rdma-link.txt"))
    assert [(x.device, x.port, x.state, x.active) for x in new] == [
        ("mlx5_0", 1, "ACTIVE", True), ("mlx5_1", 1, "ACTIVE", True),
        ("mlx5_2", 1, "ACTIVE", True), ("mlx5_3", 1, "DOWN", False),
    ]
    assert new[2].netdev == "ens1f0np0" and new[0].netdev is None
    old = parse_rdma_link(sample_lines(D + "old-iproute-rdma-link.txt"))
    assert [(x.device, x.netdev, x.active) for x in old] == [("mlx5_0", "ib0", True),
                                                             ("mlx5_1", "ib1", False)]


def test_ibdev2netdev_up_and_down() -> None:
    maps = parse_ibdev2netdev(sample_lines(D + "ib-ibdev2netdev.txt"))
    assert [(m.device, m.netdev, m.up) for m in maps][-1] == ("mlx5_3", "ens1f1np1", False)


def test_lspci_finds_connectx_and_nvidia_gpus_but_not_other_ethernet() -> None:
    pci = parse_lspci(sample_lines(D + "ib-lspci.txt"))
    assert [d.slot for d in pci.rdma_nics] == ["0c:00.0", "4c:00.0", "8c:00.0", "8c:00.1"]
    assert pci.rdma_nics[0].class_id == "0207" and pci.rdma_nics[0].vendor_id == "15b3"
    assert [d.device_id for d in pci.gpus] == ["2330", "2330"]
    assert [d.vendor_id for d in pci.ethernet] == ["14e4"]


def test_nothing_collected_is_not_collected() -> None:
    facts = registry.get("rdma").func({}, {})
    assert facts["collected"] is False and facts["usable"] is False


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=120), max_size=20))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    assert isinstance(parse_ls(lines).entries, tuple)
    assert isinstance(parse_rdma_link(lines), tuple)
    assert isinstance(parse_ibdev2netdev(lines), tuple)
    assert isinstance(parse_lspci(lines).gpus, tuple)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 1200))
def test_truncated_samples_never_raise(cut: int) -> None:
    files = {k: result(k, v.stdout[:cut], rc=v.exited, stderr=v.stderr)
             for k, v in ib_files().items()}
    assert isinstance(registry.get("rdma").func(files, {})["usable"], bool)
