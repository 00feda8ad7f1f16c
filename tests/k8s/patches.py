"""The three PATCH types the API server accepts on built-in kinds.

- JSON patch (RFC 6902, ``application/json-patch+json``): add, remove, replace, move, copy, test.
- JSON merge patch (RFC 7386, ``application/merge-patch+json``): maps merge, ``null`` deletes,
  lists are replaced.
- Strategic merge patch (``application/strategic-merge-patch+json``): like merge patch, but the
  lists the Kubernetes types mark ``patchStrategy: merge`` are merged item by item on their
  ``patchMergeKey`` (containers by ``name``, volumeMounts by ``mountPath``, …) and the
  ``$patch``/``$retainKeys``/``$setElementOrder``/``$deleteFromPrimitiveList`` directives apply.
  The real server reads the merge keys from the Go types; the double uses the table below (the
  fields of core/apps/batch/policy objects that carry a merge key), keyed by field name alone.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """Becomes a 422 (a test op that fails) or a 400 (a malformed patch)."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


#: field name -> patchMergeKey, for the lists Kubernetes merges instead of replacing
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "env": "name",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "conditions": "type",
    "taints": "key",
    "ownerReferences": "uid",
    "podCIDRs": "",  # a set of primitives: merged, de-duplicated
    "finalizers": "",
}


# --- RFC 7386 -----------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge ------------------------------------------------------------------------


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS:
            result[key] = _merge_list(result.get(key) or [], value, MERGE_KEYS[key])
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    if not key:  # a set of primitives
        out = list(current)
        for item in patch:
            if item not in out:
                out.append(item)
        return out
    out = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}", 400)
        index = next((i for i, cur in enumerate(out) if cur.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
            continue
        if index is None:
            out.append(strategic_merge_patch({}, item))
        else:
            out[index] = strategic_merge_patch(out[index], item)
    return out


# --- RFC 6902 -----------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}", 400)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise PatchError(f"doc is missing path: /{'/'.join(parts)}")
    return node


def _get(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise PatchError(f"doc is missing path: {path}") from exc
    return node


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise PatchError(f"add operation does not apply: doc is missing path: {path}")
        parent.insert(index, copy.deepcopy(value))
    elif isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    else:
        raise PatchError(f"doc is missing path: {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent = _parent(doc, parts)
    last = parts[-1]
    try:
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise PatchError(f'remove operation does not apply: doc is missing path: "{path}"') from exc
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", 400)
    doc = copy.deepcopy(target)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = _add(_remove(doc, path), path, op.get("value")) if path else op.get("value")
        elif kind == "move":
            value = _get(doc, op["from"])
            doc = _add(_remove(doc, op["from"]), path, value)
        elif kind == "copy":
            doc = _add(doc, path, _get(doc, op["from"]))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}", 400)
    return doc


PATCH_TYPES = {
    "application/json-patch+json": json_patch,
    "application/merge-patch+json": merge_patch,
    "application/strategic-merge-patch+json": strategic_merge_patch,
}
