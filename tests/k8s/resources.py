"""The resources the double serves, their discovery documents and their Table columns.

The discovery documents (``/api``, ``/api/v1``, ``/apis``, ``/apis/GROUP``,
``/apis/GROUP/VERSION``) are the legacy (non-aggregated) shapes a v1.30 server returns to a client
that asks for ``application/json``; the aggregated form (``apidiscovery.k8s.io/v2``) is not
offered, so kubectl and client-go fall back to these, as they do against servers before 1.26.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

SERVER_VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.4",
    "gitCommit": "a51b3b711150f57ffc1f526a640ec058514ed596",
    "gitTreeState": "clean",
    "buildDate": "2024-08-14T18:58:48Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    #: subresource name -> (kind, group, version, verbs); group/version "" = the parent's
    subresources: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How the API server names the resource in messages: ``deployments.apps``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def discovery(self) -> list[dict[str, Any]]:
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(_VERBS),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        for name, kind, group, version, verbs in self.subresources:
            sub: dict[str, Any] = {
                "name": f"{self.plural}/{name}",
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": kind,
                "verbs": list(verbs),
            }
            if group:
                sub["group"], sub["version"] = group, version
            entries.append(sub)
        return entries


RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", False, ("ns",)),
    Resource(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        ("no",),
        subresources=(
            ("proxy", "NodeProxyOptions", "", "", ("create", "delete", "get", "patch", "update")),
            ("status", "Node", "", "", ("get", "patch", "update")),
        ),
    ),
    Resource(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        ("po",),
        ("all",),
        subresources=(
            ("eviction", "Eviction", "policy", "v1", ("create",)),
            ("log", "Pod", "", "", ("get",)),
            ("status", "Pod", "", "", ("get", "patch", "update")),
        ),
    ),
    Resource(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        subresources=(("status", "PodDisruptionBudget", "", "", ("get", "patch", "update")),),
    ),
    Resource(
        "apps",
        "v1",
        "daemonsets",
        "DaemonSet",
        True,
        ("ds",),
        ("all",),
        subresources=(("status", "DaemonSet", "", "", ("get", "patch", "update")),),
    ),
    Resource(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        ("deploy",),
        ("all",),
        subresources=(
            ("scale", "Scale", "autoscaling", "v1", ("get", "patch", "update")),
            ("status", "Deployment", "", "", ("get", "patch", "update")),
        ),
    ),
    Resource(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        ("rs",),
        ("all",),
        subresources=(("status", "ReplicaSet", "", "", ("get", "patch", "update")),),
    ),
    Resource(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        ("sts",),
        ("all",),
        subresources=(("status", "StatefulSet", "", "", ("get", "patch", "update")),),
    ),
    Resource(
        "batch",
        "v1",
        "jobs",
        "Job",
        True,
        (),
        ("all",),
        subresources=(("status", "Job", "", "", ("get", "patch", "update")),),
    ),
    # custom resources of the Kubeflow training operator (kubeflow.org/v1) and mpi-operator
    # (kubeflow.org/v2beta1), served as their CRDs declare them: no short names, no
    # categories, a status subresource
    Resource(
        "kubeflow.org",
        "v1",
        "pytorchjobs",
        "PyTorchJob",
        True,
        subresources=(("status", "PyTorchJob", "", "", ("get", "patch", "update")),),
    ),
    Resource(
        "kubeflow.org",
        "v1",
        "tfjobs",
        "TFJob",
        True,
        subresources=(("status", "TFJob", "", "", ("get", "patch", "update")),),
    ),
    Resource(
        "kubeflow.org",
        "v2beta1",
        "mpijobs",
        "MPIJob",
        True,
        subresources=(("status", "MPIJob", "", "", ("get", "patch", "update")),),
    ),
)

BY_PATH: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}
BY_KIND: dict[str, Resource] = {r.kind: r for r in RESOURCES}
GROUPS: dict[str, list[str]] = {}
for _r in RESOURCES:
    if _r.group and _r.version not in GROUPS.setdefault(_r.group, []):
        GROUPS[_r.group].append(_r.version)


def api_versions() -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": "10.20.0.2:6443"}
        ],
    }


def _group(name: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in GROUPS[name]]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def api_group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in GROUPS]}


def api_group(name: str) -> dict[str, Any] | None:
    if name not in GROUPS:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    found = [r for r in RESOURCES if r.group == group and r.version == version]
    if not found:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [entry for r in found for entry in r.discovery()],
    }


# --- server-side printing (what `kubectl get` shows) ----------------------------------------


def _age(timestamp: str | None, now: datetime) -> str:
    """apimachinery's duration.HumanDuration, as the server prints the Age column."""
    if not timestamp:
        return "<unknown>"
    then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    seconds = int((now - then).total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes, hours = seconds // 60, seconds // 3600
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _node_row(obj: dict[str, Any], now: datetime) -> list[Any]:
    conditions = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
    status = {"True": "Ready", "False": "NotReady"}.get(conditions.get("Ready", ""), "Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(
        key.split("/", 1)[1]
        for key in (obj["metadata"].get("labels") or {})
        if key.startswith("node-role.kubernetes.io/")
    )
    version = obj.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "")
    return [
        obj["metadata"]["name"],
        status,
        ",".join(roles) or "<none>",
        _age(obj["metadata"].get("creationTimestamp"), now),
        version,
    ]


