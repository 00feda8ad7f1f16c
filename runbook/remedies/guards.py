"""The node-drain blast-radius guard (which verdicts may drain a node: remedies/kinds/drain.py).

Pure functions over data the caller fetched (the ``items`` of a Kubernetes ``NodeList``, as
``kubectl get nodes -o json`` or the API return them). The same blast-radius rule runs inside
``roles/node_drain`` (an ``ansible.builtin.assert`` before ``kubernetes.core.k8s_drain``); this
module lets the engine refuse a proposal before any playbook runs, and re-check it just before
the approved run.

The rule: the node must be in the pool (the nodes matching ``pool_selector``); the pool's nodes
that are already cordoned (``spec.unschedulable: true``), the target itself not counted, must be
fewer than ``max_cordoned``; and after the drain at most ``max_fraction`` of the pool may be
cordoned: ``(cordoned + 1) / pool_size <= max_fraction``.

Label selectors follow Kubernetes' syntax: ``a=b``, ``a==b``, ``a!=b``, ``a`` (exists),
``!a`` (does not exist), ``a in (x,y)``, ``a notin (x,y)``, joined by commas (AND).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from runbook.errors import UsageError


class SelectorError(UsageError):
    """A label selector that does not parse."""


class GuardConfigError(UsageError):
    """Guard limits that make no sense (a negative count, a fraction outside (0, 1])."""


class Operator(Enum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator is Operator.EXISTS:
            return present
        if self.operator is Operator.DOES_NOT_EXIST:
            return not present
        if self.operator in (Operator.EQUALS, Operator.IN):
            return present and value in self.values
        # != and notin also match nodes that lack the label, as in Kubernetes
        return not present or value not in self.values


@dataclass(frozen=True)
class GuardResult:
    """The guard's decision; ``reason`` is one line naming the numbers it rests on."""

    allowed: bool
    reason: str
    pool_size: int
    cordoned: list[str] = field(default_factory=list)


# a label key: optional DNS-subdomain prefix and '/', then a name of [A-Za-z0-9._-]
_KEY = r"(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EQUALITY = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


def _split_terms(selector: str) -> list[str]:
    """Split on the commas that are not inside a ``(...)`` value set."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in selector:
        if char == "(":
            depth += 1
            if depth > 1:
                raise SelectorError(f"label selector {selector!r}: nested parentheses")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"label selector {selector!r}: unbalanced ')'")
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise SelectorError(f"label selector {selector!r}: unclosed '('")
    terms.append("".join(current))
    return terms


def _parse_term(term: str, selector: str) -> Requirement:
    if not term.strip():
        raise SelectorError(f"label selector {selector!r}: empty term")
    if found := _SET.match(term):
        key, op, raw = found.groups()
        values = [v.strip() for v in raw.split(",")]
        if not values or any(not v or not _VALUE_ONLY.match(v) for v in values):
            raise SelectorError(f"label selector {selector!r}: bad value set in {term.strip()!r}")
        operator = Operator.IN if op == "in" else Operator.NOT_IN
        return Requirement(key, operator, frozenset(values))
    if found := _EQUALITY.match(term):
        key, op, value = found.groups()
        operator = Operator.NOT_EQUALS if op == "!=" else Operator.EQUALS
        return Requirement(key, operator, frozenset({value}))
    if found := _EXISTS.match(term):
        bang, key = found.groups()
        return Requirement(key, Operator.DOES_NOT_EXIST if bang else Operator.EXISTS)
    raise SelectorError(f"label selector {selector!r}: cannot parse {term.strip()!r}")


def parse_selector(selector: Mapping[str, str] | str) -> tuple[Requirement, ...]:
    """Parse a label selector string, or a ``matchLabels``-style mapping (all equalities).

    An empty string or mapping selects everything, as in Kubernetes.
    """
    if isinstance(selector, Mapping):
        return tuple(
            Requirement(str(k), Operator.EQUALS, frozenset({str(v)}))
            for k, v in sorted(selector.items())
        )
    if not selector.strip():
        return ()
    return tuple(_parse_term(term, selector) for term in _split_terms(selector))


def format_selector(selector: Mapping[str, str] | str) -> str:
    """The selector as one would type it (mappings as ``k=v,k2=v2``)."""
    if isinstance(selector, Mapping):
        return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    return selector.strip()


def selector_matches(selector: Mapping[str, str] | str, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy every requirement of ``selector``."""
    return all(req.matches(labels) for req in parse_selector(selector))


def _name(item: Mapping[str, Any]) -> str:
    metadata = item.get("metadata") or {}
    return str(metadata.get("name", ""))


def _labels(item: Mapping[str, Any]) -> dict[str, str]:
    metadata = item.get("metadata") or {}
    return {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}


def _unschedulable(item: Mapping[str, Any]) -> bool:
    spec = item.get("spec") or {}
    return spec.get("unschedulable") is True


def drain_guard(
    nodes: Sequence[Mapping[str, Any]],
    node: str,
    *,
    max_cordoned: int,
    max_fraction: float,
    pool_selector: Mapping[str, str] | str,
) -> GuardResult:
    """Decide whether draining ``node`` keeps the pool within the blast-radius limits.

    ``nodes`` may be the whole cluster's nodes or only the pool's: the pool is always the
    subset matching ``pool_selector``.
    """
    if max_cordoned < 0:
        raise GuardConfigError(f"max_cordoned must be >= 0, got {max_cordoned}")
    if not 0 < max_fraction <= 1:
        raise GuardConfigError(f"max_fraction must be in (0, 1], got {max_fraction}")
    requirements = parse_selector(pool_selector)
    shown = format_selector(pool_selector) or "<all nodes>"
    pool = [n for n in nodes if all(r.matches(_labels(n)) for r in requirements)]
    names = sorted(_name(n) for n in pool)
    size = len(pool)
    cordoned = sorted(_name(n) for n in pool if _unschedulable(n) and _name(n) != node)
    if node not in names:
        return GuardResult(
            False,
            f"refusing to drain {node}: it is not in the pool {shown} ({size} nodes)",
            size,
            cordoned,
        )
    after = len(cordoned) + 1
    fraction = after / size
    already = ", ".join(cordoned) if cordoned else "none"
    numbers = (
        f"{len(cordoned)} other node(s) of the pool {shown} ({size} nodes) already cordoned "
        f"({already}), limit {max_cordoned}; {after} of {size} cordoned after the drain "
        f"= {fraction:.2f}, limit {max_fraction:.2f}"
    )
    if len(cordoned) >= max_cordoned:
        return GuardResult(False, f"refusing to drain {node}: {numbers}", size, cordoned)
    if fraction > max_fraction:
        return GuardResult(False, f"refusing to drain {node}: {numbers}", size, cordoned)
    return GuardResult(True, f"drain of {node} allowed: {numbers}", size, cordoned)
