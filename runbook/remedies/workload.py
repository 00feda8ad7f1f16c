"""Patches for a workload's /dev/shm size and its containers' memory: the `shm-size-limit` and
`memory-limit` remedies, as pure functions over a parsed manifest (no I/O; kubectl.py renders).

Where the pod templates are, by kind::

    Pod                                  spec
    Job                                  spec.template.spec
    CronJob                              spec.jobTemplate.spec.template.spec
    Deployment StatefulSet DaemonSet     spec.template.spec
      ReplicaSet
    PyTorchJob (kubeflow.org)            spec.pytorchReplicaSpecs.<Master|Worker|…>.template.spec
    TFJob (kubeflow.org)                 spec.tfReplicaSpecs.<Chief|Worker|PS|…>.template.spec
    MPIJob (kubeflow.org)                spec.mpiReplicaSpecs.<Launcher|Worker>.template.spec

A `Patch` comes in one of two types:

- ``strategic`` (built-in kinds). `body` is a strategic merge patch: ``volumes`` merge by
  ``name`` (so ``emptyDir.medium`` and every other volume stay) and ``containers`` merge by
  ``name`` (so ``nvidia.com/gpu`` and the other resources stay). `kustomize` is a partial
  manifest — apiVersion, kind, metadata.name (and namespace) and only the changed fields — to be
  listed as ``patches: [{path: <file>}]`` in a kustomization.yaml that includes the workload;
  kustomize finds the target from those fields and merges the same way (it may list the merged
  volume first: volumes are a set keyed by name, so the order carries no meaning).
- ``json`` (kubeflow.org CRDs: neither ``kubectl patch`` nor kustomize knows their merge keys, and
  a merge patch would replace whole lists). `body` is an RFC 6902 list of operations with exact
  JSON-pointer paths (``/spec/pytorchReplicaSpecs/Worker/template/spec/volumes/0/emptyDir/
  sizeLimit``), ``add`` where the field is missing and ``replace`` where it exists. Each change
  is preceded by a ``test`` op on the list entry's ``name``, so that a manifest whose lists were
  reordered since the patch was built fails to patch instead of changing the wrong entry.
  `kustomize` is a kustomization fragment: a top-level ``patches:`` list with one entry,
  ``target: {group, version, kind, name, namespace}`` and the same operations inline as YAML
  under ``patch: |-``; merge that entry into the ``patches:`` of the kustomization.yaml.

Sizes are written as Kubernetes quantities rounded up to whole Mi (`quantity`, from units.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import yaml

from runbook import units
from runbook.errors import UsageError

SHM_PATH = "/dev/shm"
MEMORY_MEDIUM = "Memory"  # the only spelling the kubelet accepts for a tmpfs emptyDir

# (group, kind) -> path from the document root to the PodSpec, or to the replica-spec map
_BUILTIN_TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): ("spec",),
    ("batch", "Job"): ("spec", "template", "spec"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template", "spec"),
    ("apps", "Deployment"): ("spec", "template", "spec"),
    ("apps", "StatefulSet"): ("spec", "template", "spec"),
    ("apps", "DaemonSet"): ("spec", "template", "spec"),
    ("apps", "ReplicaSet"): ("spec", "template", "spec"),
}
_REPLICA_SPEC_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("kubeflow.org", "PyTorchJob"): ("spec", "pytorchReplicaSpecs"),
    ("kubeflow.org", "TFJob"): ("spec", "tfReplicaSpecs"),
    ("kubeflow.org", "MPIJob"): ("spec", "mpiReplicaSpecs"),
}
SUPPORTED_KINDS = (
    "Pod, Job, CronJob, Deployment, StatefulSet, DaemonSet, ReplicaSet (built-in) and "
    "PyTorchJob, TFJob, MPIJob (kubeflow.org)"
)

PatchType = Literal["strategic", "json"]


@dataclass(frozen=True)
class Workload:
    """Who a patch is for: the manifest's apiVersion, kind, name and namespace."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class PodTemplate:
    """One pod template of a workload; `path` leads from the document root to its PodSpec."""

    replica: str | None
    path: tuple[str, ...]
    spec: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Mount:
    container: str
    path: str
    init: bool = False