def _pod_row(obj: dict[str, Any], now: datetime) -> list[Any]:
    status = obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    containers = (obj.get("spec") or {}).get("containers") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    reason = status.get("reason") or status.get("phase", "")
    if obj["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return [
        obj["metadata"]["name"],
        f"{ready}/{len(containers)}",
        reason,
        restarts,
        _age(obj["metadata"].get("creationTimestamp"), now),
    ]


def _pdb_row(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
        str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
        int(status.get("disruptionsAllowed", 0)),
        _age(obj["metadata"].get("creationTimestamp"), now),
    ]


def _generic_row(obj: dict[str, Any], now: datetime) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj["metadata"].get("creationTimestamp"), now)]


_NAME = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace. Is required when creating resources, "
    "although some resources may allow a client to request the generation of an appropriate "
    "name automatically. Name is primarily intended for creation idempotence and "
    "configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "priority": 0,
}
_AGE = {
    "name": "Age",
    "type": "string",
    "format": "",
    "description": "CreationTimestamp is a timestamp representing the server time when this "
    "object was created.",
    "priority": 0,
}


def _col(name: str, description: str, type_: str = "string") -> dict[str, Any]:
    return {"name": name, "type": type_, "format": "", "description": description, "priority": 0}


TABLE_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "nodes": [
        _NAME,
        _col("Status", "The status of the node"),
        _col("Roles", "The roles of the node"),
        _AGE,
        _col("Version", "Kubelet Version reported by the node."),
    ],
    "pods": [
        _NAME,
        _col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
        _col("Status", "The aggregate status of the containers in this pod."),
        _col(
            "Restarts",
            "The number of times the containers in this pod have been restarted "
            "and when the last container in this pod has restarted.",
            "string",
        ),
        _AGE,
    ],
    "poddisruptionbudgets": [
        _NAME,
        _col("Min Available", "The minimum number of pods that must be available"),
        _col("Max Unavailable", "The maximum number of pods that may be unavailable"),
        _col(
            "Allowed Disruptions",
            "Calculated number of pods that may be disrupted at this time",
            "integer",
        ),
        _AGE,
    ],
}
_ROWS = {"nodes": _node_row, "pods": _pod_row, "poddisruptionbudgets": _pdb_row}


def table(
    resource: Resource,
    items: list[dict[str, Any]],
    resource_version: str,
    include_object: str,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table, as returned for ``Accept: application/json;as=Table``.

    Nodes, pods and PDBs get the real server's columns; other kinds get Name and Age (the real
    server has richer columns for them; kubectl prints whatever columns it is given).
    """
    now = datetime.now(timezone.utc)
    columns = TABLE_COLUMNS.get(resource.plural, [_NAME, _AGE])
    row_of = _ROWS.get(resource.plural, _generic_row)
    rows = []
    for obj in items:
        row: dict[str, Any] = {"cells": row_of(obj, now)}
        if include_object == "Object":
            row["object"] = {"kind": resource.kind, "apiVersion": resource.api_version, **obj}
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": rows,
    }
