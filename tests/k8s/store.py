"""The double's cluster state: objects by resource, resourceVersions, writes and evictions.

What it models, as the API server (and, where noted, a controller) does:

- every write bumps a cluster-wide ``resourceVersion``; a PUT (or a patch) that carries a stale
  ``metadata.resourceVersion`` is a 409 Conflict; a create of an existing name a 409
  AlreadyExists; a missing object a 404 NotFound; ``?dryRun=All`` computes the result and
  stores nothing;
- ``metadata.generation`` advances when ``spec`` changes (kinds that have one); ``status`` is
  kept on writes to the main resource and written only through ``/status``;
- immutable fields are refused with a 422 Invalid: a Job's ``spec.template`` and
  ``spec.selector``, a Deployment's, StatefulSet's or DaemonSet's ``spec.selector``;
- the eviction subresource (``pods/NAME/eviction``, policy/v1 Eviction) follows the server's
  eviction.go: a terminal or pending pod is deleted outright; more than one matching PDB is a
  500; a PDB whose status lags its generation, or with ``disruptionsAllowed == 0``, refuses with
  429 TooManyRequests ("Cannot evict pod as it would violate the pod's disruption budget.");
  otherwise the budget is decremented (``status.disruptedPods``) and the pod deleted;
- the disruption controller's status (``currentHealthy``, ``desiredHealthy``, ``expectedPods``,
  ``disruptionsAllowed``, the DisruptionAllowed condition) is recomputed after every pod
  change, as if the controller converged at once.

Where it is simpler than a real cluster: pods are deleted at once (no kubelet, so no
Terminating phase and no grace period elapses), nothing recreates an evicted pod (no
ReplicaSet/Job controllers), ``expectedPods`` is the count of matching pods except for
``maxUnavailable``/percentage budgets, which keep the seeded ``expectedPods`` as the
controllers' scale, and no defaults are applied to written objects.
"""

from __future__ import annotations

import copy
import json
import math
import threading
import uuid
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tests.k8s.patches import PATCH_TYPES, PatchError
from tests.k8s.resources import BY_KIND, Resource
from tests.k8s.selectors import field_predicate, label_predicate, match_label_selector

_NO_GENERATION = {"pods", "nodes", "namespaces"}
_IMMUTABLE = {
    "jobs": ("selector", "template"),
    "deployments": ("selector",),
    "statefulsets": ("selector",),
    "daemonsets": ("selector",),
}
PDB_VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_PDBS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An error the API server would answer with a ``Status`` object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def not_found(resource: Resource, name: str) -> ApiError:
    details: dict[str, Any] = {"name": name, "kind": resource.plural}
    if resource.group:
        details = {"name": name, "group": resource.group, "kind": resource.plural}
    return ApiError(404, "NotFound", f'{resource.qualified} "{name}" not found', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _invalid(resource: Resource, name: str, field: str, detail: str) -> ApiError:
    kind = f"{resource.kind}.{resource.group}" if resource.group else resource.kind
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {field}: {detail}',
        {
            "name": name,
            **({"group": resource.group} if resource.group else {}),
            "kind": resource.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}],
        },
    )


