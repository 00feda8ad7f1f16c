"""Label and field selectors as the API server evaluates them (the double's own copy).

Deliberately independent of runbook/remedies/guards.py: the double must not share a parser
with the code it is used to test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any


class SelectorSyntaxError(ValueError):
    """Becomes a 400 BadRequest, with the API server's wording."""


_TERM_SET = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_TERM_EQ = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_TERM_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")

Predicate = Callable[[Mapping[str, str]], bool]


def _split(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return terms


def _term(term: str, selector: str) -> Predicate:
    if m := _TERM_SET.match(term):
        key, op, raw = m.groups()
        values = {v.strip() for v in raw.split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: key not in labels or labels[key] not in values
    if m := _TERM_EQ.match(term):
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: key in labels and labels[key] == value
    if m := _TERM_EXISTS.match(term):
        bang, key = m.groups()
        if bang:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorSyntaxError(f"unable to parse requirement: {term.strip()!r} in {selector!r}")


def label_predicate(selector: str | None) -> Predicate:
    """A predicate over labels for a ``labelSelector`` query parameter."""
    if not selector or not selector.strip():
        return lambda labels: True
    preds = [_term(t, selector) for t in _split(selector)]
    return lambda labels: all(p(labels) for p in preds)


def match_label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (matchLabels + matchExpressions); empty selects everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


#: the field labels each resource supports (a subset of the real server's)
FIELD_LABELS: dict[str, dict[str, Callable[[dict[str, Any]], str]]] = {
    "pods": {
        "metadata.name": lambda o: o["metadata"].get("name", ""),
        "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
        "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", ""),
        "spec.restartPolicy": lambda o: (o.get("spec") or {}).get("restartPolicy", ""),
        "spec.schedulerName": lambda o: (o.get("spec") or {}).get("schedulerName", ""),
        "spec.serviceAccountName": lambda o: (o.get("spec") or {}).get("serviceAccountName", ""),
        "status.phase": lambda o: (o.get("status") or {}).get("phase", ""),
        "status.podIP": lambda o: (o.get("status") or {}).get("podIP", ""),
    },
    "nodes": {
        "metadata.name": lambda o: o["metadata"].get("name", ""),
        "spec.unschedulable": lambda o: str(
            bool((o.get("spec") or {}).get("unschedulable"))
        ).lower(),
    },
}
_DEFAULT_FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda o: o["metadata"].get("name", ""),
    "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
}


def field_predicate(resource: str, selector: str | None) -> Callable[[dict[str, Any]], bool]:
    """A predicate over objects for a ``fieldSelector``; unknown fields are a 400, as for real."""
    if not selector or not selector.strip():
        return lambda obj: True
    fields = FIELD_LABELS.get(resource, _DEFAULT_FIELDS)
    preds: list[Callable[[dict[str, Any]], bool]] = []
    for term in selector.split(","):
        m = re.match(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise SelectorSyntaxError(f"invalid selector: '{selector}'; can't understand '{term}'")
        field, op, value = m.groups()
        if field not in fields:
            raise SelectorSyntaxError(f"field label not supported: {field}")
        get = fields[field]
        if op == "!=":
            preds.append(lambda o, g=get, v=value: g(o) != v)
        else:
            preds.append(lambda o, g=get, v=value: g(o) == v)
    return lambda obj: all(p(obj) for p in preds)
