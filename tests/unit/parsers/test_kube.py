from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.kube import parse_node, parse_pods, parse_quantity, pod_cgroup_paths

from .helpers import result, roundtrip, sample

GiB = 1024**3
UID = "7c1d3a52-8e4b-4f0a-9d21-5b6c8e9f0a13"


@pytest.mark.parametrize(
    ("quantity", "value"),
    [("640Gi", 640 * GiB), ("1.5Gi", 1610612736), ("500M", 500_000_000), ("128974848", 128974848),
     ("2063868540Ki", 2063868540 * 1024), ("1e3", 1000), ("100m", 1), ("1k", 1000), (4096, 4096),
     ("64Mi", 64 * 1024**2), ("2Ti", 2 * 1024**4), ("bogus", None), ("", None), (None, None)],
)
def test_kubernetes_quantities_in_bytes(quantity: object, value: int | None) -> None:
    assert parse_quantity(quantity) == value


def test_the_incident_pod_was_oom_killed_at_a_640_gib_limit_with_an_unbounded_shm() -> None:
    (pod,) = parse_pods(sample("kube/pod-incident.json"))
    assert (pod.uid, pod.qos_class, pod.node_name) == (UID, "Burstable", "gpu-node-07")
    trainer = pod.containers[0]
    assert trainer.name == "trainer" and trainer.restarts == 1
    assert trainer.memory_limit_bytes == 640 * GiB
    assert trainer.memory_request_bytes == 512 * GiB
    assert trainer.last_terminated is not None
    assert trainer.last_terminated.reason == "OOMKilled"
    assert trainer.last_terminated.exit_code == 137
    assert trainer.last_terminated.finished_at == "2025-03-04T10:12:02Z"
    assert trainer.oom_killed and trainer.sigkilled
    assert trainer.shm_mounts == ("/dev/shm",)
    (dshm,) = [v for v in pod.volumes if v.medium == "Memory"]
    assert dshm.size_limit_bytes is None and dshm.mounted_at == ("/dev/shm",)
    assert pod.memory_limit_bytes == 640 * GiB + 512 * 1024**2
    assert pod.oom_killed


def test_an_exit_137_with_reason_error_is_still_a_sigkill() -> None:
    pods = parse_pods(sample("kube/pods-list-error-137.json"))
    assert [p.name for p in pods] == ["bench-0", "bench-1"]
    c = pods[0].containers[0]
    assert c.terminated is not None and c.terminated.reason == "Error"
    assert c.sigkilled and not c.oom_killed
    assert c.memory_limit_bytes == 1610612736
    assert pods[0].volumes[0].size_limit_bytes == 64 * GiB
    assert pods[1].containers[0].memory_limit_bytes == 500_000_000


def test_node_memory_pressure_false_and_rdma_labels_are_only_metadata() -> None:
    node = parse_node(sample("kube/node.json"))
    assert node is not None
    assert node.memory_pressure is False and node.ready is True
    assert node.allocatable_memory_bytes == 2063868540 * 1024
    assert node.capacity_memory_bytes == 2113396888 * 1024
    assert "feature.node.kubernetes.io/rdma.available" in node.rdma_labels
    assert node.extended_resources["rdma/hca_shared_devices_a"] == "0"


def test_pod_cgroup_paths_for_systemd_and_cgroupfs_drivers() -> None:
    paths = pod_cgroup_paths(UID, "Burstable")
    us = UID.replace("-", "_")
    assert paths[0] == ("/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/"
                        f"kubepods-burstable-pod{us}.slice")
    assert f"/sys/fs/cgroup/memory/kubepods/burstable/pod{UID}" in paths
    g = pod_cgroup_paths(UID, "Guaranteed")
    assert g[0] == f"/sys/fs/cgroup/kubepods.slice/kubepods-pod{us}.slice"
    assert f"/sys/fs/cgroup/memory/kubepods/pod{UID}" in g
    b = pod_cgroup_paths(UID, "BestEffort")
    assert "kubepods-besteffort.slice" in b[0]


def test_the_adapter_picks_the_pod_named_in_vars_and_is_json() -> None:
    fn = registry.get("kube").func
    files = {
        "pod.json": result("pod.json", sample("kube/pods-list-error-137.json")),
        "node.json": result("node.json", sample("kube/node.json")),
    }
    facts = roundtrip(fn(files, {"vars": {"pod": "bench-1"}}))
    assert facts["pod"]["name"] == "bench-1"
    assert facts["node"]["memory_pressure"] is False
    inc = fn({"pod.json": result("pod.json", sample("kube/pod-incident.json"))}, {})
    assert inc["pod"]["unbounded_memory_emptydirs"] == ["dshm"]
    assert inc["node"] == {"collected": False}
    gone = result("pod.json", "", rc=1,
                  stderr='Error from server (NotFound): pods "x" not found')
    assert fn({"pod.json": gone}, {})["pod"] == {"collected": False, "present": False}


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(
                        st.sampled_from(["kind", "items", "metadata", "spec", "status",
                                         "containers", "volumes", "resources", "limits",
                                         "memory", "name", "emptyDir", "containerStatuses",
                                         "lastState", "terminated", "conditions", "labels"]),
                        c, max_size=5), max_leaves=30))
def test_arbitrary_json_never_raises(obj: object) -> None:
    text = json.dumps(obj)
    for pod in parse_pods(text):
        assert isinstance(pod.containers, tuple)
    node = parse_node(text)
    assert node is None or isinstance(node.labels, dict)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 5000), st.text(max_size=10))
def test_truncated_json_never_raises(cut: int, junk: str) -> None:
    assert isinstance(parse_pods(sample("kube/pod-incident.json")[:cut] + junk), tuple)