def _ready(pod: dict[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _scaled(value: int | str, total: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    percent = int(str(value).rstrip("%"))
    scaled = percent * total / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


class ClusterState:
    """Objects keyed by (plural, namespace, name); namespace "" for cluster-scoped kinds."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._kinds: dict[str, Resource] = {}
        self._rv = 1000

    # --- seeding and inspection (tests; not logged as requests) ------------------------------

    def load(self, paths: Iterable[Path]) -> None:
        """Seed from files in the shape ``kubectl get -o json`` writes (a List, or one object)."""
        for path in paths:
            data = json.loads(Path(path).read_text())
            items = data["items"] if data.get("kind", "").endswith("List") else [data]
            for item in items:
                self._put(item, keep_version=True)
        with self._lock:
            for obj in self._objects.values():
                self._rv = max(self._rv, int(obj["metadata"].get("resourceVersion") or 0))
            for ns in sorted({key[1] for key in self._objects if key[1]}):
                if ("namespaces", "", ns) not in self._objects:
                    self._put(
                        {
                            "apiVersion": "v1",
                            "kind": "Namespace",
                            "metadata": {
                                "name": ns,
                                "labels": {"kubernetes.io/metadata.name": ns},
                                "creationTimestamp": "2025-02-20T14:04:10Z",
                                "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, ns)),
                            },
                            "spec": {"finalizers": ["kubernetes"]},
                            "status": {"phase": "Active"},
                        },
                        keep_version=False,
                    )
            self._reconcile_pdbs()

    def put(self, obj: dict[str, Any]) -> None:
        """Store an object as given (a test arranging state), with a new resourceVersion."""
        self._put(obj, keep_version=False)

    def _put(self, obj: dict[str, Any], *, keep_version: bool) -> None:
        resource = BY_KIND[obj["kind"]]
        meta = obj["metadata"]
        ns = meta.get("namespace", "") if resource.namespaced else ""
        with self._lock:
            stored = copy.deepcopy(obj)
            if not (keep_version and stored["metadata"].get("resourceVersion")):
                stored["metadata"]["resourceVersion"] = self._next_rv()
            self._objects[(resource.plural, ns, meta["name"])] = stored
            self._kinds[resource.plural] = resource
            if resource.plural == "pods":
                self._reconcile_pdbs()

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def pending_pods(self) -> list[dict[str, Any]]:
        """Copies of the pods in phase Pending (the double's kubelets start them)."""
        with self._lock:
            return [
                copy.deepcopy(obj)
                for (plural, _, _), obj in self._objects.items()
                if plural == "pods" and (obj.get("status") or {}).get("phase") == "Pending"
            ]

    def set_pod_status(self, pod: dict[str, Any]) -> bool:
        """Store `pod`'s status if the pod is still the version read (not deleted or changed
        since): what a kubelet's status update does. Whether it was stored."""
        meta = pod["metadata"]
        with self._lock:
            key = ("pods", meta.get("namespace", ""), meta["name"])
            current = self._objects.get(key)
            if current is None or current["metadata"].get("resourceVersion") != meta.get(
                "resourceVersion"
            ):
                return False
            current["status"] = copy.deepcopy(pod["status"])
            current["metadata"]["resourceVersion"] = self._next_rv()
            return True

    def names(self, plural: str, namespace: str | None = None) -> list[str]:
        with self._lock:
            return sorted(
                n for (p, ns, n) in self._objects if p == plural and namespace in (None, ns)
            )

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    # --- API verbs -------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _key(self, resource: Resource, namespace: str, name: str) -> tuple[str, str, str]:
        return (resource.plural, namespace if resource.namespaced else "", name)

    def _existing(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        obj = self._objects.get(self._key(resource, namespace, name))
        if obj is None:
            raise not_found(resource, name)
        return obj

    def read(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._existing(resource, namespace, name))

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Objects of a resource (``namespace`` None: all namespaces), sorted as etcd keys."""
        labels_ok = label_predicate(label_selector)
        fields_ok = field_predicate(resource.plural, field_selector)
        with self._lock:
            found = [
                copy.deepcopy(obj)
                for (plural, ns, _), obj in sorted(self._objects.items())
                if plural == resource.plural
                and (namespace is None or ns == namespace)
                and labels_ok(obj["metadata"].get("labels") or {})
                and fields_ok(obj)
            ]
        return found

    def _check_body(
        self, resource: Resource, namespace: str, body: Any, name: str | None
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of the request is not a JSON object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != resource.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({resource.api_version})"
            )
        if kind and kind != resource.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})"
            )
        meta = body.setdefault("metadata", {})
        if resource.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = namespace
        if name is not None and meta.get("name") and meta["name"] != name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})"
            )
        if name is not None:
            meta["name"] = name
        body["apiVersion"], body["kind"] = resource.api_version, resource.kind
        return body

    def create(
        self, resource: Resource, namespace: str, body: Any, dry_run: bool
    ) -> dict[str, Any]:
        obj = self._check_body(resource, namespace, copy.deepcopy(body), None)
        meta = obj["metadata"]
        with self._lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            if not meta.get("name"):
                raise ApiError(
                    422,
                    "Invalid",
                    f'{resource.kind} "" is invalid: metadata.name: Required value: name or '
                    "generateName is required",
                )
            if resource.namespaced and ("namespaces", "", namespace) not in self._objects:
                raise not_found(BY_KIND["Namespace"], namespace)
            key = self._key(resource, namespace, meta["name"])
            if key in self._objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{resource.qualified} "{meta["name"]}" already exists',
                    {"name": meta["name"], "kind": resource.plural}
                    | ({"group": resource.group} if resource.group else {}),
                )
            meta.pop("resourceVersion", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            if resource.plural not in _NO_GENERATION:
                meta["generation"] = 1
            obj["status"] = {"phase": "Pending"} if resource.plural == "pods" else {}
            if dry_run:
                return obj
            meta["resourceVersion"] = self._next_rv()
            self._objects[key] = obj
            self._after_write(resource)
            return copy.deepcopy(obj)

    def _store_update(
        self,
        resource: Resource,
        old: dict[str, Any],
        new: dict[str, Any],
        dry_run: bool,
        subresource: str = "",
    ) -> dict[str, Any]:
        """Validate and store ``new`` in place of ``old`` (PUT, PATCH)."""
        meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
        name = old_meta["name"]
        sent_rv = meta.get("resourceVersion")
        if sent_rv and sent_rv != old_meta["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.qualified} "{name}": the object '
                "has been modified; please apply your changes to the latest version and try again",
                {"name": name, "kind": resource.plural}
                | ({"group": resource.group} if resource.group else {}),
            )
        if meta.get("name", name) != name:
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({name})"
            )
        for field in ("uid", "creationTimestamp", "name", "namespace", "generation"):
            if field in old_meta:
                meta[field] = old_meta[field]
        new["apiVersion"], new["kind"] = resource.api_version, resource.kind
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if subresource == "status":
            # /status writes only status (and the labels/annotations of metadata)
            status = new.get("status")
            new = copy.deepcopy(old)
            new["status"] = status
            meta = new["metadata"]
        else:
            for field in _IMMUTABLE.get(resource.plural, ()):
                if field in old_spec and old_spec.get(field) != new_spec.get(field):
                    raise _invalid(
                        resource,
                        name,
                        f"spec.{field}",
                        f"Invalid value: {json.dumps(new_spec.get(field), sort_keys=True)}: "
                        "field is immutable",
                    )
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            if resource.plural not in _NO_GENERATION and old_spec != new_spec:
                meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if new == old:
            return copy.deepcopy(old)  # a no-op write does not bump the resourceVersion
        if dry_run:
            meta["resourceVersion"] = old_meta["resourceVersion"]
            return new
        meta["resourceVersion"] = self._next_rv()
        self._objects[self._key(resource, old_meta.get("namespace", ""), name)] = new
        self._after_write(resource)
        return copy.deepcopy(new)

    def replace(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        dry_run: bool,
        subresource: str = "",
    ) -> dict[str, Any]:
        new = self._check_body(resource, namespace, copy.deepcopy(body), name)
        with self._lock:
            old = self._existing(resource, namespace, name)
            return self._store_update(resource, old, new, dry_run, subresource)

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        dry_run: bool,
        subresource: str = "",
    ) -> dict[str, Any]:
        apply = PATCH_TYPES.get(content_type)
        if apply is None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(PATCH_TYPES)}",
            )
        with self._lock:
            old = self._existing(resource, namespace, name)
            try:
                new = apply(copy.deepcopy(old), body)
            except PatchError as exc:
                if exc.code == 400:
                    raise bad_request(str(exc)) from exc
                raise ApiError(422, "Invalid", str(exc)) from exc
            except (KeyError, ValueError, TypeError, IndexError) as exc:
                raise bad_request(f"invalid patch: {exc}") from exc
            if not isinstance(new, dict):
                raise bad_request("the patched object is not a JSON object")
            return self._store_update(resource, old, new, dry_run, subresource)

    def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        options: dict[str, Any] | None,
        dry_run: bool,
    ) -> dict[str, Any]:
        with self._lock:
            old = copy.deepcopy(self._existing(resource, namespace, name))
            grace = (options or {}).get("gracePeriodSeconds")
            if resource.plural == "pods":
                if grace is None:
                    grace = (old.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                if grace:
                    # the first answer of a graceful delete: the pod, marked for deletion
                    old["metadata"]["deletionTimestamp"] = now()
                    old["metadata"]["deletionGracePeriodSeconds"] = grace
            if dry_run:
                return old
            del self._objects[self._key(resource, namespace, name)]
            self._next_rv()
            self._after_write(resource)
            return old

    def evict(self, namespace: str, name: str, body: Any, dry_run: bool) -> dict[str, Any]:
        """POST pods/NAME/eviction; returns the Status of success (201)."""
        pods = BY_KIND["Pod"]
        if not isinstance(body, dict):
            raise bad_request("the body of the request is not a JSON object")
        api_version = body.get("apiVersion")
        if api_version and api_version not in ("policy/v1", "policy/v1beta1"):
            raise bad_request(f"unsupported Eviction apiVersion {api_version}")
        if (body.get("metadata") or {}).get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or None
        success = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
        with self._lock:
            pod = self._existing(pods, namespace, name)
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get(
                "deletionTimestamp"
            ):
                self.delete(pods, namespace, name, options, dry_run)
                return success
            labels = pod["metadata"].get("labels") or {}
            pdbs = [
                obj
                for (plural, ns, _), obj in sorted(self._objects.items())
                if plural == "poddisruptionbudgets"
                and ns == namespace
                and obj.get("spec", {}).get("selector") is not None
                and match_label_selector(obj["spec"]["selector"], labels)
            ]
            if len(pdbs) > 1:
                raise ApiError(
                    500,
                    "InternalError",
                    f"Internal error occurred: {MULTIPLE_PDBS}",
                    {"causes": [{"message": MULTIPLE_PDBS}]},
                )
            if not pdbs:
                self.delete(pods, namespace, name, options, dry_run)
                return success
            pdb = pdbs[0]
            status = pdb.setdefault("status", {})
            policy = pdb["spec"].get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
            if not _ready(pod):
                healthy_budget = (
                    int(status.get("currentHealthy", 0)) >= int(status.get("desiredHealthy", 0))
                    and int(status.get("desiredHealthy", 0)) > 0
                )
                if policy == "AlwaysAllow" or healthy_budget:
                    self.delete(pods, namespace, name, options, dry_run)
                    return success
            self._check_and_decrement(pdb, name, dry_run)
            self.delete(pods, namespace, name, options, dry_run)
            return success

    def _check_and_decrement(self, pdb: dict[str, Any], pod: str, dry_run: bool) -> None:
        status = pdb["status"]
        name = pdb["metadata"]["name"]
        if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 1)):
            raise ApiError(
                429,
                "TooManyRequests",
                PDB_VIOLATION,
                {
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {name} is still being processed "
                            "by the server.",
                        }
                    ],
                    "retryAfterSeconds": 10,
                },
            )
        allowed = int(status.get("disruptionsAllowed", 0))
        if allowed < 0:
            raise ApiError(
                403,
                "Forbidden",
                f'poddisruptionbudgets.policy "{name}" is forbidden: pdb disruptions allowed is '
                "negative",
                {"name": name, "group": "policy", "kind": "poddisruptionbudgets"},
            )
        if allowed == 0:
            raise ApiError(
                429,
                "TooManyRequests",
                PDB_VIOLATION,
                {
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {name} needs "
                            f"{status.get('desiredHealthy', 0)} healthy pods and has "
                            f"{status.get('currentHealthy', 0)} currently",
                        }
                    ]
                },
            )
        if dry_run:
            return
        status["disruptionsAllowed"] = allowed - 1
        status.setdefault("disruptedPods", {})[pod] = now()
        pdb["metadata"]["resourceVersion"] = self._next_rv()

    # --- the controllers' part -------------------------------------------------------------

    def _after_write(self, resource: Resource) -> None:
        if resource.plural in ("pods", "poddisruptionbudgets"):
            self._reconcile_pdbs()

    def pdb_status(self, pdb: dict[str, Any]) -> dict[str, Any]:
        """The status the disruption controller computes for ``pdb`` from the current pods."""
        spec = pdb.get("spec") or {}
        ns = pdb["metadata"].get("namespace", "")
        recorded = pdb.get("status") or {}
        disrupted = dict(recorded.get("disruptedPods") or {})
        selector = spec.get("selector")
        pods = [
            obj
            for (plural, pns, _), obj in sorted(self._objects.items())
            if plural == "pods"
            and pns == ns
            and selector is not None
            and match_label_selector(selector, obj["metadata"].get("labels") or {})
            and not obj["metadata"].get("deletionTimestamp")
        ]
        names = {p["metadata"]["name"] for p in pods}
        disrupted = {k: v for k, v in disrupted.items() if k in names}
        healthy = sum(1 for p in pods if _ready(p) and p["metadata"]["name"] not in disrupted)
        if "minAvailable" in spec and isinstance(spec["minAvailable"], int):
            expected = len(pods)
            desired = spec["minAvailable"]
        else:
            expected = max(int(recorded.get("expectedPods", 0)), len(pods))
            if "minAvailable" in spec:
                desired = _scaled(spec["minAvailable"], expected, True)
            elif "maxUnavailable" in spec:
                desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, True))
            else:
                desired = expected
        allowed = max(0, healthy - desired) if expected > 0 else 0
        generation = int(pdb["metadata"].get("generation", 1))
        old_cond = next(
            (c for c in recorded.get("conditions") or [] if c.get("type") == "DisruptionAllowed"),
            {},
        )
        cond_status = "True" if allowed > 0 else "False"
        condition = {
            "lastTransitionTime": old_cond.get("lastTransitionTime", now())
            if old_cond.get("status") == cond_status
            else now(),
            "message": "",
            "observedGeneration": generation,
            "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
            "status": cond_status,
            "type": "DisruptionAllowed",
        }
        status: dict[str, Any] = {
            "conditions": [condition],
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "disruptionsAllowed": allowed,
            "expectedPods": expected,
            "observedGeneration": generation,
        }
        if disrupted:
            status["disruptedPods"] = disrupted
        return status

    def _reconcile_pdbs(self) -> None:
        for (plural, _, _), pdb in list(self._objects.items()):
            if plural != "poddisruptionbudgets":
                continue
            status = self.pdb_status(pdb)
            if status != pdb.get("status"):
                pdb["status"] = status
                pdb["metadata"]["resourceVersion"] = self._next_rv()
