"""The built patches applied by the real `kubectl patch --local` (offline; no API server is
contacted) and by kubectl's built-in kustomize: for each kind, exactly the intended volume or
containers change and the rest of the document stays as it was.

Each expected document is the fixture with the edit applied here in Python, at paths written
out by hand, so the comparison does not lean on the code under test.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from runbook.errors import RunbookError
from runbook.remedies import workload
from runbook.remedies.kubectl import render_patch, split_documents, unified_diff
from runbook.remedies.workload import Patch, Workload, memory_patch, shm_size_patch

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
GI = 1024**3
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

# kubectl is a requirement of the remedies (tests/run.sh refuses to start without it): its
# absence fails these tests, never skips them

Edit = tuple[tuple[str | int, ...], Any]


def load(name: str) -> dict[str, Any]:
    return workload.select_document((MANIFESTS / name).read_text())


def edited(document: dict[str, Any], *edits: Edit) -> dict[str, Any]:
    """`document` with each (path, value) set, creating missing maps on the way."""
    out = copy.deepcopy(document)
    for path, value in edits:
        node: Any = out
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
        node[path[-1]] = value
    return out


def render(name: str, patch: Patch) -> dict[str, Any]:
    text = render_patch(MANIFESTS / name, patch, kubectl=KUBECTL)
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


TEMPLATE = ("spec", "template", "spec")
CRONJOB = ("spec", "jobTemplate", "spec", "template", "spec")


def crd(replicas: str, replica: str) -> tuple[str, ...]:
    return ("spec", replicas, replica, "template", "spec")


SHM_CASES: list[tuple[str, list[Edit]]] = [
    ("job.yaml", [((*TEMPLATE, "volumes", 2, "emptyDir", "sizeLimit"), "12Gi")]),
    ("cronjob.yaml", [((*CRONJOB, "volumes", 0, "emptyDir", "sizeLimit"), "12Gi")]),
    ("deployment.yaml", [((*TEMPLATE, "volumes", 1, "emptyDir", "sizeLimit"), "12Gi")]),
    # the loader-cache memory volume (index 0) keeps its 32Gi
    ("statefulset.yaml", [((*TEMPLATE, "volumes", 1, "emptyDir", "sizeLimit"), "12Gi")]),
    (
        "pytorchjob.yaml",
        [
            (
                (*crd("pytorchReplicaSpecs", "Master"), "volumes", 1, "emptyDir", "sizeLimit"),
                "12Gi",
            ),
            (
                (*crd("pytorchReplicaSpecs", "Worker"), "volumes", 0, "emptyDir", "sizeLimit"),
                "12Gi",
            ),
        ],
    ),
    (
        "tfjob.yaml",
        [
            ((*crd("tfReplicaSpecs", "Chief"), "volumes", 0, "emptyDir", "sizeLimit"), "12Gi"),
            ((*crd("tfReplicaSpecs", "Worker"), "volumes", 0, "emptyDir", "sizeLimit"), "12Gi"),
        ],
    ),
    (
        "mpijob.yaml",
        [((*crd("mpiReplicaSpecs", "Worker"), "volumes", 0, "emptyDir", "sizeLimit"), "12Gi")],
    ),
]


@pytest.mark.parametrize(("fixture", "edits"), SHM_CASES, ids=[c[0] for c in SHM_CASES])
def test_shm_patch_sets_the_size_limit_on_exactly_the_shm_volume(
    fixture: str, edits: list[Edit]
) -> None:
    original = load(fixture)
    patch = shm_size_patch(original, 12 * GI)
    assert render(fixture, patch) == edited(original, *edits)


def _resources(request: str, limit: str) -> list[tuple[tuple[str, ...], str]]:
    return [(("requests", "memory"), request), (("limits", "memory"), limit)]


def _memory_edits(*containers: tuple[str, ...]) -> list[Edit]:
    return [
        ((*container, "resources", *key), value)
        for container in containers
        for key, value in _resources("450Gi", "500Gi")
    ]


MEMORY_CASES: list[tuple[str, list[Edit]]] = [
    # container 0 is the trainer; the log-shipper sidecar (1) keeps its 256Mi
    ("job.yaml", _memory_edits((*TEMPLATE, "containers", 0))),
    ("cronjob.yaml", _memory_edits((*CRONJOB, "containers", 0))),
    ("deployment.yaml", _memory_edits((*TEMPLATE, "containers", 0))),
    ("statefulset.yaml", _memory_edits((*TEMPLATE, "containers", 0))),
    ("pod-no-shm.yaml", _memory_edits(("spec", "containers", 0))),
    (
        "pytorchjob.yaml",
        _memory_edits(
            (*crd("pytorchReplicaSpecs", "Master"), "containers", 0),
            (*crd("pytorchReplicaSpecs", "Worker"), "containers", 0),
        ),
    ),
    (
        "tfjob.yaml",
        _memory_edits(
            (*crd("tfReplicaSpecs", "Chief"), "containers", 0),
            (*crd("tfReplicaSpecs", "Worker"), "containers", 0),
        ),
    ),
    # the launcher does not mount /dev/shm and keeps its 1Gi
    ("mpijob.yaml", _memory_edits((*crd("mpiReplicaSpecs", "Worker"), "containers", 0))),
]


@pytest.mark.parametrize(("fixture", "edits"), MEMORY_CASES, ids=[c[0] for c in MEMORY_CASES])
def test_memory_patch_sets_request_and_limit_on_exactly_the_chosen_containers(
    fixture: str, edits: list[Edit]
) -> None:
    original = load(fixture)
    patch = memory_patch(original, request_bytes=450 * GI, limit_bytes=500 * GI)
    patched = render(fixture, patch)
    assert patched == edited(original, *edits)
    # the GPU count is untouched wherever it was set
    for template in workload.pod_templates(patched):
        for container in template.spec["containers"]:
            if container["name"] in ("trainer", "pytorch", "worker", "server", "nccl-tests"):
                assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_one_replica_of_a_pytorchjob_can_be_patched_alone() -> None:
    original = load("pytorchjob.yaml")
    patch = shm_size_patch(original, 24 * GI, replica="Master")
    edit = ((*crd("pytorchReplicaSpecs", "Master"), "volumes", 1, "emptyDir", "sizeLimit"), "24Gi")
    patched = render("pytorchjob.yaml", patch)
    assert patched == edited(original, edit)
    worker = patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["volumes"][0]["emptyDir"]["sizeLimit"] == "8Gi"


def test_a_multi_document_file_has_only_its_target_document_patched() -> None:
    source = MANIFESTS / "multi-doc.yaml"
    text = source.read_text()
    job = workload.select_document(text, kind="Job", name="train")
    patch = shm_size_patch(job, 12 * GI)
    rendered = render_patch(source, patch, kubectl=KUBECTL)
    before = [d for d in yaml.safe_load_all(text) if d is not None]
    after = [d for d in yaml.safe_load_all(rendered) if d is not None]
    assert len(after) == 4
    assert after[2] == edited(
        before[2], ((*TEMPLATE, "volumes", 0, "emptyDir", "sizeLimit"), "12Gi")
    )
    assert [after[0], after[1], after[3]] == [before[0], before[1], before[3]]  # eval untouched
    pieces_before, pieces_after = split_documents(text), split_documents(rendered)
    assert len(pieces_after) == 4 and pieces_after[2] != pieces_before[2]
    assert pieces_after[:2] == pieces_before[:2] and pieces_after[3] == pieces_before[3]  # verbatim


def test_a_json_patch_whose_entry_moved_fails_instead_of_changing_the_wrong_one(
    tmp_path: Path,
) -> None:
    original = load("pytorchjob.yaml")
    patch = shm_size_patch(original, 12 * GI)  # built when dshm was volume 1 of the master
    moved = copy.deepcopy(original)
    volumes = moved["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
    volumes.reverse()  # someone reordered the volumes since
    path = tmp_path / "pytorchjob.yaml"
    path.write_text(yaml.safe_dump(moved))
    with pytest.raises(RunbookError) as caught:
        render_patch(path, patch, kubectl=KUBECTL)
    message = str(caught.value)
    assert message == (
        f"kubectl patch --local failed on {path}: error: testing value "
        "/spec/pytorchReplicaSpecs/Master/template/spec/volumes/1/name failed: test failed"
    )
    assert "\n" not in message


def test_kubectl_refusing_a_patch_is_one_line_with_its_error() -> None:
    target = Workload("batch/v1", "Job", "train", "ml")
    bad = Patch(
        type="json",
        target=target,
        body=[{"op": "replace", "path": "/spec/nope/x", "value": 1}],
        kustomize="",
        summary=(),
    )
    with pytest.raises(
        RunbookError,
        match=r"^kubectl patch --local failed on .*job\.yaml: error: "
        r"replace operation does not apply: doc is missing path: /spec/nope/x",
    ):
        render_patch(MANIFESTS / "job.yaml", bad, kubectl=KUBECTL)


def test_a_missing_kubectl_or_a_hung_one_is_a_one_line_error(tmp_path: Path) -> None:
    """The hung kubectl is a stand-in script that sleeps: what is tested is our timeout."""
    patch = shm_size_patch(load("job.yaml"), GI)
    with pytest.raises(RunbookError, match=r"^kubectl not found: /nonexistent/kubectl$"):
        render_patch(MANIFESTS / "job.yaml", patch, kubectl="/nonexistent/kubectl")
    hung = tmp_path / "kubectl"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(RunbookError, match=r"timed out after 0\.5 s on .*job\.yaml$"):
        render_patch(MANIFESTS / "job.yaml", patch, kubectl=str(hung), timeout=0.5)
    assert time.monotonic() - started < 5


def test_a_broken_kubeconfig_does_not_break_a_local_render(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    broken = tmp_path / "config"
    broken.write_text("not: [a kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(broken))
    patch = shm_size_patch(load("job.yaml"), GI)
    assert render("job.yaml", patch)["spec"]["template"]["spec"]["volumes"][2]["emptyDir"] == {
        "medium": "Memory",
        "sizeLimit": "1Gi",
    }


# -- kustomize: the patch files mean the same to `kustomize build` -------------------------------


def _by_name(document: dict[str, Any]) -> dict[str, Any]:
    """Volumes as a name-keyed map: kustomize lists a merged volume first (order is no meaning)."""
    out = copy.deepcopy(document)
    for template in workload.pod_templates(out):
        spec: Any = template.spec
        spec["volumes"] = {v["name"]: v for v in spec.get("volumes", [])}
    return out


def _kustomize_build(directory: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [KUBECTL, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"KUBECONFIG": "/dev/null", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d is not None]


@pytest.mark.parametrize(
    ("fixture", "build"),
    [("job.yaml", "shm"), ("deployment.yaml", "memory"), ("cronjob.yaml", "shm")],
)
def test_strategic_kustomize_file_builds_to_the_same_document(
    tmp_path: Path, fixture: str, build: str
) -> None:
    original = load(fixture)
    patch = (
        shm_size_patch(original, 12 * GI)
        if build == "shm"
        else memory_patch(original, request_bytes=450 * GI, limit_bytes=500 * GI)
    )
    shutil.copy(MANIFESTS / fixture, tmp_path / fixture)
    (tmp_path / "patch.yaml").write_text(patch.kustomize)
    (tmp_path / "kustomization.yaml").write_text(
        f"resources:\n- {fixture}\npatches:\n- path: patch.yaml\n"
    )
    (built,) = _kustomize_build(tmp_path)
    assert _by_name(built) == _by_name(render(fixture, patch))


@pytest.mark.parametrize("fixture", ["pytorchjob.yaml", "tfjob.yaml", "mpijob.yaml"])
def test_json_kustomize_entry_builds_to_the_same_document(tmp_path: Path, fixture: str) -> None:
    original = load(fixture)
    shm = shm_size_patch(original, 12 * GI)
    memory = memory_patch(original, request_bytes=450 * GI, limit_bytes=500 * GI)
    shutil.copy(MANIFESTS / fixture, tmp_path / fixture)
    entries = [yaml.safe_load(p.kustomize)["patches"][0] for p in (shm, memory)]
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [fixture], "patches": entries})
    )
    (built,) = _kustomize_build(tmp_path)
    once = tmp_path / "shm-applied.yaml"
    once.write_text(render_patch(MANIFESTS / fixture, shm, kubectl=KUBECTL))
    both = yaml.safe_load(render_patch(once, memory, kubectl=KUBECTL))
    assert built == both
    assert built != original


# -- diffs ---------------------------------------------------------------------------------------


def test_a_normalized_diff_shows_only_the_changed_value() -> None:
    text = (MANIFESTS / "job.yaml").read_text()
    patched = render_patch(
        MANIFESTS / "job.yaml", shm_size_patch(load("job.yaml"), 12 * GI), kubectl=KUBECTL
    )
    diff = unified_diff(text, patched, "job.yaml", normalize=True)
    assert diff.startswith("--- a/job.yaml\n+++ b/job.yaml\n")
    changes = [
        line for line in diff.splitlines()[2:] if line[:1] in "+-" and not line.startswith("@@")
    ]
    assert changes == ["+          sizeLimit: 12Gi"]
    raw = unified_diff(text, patched, "job.yaml")  # as written vs kubectl's layout
    assert "-# The incident's workload" in raw and "+          sizeLimit: 12Gi" in raw


def test_kubectl_time_per_call_is_recorded() -> None:
    """Not a benchmark: the figure goes into the test report (`-rA`), and bounds a runaway."""
    patch = shm_size_patch(load("job.yaml"), GI)
    samples = []
    for _ in range(3):
        started = time.perf_counter()
        render_patch(MANIFESTS / "job.yaml", patch, kubectl=KUBECTL)
        samples.append(time.perf_counter() - started)
    median = sorted(samples)[1]
    print(f"kubectl patch --local: median {median * 1000:.0f} ms over 3 calls")
    assert median < 10
