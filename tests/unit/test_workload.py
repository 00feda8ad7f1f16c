"""The pure patch builder of the shm-size-limit and memory-limit remedies (runbook/remedies/
workload.py): where each kind keeps its pod templates, what /dev/shm is backed by, the exact
patch bodies, the refusals and the size arithmetic. kubectl itself is exercised in
tests/integration/test_kubectl_patch.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from runbook.errors import UsageError
from runbook.remedies import workload
from runbook.remedies.workload import Mount, memory_patch, shm_size_patch, shm_volumes

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
GI = 1024**3
MI = 1024**2


def load(name: str) -> dict[str, Any]:
    return workload.select_document((MANIFESTS / name).read_text())


# -- locating pod templates ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("pod-no-shm.yaml", [(None, ("spec",))]),
        ("job.yaml", [(None, ("spec", "template", "spec"))]),
        ("cronjob.yaml", [(None, ("spec", "jobTemplate", "spec", "template", "spec"))]),
        ("deployment.yaml", [(None, ("spec", "template", "spec"))]),
        ("statefulset.yaml", [(None, ("spec", "template", "spec"))]),
        (
            "pytorchjob.yaml",
            [
                ("Master", ("spec", "pytorchReplicaSpecs", "Master", "template", "spec")),
                ("Worker", ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec")),
            ],
        ),
        (
            "tfjob.yaml",
            [
                ("Chief", ("spec", "tfReplicaSpecs", "Chief", "template", "spec")),
                ("Worker", ("spec", "tfReplicaSpecs", "Worker", "template", "spec")),
            ],
        ),
        (
            "mpijob.yaml",
            [
                ("Launcher", ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec")),
                ("Worker", ("spec", "mpiReplicaSpecs", "Worker", "template", "spec")),
            ],
        ),
    ],
)
def test_every_kind_has_its_pod_templates_located(
    fixture: str, expected: list[tuple[str | None, tuple[str, ...]]]
) -> None:
    manifest = load(fixture)
    templates = workload.pod_templates(manifest)
    assert [(t.replica, t.path) for t in templates] == expected
    for template in templates:  # the spec found is the one at that path in the document
        node: Any = manifest
        for key in template.path:
            node = node[key]
        assert template.spec is node and "containers" in template.spec


def test_daemonset_and_replicaset_use_the_template_spec() -> None:
    for kind in ("DaemonSet", "ReplicaSet"):
        manifest = load("deployment.yaml")
        manifest["kind"] = kind
        assert [t.path for t in workload.pod_templates(manifest)] == [("spec", "template", "spec")]


def test_an_unknown_kind_is_refused_naming_the_supported_kinds() -> None:
    service = workload.select_document((MANIFESTS / "multi-doc.yaml").read_text(), kind="Service")
    with pytest.raises(UsageError) as caught:
        shm_size_patch(service, 12 * GI)
    message = str(caught.value)
    assert message.startswith("cannot patch Service/train (v1): supported kinds are ")
    for kind in (
        "Pod",
        "Job",
        "CronJob",
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "ReplicaSet",
        "PyTorchJob",
        "TFJob",
        "MPIJob",
    ):
        assert kind in message


def test_a_job_of_another_api_group_is_not_taken_for_a_batch_job() -> None:
    volcano = load("job.yaml")
    volcano["apiVersion"] = "batch.volcano.sh/v1alpha1"
    with pytest.raises(UsageError, match=r"cannot patch Job/train \(batch.volcano.sh/v1alpha1\)"):
        workload.pod_templates(volcano)


def test_a_workload_without_its_pod_template_is_refused_with_the_path() -> None:
    manifest = load("cronjob.yaml")
    del manifest["spec"]["jobTemplate"]["spec"]["template"]
    with pytest.raises(
        UsageError,
        match=r"CronJob/nightly-eval has no pod template at "
        r"spec\.jobTemplate\.spec\.template\.spec",
    ):
        workload.pod_templates(manifest)


def test_a_manifest_without_identity_is_refused() -> None:
    with pytest.raises(UsageError, match=r"apiVersion, kind and metadata\.name"):
        workload.pod_templates({"kind": "Job", "spec": {}})


# -- picking a document from a multi-document file -----------------------------------------------


def test_the_named_document_is_picked_from_a_multi_document_file() -> None:
    text = (MANIFESTS / "multi-doc.yaml").read_text()
    job = workload.select_document(text, kind="Job", name="train")
    assert job["metadata"]["name"] == "train" and job["kind"] == "Job"
    assert (
        workload.select_document(text, name="eval")["spec"]["template"]["spec"]["containers"][0][
            "name"
        ]
        == "eval"
    )


def test_an_ambiguous_or_missing_document_is_refused_listing_what_is_there() -> None:
    text = (MANIFESTS / "multi-doc.yaml").read_text()
    with pytest.raises(UsageError) as ambiguous:
        workload.select_document(text, kind="Job")
    assert str(ambiguous.value) == (
        "2 documents match Job/* (ConfigMap/pretrain-config, Service/train, Job/train, Job/eval);"
        " name kind and name"
    )
    with pytest.raises(UsageError) as missing:
        workload.select_document(text, kind="PyTorchJob")
    assert str(missing.value) == (
        "no document PyTorchJob/* in the manifest; it holds: ConfigMap/pretrain-config, "
        "Service/train, Job/train, Job/eval"
    )
    with pytest.raises(UsageError, match="not valid YAML"):
        workload.select_document("kind: [unclosed")


# -- what backs /dev/shm -------------------------------------------------------------------------


def test_an_unbounded_memory_dev_shm_is_reported_with_who_mounts_it() -> None:
    (dshm,) = shm_volumes(load("job.yaml"))
    assert (dshm.volume, dshm.index, dshm.source, dshm.medium, dshm.size_limit) == (
        "dshm",
        2,
        "emptyDir",
        "Memory",
        None,
    )
    assert dshm.mounts == (Mount("trainer", "/dev/shm"),)
    assert dshm.memory_backed and dshm.at_dev_shm


def test_a_memory_emptydir_mounted_elsewhere_is_reported_but_not_as_dev_shm() -> None:
    cache, shm = shm_volumes(load("statefulset.yaml"))
    assert (cache.volume, cache.size_limit, cache.memory_backed, cache.at_dev_shm) == (
        "loader-cache",
        "32Gi",
        True,
        False,
    )
    assert cache.mounts == (Mount("trainer", "/cache"),)
    assert (shm.volume, shm.memory_backed, shm.at_dev_shm) == ("shm", True, True)


def test_a_dev_shm_on_node_disk_is_reported_as_not_memory_backed() -> None:
    (dshm,) = shm_volumes(load("job-shm-on-disk.yaml"))
    assert (dshm.source, dshm.medium, dshm.memory_backed, dshm.at_dev_shm) == (
        "emptyDir",
        "",
        False,
        True,
    )
    assert dshm.describe() == "dshm (emptyDir without medium, mounted at /dev/shm by trainer)"


def test_no_dev_shm_volume_reports_nothing() -> None:
    assert shm_volumes(load("pod-no-shm.yaml")) == ()


def test_medium_is_case_sensitive_as_the_kubelet_is_and_hostpath_shm_is_reported() -> None:
    manifest = load("job.yaml")
    spec = manifest["spec"]["template"]["spec"]
    spec["volumes"][2]["emptyDir"]["medium"] = "memory"  # the kubelet refuses this spelling
    spec["volumes"].append({"name": "host-shm", "hostPath": {"path": "/dev/shm"}})
    spec["containers"][1]["volumeMounts"] = [{"name": "host-shm", "mountPath": "/dev/shm/"}]
    lowercase, host = shm_volumes(manifest)
    assert (lowercase.medium, lowercase.memory_backed) == ("memory", False)
    assert (host.source, host.memory_backed, host.at_dev_shm) == ("hostPath", False, True)
    assert host.mounts == (Mount("log-shipper", "/dev/shm"),)  # trailing slash folded


def test_every_replica_reports_its_own_dev_shm() -> None:
    found = [
        (v.replica, v.volume, v.index, v.size_limit) for v in shm_volumes(load("pytorchjob.yaml"))
    ]
    assert found == [("Master", "dshm", 1, None), ("Worker", "dshm", 0, "8Gi")]


# -- /dev/shm sizeLimit patches ------------------------------------------------------------------


def test_job_shm_patch_is_a_strategic_merge_of_the_named_volume_only() -> None:
    patch = shm_size_patch(load("job.yaml"), 12 * GI)
    assert patch.type == "strategic"
    assert patch.body == {
        "spec": {
            "template": {"spec": {"volumes": [{"name": "dshm", "emptyDir": {"sizeLimit": "12Gi"}}]}}
        }
    }
    assert patch.summary == ("set sizeLimit 12Gi on volume dshm of Job/train (was unbounded)",)
    assert patch.notes == ()
    json.dumps(patch.body)  # JSON-serialisable as kubectl -p needs it


@pytest.mark.parametrize(
    ("fixture", "path", "volume", "summary"),
    [
        (
            "cronjob.yaml",
            ("spec", "jobTemplate", "spec", "template", "spec"),
            "dshm",
            "set sizeLimit 12Gi on volume dshm of CronJob/nightly-eval (was unbounded)",
        ),
        (
            "deployment.yaml",
            ("spec", "template", "spec"),
            "dshm",
            "set sizeLimit 12Gi on volume dshm of Deployment/llm-serve (was 1Gi)",
        ),
        (
            "statefulset.yaml",
            ("spec", "template", "spec"),
            "shm",
            "set sizeLimit 12Gi on volume shm of StatefulSet/trainer (was unbounded)",
        ),
    ],
)
def test_builtin_kinds_get_a_strategic_patch_at_their_template(
    fixture: str, path: tuple[str, ...], volume: str, summary: str
) -> None:
    patch = shm_size_patch(load(fixture), 12 * GI)
    expected: dict[str, Any] = {"volumes": [{"name": volume, "emptyDir": {"sizeLimit": "12Gi"}}]}
    for key in reversed(path):
        expected = {key: expected}
    assert (patch.type, patch.body, patch.summary) == ("strategic", expected, (summary,))


def test_pytorchjob_gets_json_ops_for_master_and_worker_add_or_replace() -> None:
    patch = shm_size_patch(load("pytorchjob.yaml"), 12 * GI)
    base = "/spec/pytorchReplicaSpecs"
    assert patch.type == "json"
    assert patch.body == [
        {"op": "test", "path": f"{base}/Master/template/spec/volumes/1/name", "value": "dshm"},
        {
            "op": "add",
            "path": f"{base}/Master/template/spec/volumes/1/emptyDir/sizeLimit",
            "value": "12Gi",
        },
        {"op": "test", "path": f"{base}/Worker/template/spec/volumes/0/name", "value": "dshm"},
        {
            "op": "replace",
            "path": f"{base}/Worker/template/spec/volumes/0/emptyDir/sizeLimit",
            "value": "12Gi",
        },
    ]
    assert patch.summary == (
        "set sizeLimit 12Gi on volume dshm of PyTorchJob/llm-pretrain (Master) (was unbounded)",
        "set sizeLimit 12Gi on volume dshm of PyTorchJob/llm-pretrain (Worker) (was 8Gi)",
    )


def test_one_replica_can_be_chosen() -> None:
    patch = shm_size_patch(load("pytorchjob.yaml"), 12 * GI, replica="Worker")
    assert [op["path"] for op in patch.body] == [
        "/spec/pytorchReplicaSpecs/Worker/template/spec/volumes/0/name",
        "/spec/pytorchReplicaSpecs/Worker/template/spec/volumes/0/emptyDir/sizeLimit",
    ]
    with pytest.raises(UsageError, match="has no replica Launcher; it has: Master, Worker"):
        shm_size_patch(load("pytorchjob.yaml"), 12 * GI, replica="Launcher")
    with pytest.raises(UsageError, match="Job/train has no replica specs"):
        shm_size_patch(load("job.yaml"), 12 * GI, replica="Worker")


def test_tfjob_patches_chief_and_workers() -> None:
    patch = shm_size_patch(load("tfjob.yaml"), 16 * GI)
    assert [(op["op"], op["path"]) for op in patch.body] == [
        ("test", "/spec/tfReplicaSpecs/Chief/template/spec/volumes/0/name"),
        ("add", "/spec/tfReplicaSpecs/Chief/template/spec/volumes/0/emptyDir/sizeLimit"),
        ("test", "/spec/tfReplicaSpecs/Worker/template/spec/volumes/0/name"),
        ("add", "/spec/tfReplicaSpecs/Worker/template/spec/volumes/0/emptyDir/sizeLimit"),
    ]
    assert {op["value"] for op in patch.body if op["op"] == "add"} == {"16Gi"}


def test_an_mpijob_launcher_without_shm_is_left_alone_and_said_so() -> None:
    patch = shm_size_patch(load("mpijob.yaml"), 12 * GI)
    assert patch.body == [
        {
            "op": "test",
            "path": "/spec/mpiReplicaSpecs/Worker/template/spec/volumes/0/name",
            "value": "dshm",
        },
        {
            "op": "add",
            "path": "/spec/mpiReplicaSpecs/Worker/template/spec/volumes/0/emptyDir/sizeLimit",
            "value": "12Gi",
        },
    ]
    assert patch.notes == (
        "MPIJob/nccl-allreduce (Launcher): no memory-backed volume mounted at /dev/shm, "
        "left unchanged",
    )


def test_a_named_memory_volume_is_patched_even_when_not_at_dev_shm() -> None:
    patch = shm_size_patch(load("statefulset.yaml"), 48 * GI, volume="loader-cache")
    assert patch.body["spec"]["template"]["spec"]["volumes"] == [
        {"name": "loader-cache", "emptyDir": {"sizeLimit": "48Gi"}}
    ]
    assert patch.summary == (
        "set sizeLimit 48Gi on volume loader-cache of StatefulSet/trainer (was 32Gi)",
    )


def test_a_sizelimit_already_at_the_size_says_so() -> None:
    patch = shm_size_patch(load("deployment.yaml"), GI)
    assert patch.summary == (
        "set sizeLimit 1Gi on volume dshm of Deployment/llm-serve (already 1Gi)",
    )


def test_no_dev_shm_volume_is_refused_naming_what_there_is() -> None:
    with pytest.raises(UsageError) as caught:
        shm_size_patch(load("pod-no-shm.yaml"), 12 * GI)
    assert str(caught.value) == (
        "Pod/nccl-debug mounts nothing at /dev/shm (containers get the runtime's default, 64Mi on"
        " Docker and containerd); volumes: scratch (emptyDir without medium, mounted at /tmp by"
        " nccl-tests); add an emptyDir medium Memory mounted at /dev/shm first"
    )


def test_a_dev_shm_on_disk_is_refused_naming_the_volume() -> None:
    with pytest.raises(UsageError) as caught:
        shm_size_patch(load("job-shm-on-disk.yaml"), 12 * GI)
    assert str(caught.value) == (
        "Job/train-disk-shm mounts /dev/shm from a volume that is not memory-backed: dshm"
        " (emptyDir without medium, mounted at /dev/shm by trainer); make it emptyDir medium"
        " Memory first"
    )


def test_a_named_volume_that_is_missing_or_not_memory_is_refused() -> None:
    with pytest.raises(
        UsageError,
        match=r"^Job/train has no volume scratch \(volumes: config, "
        r"data, dshm\)$",
    ):
        shm_size_patch(load("job.yaml"), 12 * GI, volume="scratch")
    with pytest.raises(
        UsageError,
        match=r"^volume data of Job/train is not memory-backed: data "
        r"\(persistentVolumeClaim, mounted at /data by trainer\)",
    ):
        shm_size_patch(load("job.yaml"), 12 * GI, volume="data")


def test_a_replica_without_shm_is_refused_for_that_replica_only() -> None:
    with pytest.raises(
        UsageError,
        match=r"^MPIJob/nccl-allreduce \(Launcher\) mounts nothing at "
        r"/dev/shm",
    ):
        shm_size_patch(load("mpijob.yaml"), 12 * GI, replica="Launcher")


def test_a_sizelimit_not_below_the_container_limit_is_noted() -> None:
    patch = shm_size_patch(load("mpijob.yaml"), 200 * GI)
    assert patch.notes[-1] == (
        "MPIJob/nccl-allreduce (Worker): sizeLimit 200Gi is not below container worker's memory"
        " limit 200Gi and /dev/shm pages count against it; raise the limit too (memory-limit)"
    )
    assert len(shm_size_patch(load("mpijob.yaml"), 199 * GI).notes) == 1  # the launcher only


def test_the_manifest_is_not_modified() -> None:
    manifest = load("pytorchjob.yaml")
    before = copy.deepcopy(manifest)
    shm_size_patch(manifest, 12 * GI)
    memory_patch(manifest, request_bytes=400 * GI, limit_bytes=500 * GI)
    assert manifest == before


# -- kustomize files -----------------------------------------------------------------------------


def test_strategic_kustomize_file_is_the_partial_manifest() -> None:
    patch = shm_size_patch(load("job.yaml"), 12 * GI)
    assert patch.kustomize.startswith("# Strategic merge patch for Job/train")
    assert yaml.safe_load(patch.kustomize) == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        **patch.body,
    }


def test_json_kustomize_file_is_a_patches_entry_with_target_and_the_ops() -> None:
    patch = shm_size_patch(load("pytorchjob.yaml"), 12 * GI)
    (entry,) = yaml.safe_load(patch.kustomize)["patches"]
    assert entry["target"] == {
        "group": "kubeflow.org",
        "version": "v1",
        "kind": "PyTorchJob",
        "name": "llm-pretrain",
        "namespace": "ml",
    }
    assert yaml.safe_load(entry["patch"]) == patch.body
    assert "  patch: |-\n    - op: test\n" in patch.kustomize  # readable, not an escaped string


def test_a_workload_without_namespace_gets_no_namespace_in_its_patch_files() -> None:
    manifest = load("tfjob.yaml")
    del manifest["metadata"]["namespace"]
    (entry,) = yaml.safe_load(shm_size_patch(manifest, GI).kustomize)["patches"]
    assert "namespace" not in entry["target"]
    job = load("job.yaml")
    del job["metadata"]["namespace"]
    assert yaml.safe_load(shm_size_patch(job, GI).kustomize)["metadata"] == {"name": "train"}


# -- memory request/limit patches ----------------------------------------------------------------


def test_job_memory_patch_changes_the_shm_container_not_the_sidecar() -> None:
    patch = memory_patch(load("job.yaml"), request_bytes=450 * GI, limit_bytes=500 * GI)
    assert patch.type == "strategic"
    assert patch.body == {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "resources": {
                                "requests": {"memory": "450Gi"},
                                "limits": {"memory": "500Gi"},
                            },
                        }
                    ]
                }
            }
        }
    }
    assert patch.summary == (
        "set memory request 450Gi and limit 500Gi on container trainer of Job/train"
        " (was request 480Gi, limit 480Gi)",
    )


def test_named_containers_are_patched_and_unknown_names_refused() -> None:
    patch = memory_patch(
        load("job.yaml"), request_bytes=GI, limit_bytes=GI, containers=["log-shipper"]
    )
    assert [c["name"] for c in patch.body["spec"]["template"]["spec"]["containers"]] == [
        "log-shipper"
    ]
    assert patch.summary[0].endswith("(was request unset, limit 256Mi)")
    with pytest.raises(UsageError) as caught:
        memory_patch(load("job.yaml"), request_bytes=GI, limit_bytes=GI, containers=["trainr"])
    assert (
        str(caught.value) == "Job/train has no container trainr; containers: log-shipper, trainer"
    )


def test_without_any_shm_mount_every_container_is_patched() -> None:
    patch = memory_patch(load("pod-no-shm.yaml"), request_bytes=60 * GI, limit_bytes=64 * GI)
    assert patch.body == {
        "spec": {
            "containers": [
                {
                    "name": "nccl-tests",
                    "resources": {"requests": {"memory": "60Gi"}, "limits": {"memory": "64Gi"}},
                }
            ]
        }
    }


def test_pytorchjob_memory_ops_add_missing_fields_and_replace_present_ones() -> None:
    patch = memory_patch(load("pytorchjob.yaml"), request_bytes=450 * GI, limit_bytes=500 * GI)
    master = "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0"
    worker = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0"
    assert patch.type == "json"
    assert patch.body == [
        {"op": "test", "path": f"{master}/name", "value": "pytorch"},
        {"op": "add", "path": f"{master}/resources/requests", "value": {"memory": "450Gi"}},
        {"op": "replace", "path": f"{master}/resources/limits/memory", "value": "500Gi"},
        {"op": "test", "path": f"{worker}/name", "value": "pytorch"},
        {"op": "replace", "path": f"{worker}/resources/requests/memory", "value": "450Gi"},
        {"op": "replace", "path": f"{worker}/resources/limits/memory", "value": "500Gi"},
    ]


def test_tfjob_memory_ops_create_resources_where_there_are_none() -> None:
    patch = memory_patch(load("tfjob.yaml"), request_bytes=100 * GI, limit_bytes=120 * GI)
    chief = "/spec/tfReplicaSpecs/Chief/template/spec/containers/0"
    worker = "/spec/tfReplicaSpecs/Worker/template/spec/containers/0"
    assert patch.body == [
        {"op": "test", "path": f"{chief}/name", "value": "tensorflow"},
        {
            "op": "add",
            "path": f"{chief}/resources",
            "value": {"requests": {"memory": "100Gi"}, "limits": {"memory": "120Gi"}},
        },
        {"op": "test", "path": f"{worker}/name", "value": "tensorflow"},
        {"op": "add", "path": f"{worker}/resources/requests", "value": {"memory": "100Gi"}},
        {"op": "add", "path": f"{worker}/resources/limits/memory", "value": "120Gi"},
    ]
    assert patch.summary[0].endswith("(Chief) (was request unset, limit unset)")


def test_mpijob_memory_defaults_to_the_workers_not_the_launcher() -> None:
    patch = memory_patch(load("mpijob.yaml"), request_bytes=180 * GI, limit_bytes=220 * GI)
    assert {op["path"].split("/")[3] for op in patch.body} == {"Worker"}
    assert patch.notes == (
        "MPIJob/nccl-allreduce (Launcher): no container mounting /dev/shm, left unchanged",
    )
    launcher = memory_patch(
        load("mpijob.yaml"), request_bytes=GI, limit_bytes=2 * GI, containers=["launcher"]
    )
    assert [op["path"].split("/")[3] for op in launcher.body] == ["Launcher"] * 3


def test_a_request_above_the_limit_is_refused() -> None:
    with pytest.raises(UsageError, match="memory request 501Gi is above the limit 500Gi"):
        memory_patch(load("job.yaml"), request_bytes=501 * GI, limit_bytes=500 * GI)


def test_a_limit_not_above_a_memory_volume_is_noted() -> None:
    patch = memory_patch(load("statefulset.yaml"), request_bytes=16 * GI, limit_bytes=32 * GI)
    assert patch.notes == (
        "StatefulSet/trainer: memory-backed volume loader-cache may grow to 32Gi, not below the"
        " new limit 32Gi; its pages count against the limit",
    )


# -- sizes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (12 * GI, "12Gi"),
        (12 * GI + 1, "12289Mi"),
        (1, "1Mi"),
        (MI, "1Mi"),
        (MI + 1, "2Mi"),
        (1536 * MI, "1536Mi"),
    ],
)
def test_sizes_are_rounded_up_to_whole_mi(size: int, text: str) -> None:
    assert workload.quantity(size) == text
    patch = shm_size_patch(load("job.yaml"), size)
    assert patch.body["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == text


@pytest.mark.parametrize("size", [0, -1, True])
def test_a_size_that_is_not_positive_is_refused(size: int) -> None:
    with pytest.raises(UsageError, match="positive number of bytes"):
        shm_size_patch(load("job.yaml"), size)


def test_size_from_measured_is_the_ceiling_of_measured_times_headroom_in_mi() -> None:
    assert workload.size_from_measured(10 * GI, 1.2) == 12 * GI  # exact: no float drift upward
    assert workload.size_from_measured(5_000_000_000, 1.25) == 5961 * MI  # 6.25e9 B ↑ Mi
    assert workload.size_from_measured(3 * GI + 1, 1) == 3 * GI + MI
    assert workload.size_from_measured(1, 1.0) == MI


@pytest.mark.parametrize("measured", [0, None, -5])
def test_size_from_measured_refuses_a_missing_measurement(measured: int | None) -> None:
    with pytest.raises(UsageError, match="no measured peak to size from"):
        workload.size_from_measured(measured, 1.2)


@pytest.mark.parametrize("headroom", [0.99, 0.0, float("nan"), float("inf")])
def test_size_from_measured_refuses_a_headroom_below_one(headroom: float) -> None:
    with pytest.raises(UsageError, match="headroom must be a finite factor of at least 1"):
        workload.size_from_measured(GI, headroom)


def test_json_pointer_segments_are_escaped() -> None:
    manifest = load("tfjob.yaml")
    specs = manifest["spec"]["tfReplicaSpecs"]
    specs["Eval/x~y"] = specs.pop("Worker")
    paths = [op["path"] for op in shm_size_patch(manifest, GI, replica="Eval/x~y").body]
    assert paths[0] == "/spec/tfReplicaSpecs/Eval~1x~0y/template/spec/volumes/0/name"