@dataclass(frozen=True)
class ShmVolume:
    """A memory-backed emptyDir, or any volume mounted at /dev/shm, with who mounts it where.

    `source` is the volume's type (``emptyDir``, ``hostPath``, …); `medium` the emptyDir medium
    as written (``""`` is node disk); `size_limit` the sizeLimit as written (None: unbounded).
    """

    replica: str | None
    volume: str
    index: int
    source: str
    medium: str
    size_limit: str | None
    mounts: tuple[Mount, ...]

    @property
    def memory_backed(self) -> bool:
        return self.source == "emptyDir" and self.medium == MEMORY_MEDIUM

    @property
    def at_dev_shm(self) -> bool:
        return any(m.path == SHM_PATH for m in self.mounts)

    def describe(self) -> str:
        """`dshm (emptyDir medium Memory, mounted at /dev/shm by trainer)` and the like."""
        if self.source == "emptyDir":
            kind = f"emptyDir medium {self.medium}" if self.medium else "emptyDir without medium"
        else:
            kind = self.source
        where = ", ".join(f"{m.path} by {m.container}" for m in self.mounts) or "nowhere"
        return f"{self.volume} ({kind}, mounted at {where})"


@dataclass(frozen=True)
class Patch:
    """A change to one workload; see the module docstring for the two types and their formats."""

    type: PatchType
    target: Workload
    body: Any
    kustomize: str = field(repr=False)
    summary: tuple[str, ...]
    notes: tuple[str, ...] = ()


# -- sizes ---------------------------------------------------------------------------------------


def quantity(size_bytes: int) -> str:
    """`size_bytes` rounded up to whole Mi, as a Kubernetes quantity (`12Gi`, `12289Mi`)."""
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes <= 0:
        raise UsageError(f"a size must be a positive number of bytes, not {size_bytes!r}")
    return units.quantity(size_bytes)


def size_from_measured(measured_bytes: int | None, headroom: float) -> int:
    """ceil(measured × headroom), rounded up to whole Mi: a size from what was measured.

    Refuses a measurement that is missing or zero (a size is never a copied constant) and a
    headroom below 1 (that would size below the measured peak).
    """
    if measured_bytes is None or isinstance(measured_bytes, bool) or measured_bytes <= 0:
        raise UsageError(
            f"no measured peak to size from (got {measured_bytes!r}); measure the workload first"
        )
    if isinstance(headroom, bool) or not math.isfinite(headroom) or headroom < 1:
        raise UsageError(f"headroom must be a finite factor of at least 1, not {headroom!r}")
    return units.round_up_mib(math.ceil(Fraction(measured_bytes) * Fraction(str(headroom))))


def _quantity_bytes(text: object) -> int | None:
    """A Kubernetes memory quantity in bytes, or None when it is not one we can read."""
    if not isinstance(text, (str, int)) or isinstance(text, bool):
        return None
    try:
        return units.parse_size(text)
    except units.SizeError:
        return None


# -- locating templates and volumes --------------------------------------------------------------


def select_document(
    text: str, *, kind: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """The one document of a (multi-document) YAML text with this kind and name."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise UsageError(f"manifest is not valid YAML: {' '.join(str(exc).split())}") from exc
    if not all(isinstance(d, dict) for d in documents):
        raise UsageError("manifest holds a document that is not a mapping")
    matches = [
        d
        for d in documents
        if (kind is None or d.get("kind") == kind) and (name is None or _name_of(d) == name)
    ]
    if len(matches) == 1:
        return dict(matches[0])
    present = ", ".join(f"{d.get('kind')}/{_name_of(d)}" for d in documents)
    wanted = f"{kind or '*'}/{name or '*'}"
    if not matches:
        raise UsageError(f"no document {wanted} in the manifest; it holds: {present or 'nothing'}")
    raise UsageError(f"{len(matches)} documents match {wanted} ({present}); name kind and name")


def _name_of(document: Mapping[str, Any]) -> object:
    metadata = document.get("metadata")
    return metadata.get("name") if isinstance(metadata, Mapping) else None


def workload(manifest: Mapping[str, Any]) -> Workload:
    """The manifest's identity; refused when apiVersion, kind or metadata.name is missing."""
    metadata = manifest.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not (isinstance(api_version, str) and isinstance(kind, str) and isinstance(name, str)):
        raise UsageError("manifest needs apiVersion, kind and metadata.name")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return Workload(api_version, kind, name, namespace if isinstance(namespace, str) else None)


def _is_crd(target: Workload) -> bool:
    return (target.group, target.kind) in _REPLICA_SPEC_PATHS


def _walk(manifest: Mapping[str, Any], path: Sequence[str], target: Workload) -> Mapping[str, Any]:
    node: Any = manifest
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping):
        raise UsageError(f"{target.ref} has no pod template at {'.'.join(path)}")
    return node


def pod_templates(manifest: Mapping[str, Any]) -> tuple[PodTemplate, ...]:
    """Every pod template of the workload, replica specs in document order."""
    target = workload(manifest)
    key = (target.group, target.kind)
    if key in _BUILTIN_TEMPLATE_PATHS:
        path = _BUILTIN_TEMPLATE_PATHS[key]
        return (PodTemplate(None, path, _walk(manifest, path, target)),)
    if key not in _REPLICA_SPEC_PATHS:
        raise UsageError(
            f"cannot patch {target.ref} ({target.api_version}): supported kinds are "
            f"{SUPPORTED_KINDS}"
        )
    specs = _walk(manifest, _REPLICA_SPEC_PATHS[key], target)
    templates = []
    for replica in specs:
        path = (*_REPLICA_SPEC_PATHS[key], str(replica), "template", "spec")
        templates.append(PodTemplate(str(replica), path, _walk(manifest, path, target)))
    if not templates:
        raise UsageError(f"{target.ref} has no replica specs")
    return tuple(templates)


def _select(manifest: Mapping[str, Any], replica: str | None) -> tuple[PodTemplate, ...]:
    templates = pod_templates(manifest)
    if replica is None:
        return templates
    if templates[0].replica is None:
        raise UsageError(f"{workload(manifest).ref} has no replica specs; drop the replica")
    chosen = tuple(t for t in templates if t.replica == replica)
    if not chosen:
        names = ", ".join(str(t.replica) for t in templates)
        raise UsageError(f"{workload(manifest).ref} has no replica {replica}; it has: {names}")
    return chosen


def _entries(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = spec.get(key)
    if not isinstance(items, list):
        return []
    return [item if isinstance(item, Mapping) else {} for item in items]


def _mounts(spec: Mapping[str, Any]) -> dict[str, list[Mount]]:
    by_volume: dict[str, list[Mount]] = {}
    for key, init in (("initContainers", True), ("containers", False)):
        for container in _entries(spec, key):
            for mount in container.get("volumeMounts") or []:
                if isinstance(mount, Mapping) and isinstance(mount.get("name"), str):
                    path = str(mount.get("mountPath", "")).rstrip("/") or "/"
                    entry = Mount(str(container.get("name")), path, init)
                    by_volume.setdefault(mount["name"], []).append(entry)
    return by_volume


def _template_volumes(template: PodTemplate) -> list[ShmVolume]:
    mounts = _mounts(template.spec)
    found = []
    for index, volume in enumerate(_entries(template.spec, "volumes")):
        name = str(volume.get("name"))
        sources = [k for k in volume if k != "name"]
        source = sources[0] if sources else "none"
        empty_dir = volume.get("emptyDir")
        empty_dir = empty_dir if isinstance(empty_dir, Mapping) else {}
        limit = empty_dir.get("sizeLimit")
        found.append(
            ShmVolume(
                replica=template.replica,
                volume=name,
                index=index,
                source=source,
                medium=str(empty_dir.get("medium") or "") if source == "emptyDir" else "",
                size_limit=None if limit is None else str(limit),
                mounts=tuple(mounts.get(name, ())),
            )
        )
    return found


def shm_volumes(manifest: Mapping[str, Any]) -> tuple[ShmVolume, ...]:
    """Memory-backed emptyDirs wherever mounted, and whatever is mounted at /dev/shm."""
    return tuple(
        v
        for template in pod_templates(manifest)
        for v in _template_volumes(template)
        if v.memory_backed or v.at_dev_shm
    )


# -- building patches ----------------------------------------------------------------------------


def _pointer(path: Iterable[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _nest(path: Sequence[str], leaf: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = dict(leaf)
    for key in reversed(path):
        body = {key: body}
    return body


def _where(target: Workload, replica: str | None) -> str:
    return f"{target.ref} ({replica})" if replica else target.ref


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line strings as `|-` blocks (the inline JSON 6902 patch stays readable)."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_LiteralDumper.add_representer(str, _represent_str)


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_LiteralDumper, sort_keys=False, default_flow_style=False)


def _kustomize(target: Workload, patch_type: PatchType, body: Any) -> str:
    if patch_type == "strategic":
        metadata = {"name": target.name}
        if target.namespace:
            metadata["namespace"] = target.namespace
        header = (
            f"# Strategic merge patch for {target.ref}: list this file under `patches:`\n"
            "# (- path: FILE) of the kustomization.yaml that includes the workload.\n"
        )
        document = {"apiVersion": target.api_version, "kind": target.kind, "metadata": metadata}
        return header + _dump({**document, **body})
    selector: dict[str, str] = {}
    if target.group:
        selector["group"] = target.group
    selector.update(version=target.version, kind=target.kind, name=target.name)
    if target.namespace:
        selector["namespace"] = target.namespace
    header = (
        f"# JSON 6902 patch for {target.ref}: merge this entry into the `patches:`\n"
        "# of the kustomization.yaml that includes the workload.\n"
    )
    return header + _dump({"patches": [{"target": selector, "patch": _dump(body).rstrip("\n")}]})


def _build(
    target: Workload, patch_type: PatchType, body: Any, summary: list[str], notes: list[str]
) -> Patch:
    return Patch(
        type=patch_type,
        target=target,
        body=body,
        kustomize=_kustomize(target, patch_type, body),
        summary=tuple(summary),
        notes=tuple(notes),
    )


def _no_shm_reason(target: Workload, templates: Sequence[PodTemplate], volume: str | None) -> str:
    where = _where(target, templates[0].replica) if len(templates) == 1 else target.ref
    volumes = [v for t in templates for v in _template_volumes(t)]
    if volume is not None:
        named = [v for v in volumes if v.volume == volume]
        if not named:
            have = ", ".join(sorted({v.volume for v in volumes})) or "none"
            return f"{where} has no volume {volume} (volumes: {have})"
        return (
            f"volume {volume} of {where} is not memory-backed: {named[0].describe()};"
            f" a sizeLimit applies to emptyDir medium {MEMORY_MEDIUM}"
        )
    at_shm = [v for v in volumes if v.at_dev_shm]
    if at_shm:
        what = "; ".join(v.describe() for v in at_shm)
        return (
            f"{where} mounts /dev/shm from a volume that is not memory-backed: {what};"
            f" make it emptyDir medium {MEMORY_MEDIUM} first"
        )
    memory = [v for v in volumes if v.memory_backed]
    what = "; ".join(v.describe() for v in (memory or volumes)) or "none"
    kind = "memory-backed volumes" if memory else "volumes"
    return (
        f"{where} mounts nothing at /dev/shm (containers get the runtime's default, 64Mi on"
        f" Docker and containerd); {kind}: {what}; add an emptyDir medium {MEMORY_MEDIUM}"
        " mounted at /dev/shm first"
    )


def shm_size_patch(
    manifest: Mapping[str, Any],
    size_bytes: int,
    *,
    volume: str | None = None,
    replica: str | None = None,
) -> Patch:
    """Set `sizeLimit` on the memory-backed /dev/shm volume of every selected pod template.

    Without `volume`, each template's emptyDir medium Memory volumes mounted at /dev/shm are
    patched; with it, that memory-backed emptyDir wherever it is mounted. Templates without such
    a volume (an MPIJob launcher) are left as they are and named in `notes`; none at all is
    refused with what there is instead.
    """
    target = workload(manifest)
    size = quantity(size_bytes)
    templates = _select(manifest, replica)
    crd = _is_crd(target)
    summary: list[str] = []
    notes: list[str] = []
    ops: list[dict[str, Any]] = []
    body: dict[str, Any] = {}
    for template in templates:
        chosen = [
            v
            for v in _template_volumes(template)
            if v.memory_backed and (v.volume == volume if volume else v.at_dev_shm)
        ]
        if not chosen:
            wanted = f"volume {volume}" if volume else "volume mounted at /dev/shm"
            notes.append(
                f"{_where(target, template.replica)}: no memory-backed {wanted}, left unchanged"
            )
            continue
        for v in chosen:
            was = f"was {v.size_limit}" if v.size_limit is not None else "was unbounded"
            if v.size_limit == size:
                was = f"already {size}"
            summary.append(
                f"set sizeLimit {size} on volume {v.volume} of"
                f" {_where(target, template.replica)} ({was})"
            )
            notes.extend(_shm_vs_limits(template, v, size_bytes, target))
            if crd:
                at: tuple[str | int, ...] = (*template.path, "volumes", v.index)
                ops.append({"op": "test", "path": _pointer((*at, "name")), "value": v.volume})
                op = "add" if v.size_limit is None else "replace"
                path = _pointer((*at, "emptyDir", "sizeLimit"))
                ops.append({"op": op, "path": path, "value": size})
        if not crd:
            volumes = [{"name": v.volume, "emptyDir": {"sizeLimit": size}} for v in chosen]
            body = _nest(template.path, {"volumes": volumes})
    if not summary:
        raise UsageError(_no_shm_reason(target, templates, volume))
    return _build(target, "json" if crd else "strategic", ops if crd else body, summary, notes)


def _shm_vs_limits(
    template: PodTemplate, volume: ShmVolume, size_bytes: int, target: Workload
) -> list[str]:
    """tmpfs pages are charged to the writer's memory cgroup: a note when /dev/shm outgrows it."""
    notes = []
    for container in _entries(template.spec, "containers"):
        name = container.get("name")
        if not any(m.container == name and not m.init for m in volume.mounts):
            continue
        resources = container.get("resources")
        limits = resources.get("limits") if isinstance(resources, Mapping) else None
        written = limits.get("memory") if isinstance(limits, Mapping) else None
        limit = _quantity_bytes(written)
        if limit is not None and units.round_up_mib(size_bytes) >= limit:
            notes.append(
                f"{_where(target, template.replica)}: sizeLimit {quantity(size_bytes)} is not"
                f" below container {name}'s memory limit {written} and /dev/shm pages count"
                " against it; raise the limit too (memory-limit)"
            )
    return notes


def memory_patch(
    manifest: Mapping[str, Any],
    *,
    request_bytes: int,
    limit_bytes: int,
    containers: Sequence[str] | None = None,
    replica: str | None = None,
) -> Patch:
    """Set resources.requests.memory and resources.limits.memory of the chosen containers.

    Default containers: every container (not init container) of the selected templates that
    mounts /dev/shm — the training processes — or, where no container of the workload mounts
    /dev/shm, every container. Named containers are looked up in every selected template; a
    template holding none of them is left unchanged (named in `notes`); a name found nowhere is
    refused.
    """
    target = workload(manifest)
    request, limit = quantity(request_bytes), quantity(limit_bytes)
    if units.round_up_mib(request_bytes) > units.round_up_mib(limit_bytes):
        raise UsageError(f"memory request {request} is above the limit {limit}")
    templates = _select(manifest, replica)
    if isinstance(containers, str):
        containers = [containers]
    chosen = _choose_containers(templates, containers, target)
    crd = _is_crd(target)
    summary: list[str] = []
    notes: list[str] = []
    ops: list[dict[str, Any]] = []
    body: dict[str, Any] = {}
    for template in templates:
        picked = [
            (i, c)
            for i, c in enumerate(_entries(template.spec, "containers"))
            if (template.replica, c.get("name")) in chosen
        ]
        if not picked:
            wanted = ", ".join(containers) if containers is not None else "mounting /dev/shm"
            notes.append(
                f"{_where(target, template.replica)}: no container {wanted}, left unchanged"
            )
            continue
        for index, container in picked:
            resources = container.get("resources")
            resources = resources if isinstance(resources, Mapping) else None
            was = ", ".join(
                f"{word} {_current(resources, key)}"
                for word, key in (("request", "requests"), ("limit", "limits"))
            )
            summary.append(
                f"set memory request {request} and limit {limit} on container"
                f" {container.get('name')} of {_where(target, template.replica)} (was {was})"
            )
            if crd:
                at: tuple[str | int, ...] = (*template.path, "containers", index)
                name = container.get("name")
                ops.append({"op": "test", "path": _pointer((*at, "name")), "value": name})
                ops.extend(_resource_ops(at, resources, request, limit))
        notes.extend(
            _limit_vs_shm(template, {c.get("name") for _, c in picked}, limit_bytes, target)
        )
        if not crd:
            entries = [
                {
                    "name": c.get("name"),
                    "resources": {"requests": {"memory": request}, "limits": {"memory": limit}},
                }
                for _, c in picked
            ]
            body = _nest(template.path, {"containers": entries})
    return _build(target, "json" if crd else "strategic", ops if crd else body, summary, notes)


def _choose_containers(
    templates: Sequence[PodTemplate], names: Sequence[str] | None, target: Workload
) -> set[tuple[str | None, Any]]:
    every = {(t.replica, c.get("name")) for t in templates for c in _entries(t.spec, "containers")}
    if names is not None:
        missing = [n for n in names if n not in {name for _, name in every}]
        if missing or not names:
            have = ", ".join(sorted({str(name) for _, name in every})) or "none"
            raise UsageError(
                f"{target.ref} has no container {', '.join(missing) or '(none named)'};"
                f" containers: {have}"
            )
        return {(replica, name) for replica, name in every if name in names}
    shm = {
        (t.replica, m.container)
        for t in templates
        for v in _template_volumes(t)
        if v.at_dev_shm
        for m in v.mounts
        if m.path == SHM_PATH and not m.init
    }
    if not every:
        raise UsageError(f"{target.ref} has no containers")
    return shm or every


def _current(resources: Mapping[str, Any] | None, key: str) -> str:
    block = resources.get(key) if resources is not None else None
    value = block.get("memory") if isinstance(block, Mapping) else None
    return "unset" if value is None else str(value)


def _resource_ops(
    at: tuple[str | int, ...], resources: Mapping[str, Any] | None, request: str, limit: str
) -> list[dict[str, Any]]:
    if resources is None:
        value = {"requests": {"memory": request}, "limits": {"memory": limit}}
        return [{"op": "add", "path": _pointer((*at, "resources")), "value": value}]
    ops = []
    for key, size in (("requests", request), ("limits", limit)):
        block = resources.get(key)
        if not isinstance(block, Mapping):
            path = _pointer((*at, "resources", key))
            ops.append({"op": "add", "path": path, "value": {"memory": size}})
        else:
            op = "replace" if "memory" in block else "add"
            ops.append(
                {"op": op, "path": _pointer((*at, "resources", key, "memory")), "value": size}
            )
    return ops


def _limit_vs_shm(
    template: PodTemplate, names: set[Any], limit_bytes: int, target: Workload
) -> list[str]:
    notes = []
    for v in _template_volumes(template):
        size = _quantity_bytes(v.size_limit)
        mounted_by = {m.container for m in v.mounts if not m.init} & names
        if (
            v.memory_backed
            and mounted_by
            and size is not None
            and size >= units.round_up_mib(limit_bytes)
        ):
            notes.append(
                f"{_where(target, template.replica)}: memory-backed volume {v.volume} may grow to"
                f" {v.size_limit}, not below the new limit {quantity(limit_bytes)}; its pages"
                " count against the limit"
            )
    return notes
