"""Runbook inspection: every problem in a runbook file, each with its path and line.

orquesta's habit: nothing stops at the first problem. The loader reports the *syntax* issues it
meets while reading the YAML into the model (YAML errors, unknown keys, wrong types, missing keys,
bad ids); `check` then reads the model for *semantics* (references to stages, parsers, causes and
remedies; the stage graph; remedies declared outside `remedies:`) and *expressions* (every
expression and template must compile). Warnings share the `semantics` kind with `severity`
"warning": they do not stop a runbook from loading.

An issue's `path` names the node (`stages[3].decide[1].next`, `stages[0].collect['dmesg.txt']`)
and `line` is that node's 1-based line in the file.
"""

from __future__ import annotations

import difflib
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from runbook import derived, templating
from runbook.parsers import registry
from runbook.remedies import kinds
from runbook.signatures import ROLES
from runbook.spec.models import END, ROOT_CAUSES, Rule, Runbook, Stage

__all__ = ["Issue", "check", "index_path", "key_path", "names_of", "suggest"]

Kind = Literal["syntax", "semantics", "expression"]
Severity = Literal["error", "warning"]

_KIND_ORDER = {"syntax": 0, "semantics": 1, "expression": 2}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: what a terminal would act on or break a line at: escape sequences, carriage returns, \v
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """`text` with control characters written as escapes (`\\x1b`, `\\n`): an issue quotes
    values from the file, and one line on a terminal must stay one line and inert."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


@dataclass(frozen=True)
class Issue:
    """One problem: `FILE:LINE: [warning: ]PATH: MESSAGE`."""

    kind: Kind
    path: str
    line: int
    message: str
    severity: Severity = "error"
    file: str = "<string>"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: "
        if self.severity == "warning":
            where += "warning: "
        return printable(where + (f"{self.path}: " if self.path else "") + self.message)


def key_path(path: str, key: str) -> str:
    """`stages[0]` + `when` -> `stages[0].when`; keys that are not identifiers are quoted:
    `stages[0].collect['cgroup/memory.events']`."""
    if _IDENTIFIER.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def index_path(path: str, index: int) -> str:
    return f"{path}[{index}]"


def suggest(word: str, known: Iterable[str], *, listing: str = "expected one of") -> str:
    """` (did you mean 'x'?)`, or a listing of what is known, for the end of a message."""
    known = sorted(set(known))
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    if close:
        return f" (did you mean '{close[0]}'?)"
    if not known:
        return ""
    return f" ({listing}: {', '.join(known)})"


def sort_issues(issues: Iterable[Issue]) -> list[Issue]:
    """Grouped syntax, semantics, expressions; by line within each group."""
    return sorted(issues, key=lambda i: (_KIND_ORDER[i.kind], i.line, i.path))


# -- semantics and expressions over a (possibly partial) model ------------------------------------


def check(runbook: Runbook, lines: Mapping[str, int], file: str = "<string>") -> list[Issue]:
    """The semantics and expression issues of a model the loader built; `lines` maps each node's
    path to its line (the loader records one for every node it read)."""
    return _Checker(runbook, lines, file).run()


def names_of(runbook: Runbook, *, strict: bool = False) -> templating.Names:
    """What `runbook`'s templates and expressions may read (templating.Names): its variables,
    the facts of the parsers its stages run, the facts its stages derive."""
    return templating.Names(
        variables=frozenset(runbook.vars),
        facts=frozenset(name for stage in runbook.stages for name in stage.parse if name),
        derived=frozenset(d.name for stage in runbook.stages for d in stage.derive if d.name),
        strict=strict,
    )


class _Checker:
    def __init__(self, runbook: Runbook, lines: Mapping[str, int], file: str) -> None:
        self.runbook = runbook
        self.lines = lines
        self.file = file
        self.issues: list[Issue] = []
        self.stage_ids = [s.id for s in runbook.stages]
        self.index: dict[str, int] = {}
        for position, stage_id in enumerate(self.stage_ids):
            if stage_id:  # "" is the loader's placeholder for a stage it could not read
                self.index.setdefault(stage_id, position)
        self.remedy_ids = {r.id for r in runbook.remedies if r.id}
        self.proposed: set[str] = set()
        #: what its templates may read: a derived fact outside these would be missing on
        #: every node (templating.Names)
        self.names = names_of(runbook)

    # -- reporting --------------------------------------------------------------------------

    def line(self, path: str) -> int:
        """The line of `path`, or of the nearest enclosing node the loader recorded."""
        while path:
            if path in self.lines:
                return self.lines[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return self.lines.get("", 1)

    def report(self, kind: Kind, path: str, message: str, severity: Severity = "error") -> None:
        self.issues.append(Issue(kind, path, self.line(path), message, severity, self.file))

    def semantic(self, path: str, message: str) -> None:
        self.report("semantics", path, message)

    def warn(self, path: str, message: str) -> None:
        self.report("semantics", path, message, "warning")

    def expression(self, path: str, source: str | None) -> None:
        if source is not None:
            problem = templating.check_expression(source, self.names)
            if problem:
                self.report("expression", path, f"expression does not compile: {problem}")

    def template(self, path: str, source: str | None) -> None:
        if source is not None:
            problem = templating.check_template(source, self.names)
            if problem:
                self.report("expression", path, f"template does not compile: {problem}")

    def item_path(self, path: str, index: int) -> str:
        """`parse: dmesg` and `parse: [dmesg]` both become a tuple; name the node that was
        written."""
        item = index_path(path, index)
        return item if item in self.lines else path

    # -- the checks -------------------------------------------------------------------------

    def run(self) -> list[Issue]:
        self.expression("surfaced_as", self.runbook.surfaced_as)
        self.check_stage_ids()
        known_parsers = registry.names()
        collected: dict[str, tuple[str, str]] = {}  # bundle file -> (command, path)
        for position, stage in enumerate(self.runbook.stages):
            path = index_path("stages", position)
            self.expression(key_path(path, "when"), stage.when)
            if stage.skip_reason and not stage.when:
                self.warn(
                    key_path(path, "skip_reason"),
                    "the stage has no `when`, so it is never skipped: the reason is never shown",
                )
            derive_path = key_path(path, "derive")
            for number, fact in enumerate(stage.derive):
                where = key_path(derive_path, fact.name)
                if where not in self.lines:
                    where = index_path(derive_path, number)
                if not fact.name.isidentifier():
                    self.semantic(where, f"'{fact.name}' is not a valid fact name (an identifier)")
                elif fact.expression is None and fact.name not in derived.names():
                    self.semantic(
                        where,
                        f"no derived fact named '{fact.name}' (runbook/derived.py)"
                        + suggest(fact.name, derived.names(), listing="known"),
                    )
                self.expression(where, fact.expression)
            for item in stage.collect:
                self.check_collect(key_path(key_path(path, "collect"), item.name), item.command)
                earlier = collected.setdefault(item.name, (item.command, path))
                if earlier[0] != item.command:
                    self.semantic(
                        key_path(key_path(path, "collect"), item.name),
                        f"bundle file '{item.name}' is already collected by {earlier[1]} with "
                        "another command; a bundle holds one file per name",
                    )
            for number, name in enumerate(stage.parse):
                if name and name not in known_parsers:
                    self.semantic(
                        self.item_path(key_path(path, "parse"), number),
                        f"no parser named '{name}'" + suggest(name, known_parsers, listing="known"),
                    )
            self.check_rules(stage, key_path(path, "decide"))
        self.check_remedies()
        self.check_graph()
        return self.issues

    def check_stage_ids(self) -> None:
        first: dict[str, int] = {}
        for position, stage_id in enumerate(self.stage_ids):
            path = key_path(index_path("stages", position), "id")
            if not stage_id:
                continue
            if stage_id == END:
                self.semantic(path, f"'{END}' is reserved: `next: {END}` ends the walk")
            elif stage_id in first:
                self.duplicate(path, "stage", stage_id, index_path("stages", first[stage_id]))
            first.setdefault(stage_id, position)

    def duplicate(self, path: str, what: str, name: str, first: str) -> None:
        self.semantic(
            path, f"duplicate {what} id '{name}' (first used by {first}, line {self.line(first)})"
        )

    def check_collect(self, path: str, command: str) -> None:
        self.template(path, command)
        quoted = _quoted_substitution(command)
        if quoted is not None:
            substitution, quote = quoted
            self.warn(
                path,
                f"{substitution} is inside {quote} quotes: templating shell-quotes every value "
                "itself, so quoting it again garbles the value (literal quote marks, or words "
                "split at spaces); write it without the quotes",
            )

    def check_cause(self, path: str, cause: str | None) -> None:
        if cause is not None and cause not in ROOT_CAUSES:
            self.semantic(
                path,
                f"'{cause}' is not a root cause" + suggest(cause, ROOT_CAUSES, listing="known"),
            )

    def check_rules(self, stage: Stage, path: str) -> None:
        always_routes: int | None = None  # index of the first rule that always routes
        for number, rule in enumerate(stage.decide):
            rule_path = index_path(path, number)
            if always_routes is not None:
                self.warn(
                    rule_path,
                    f"rule is never evaluated: decide[{always_routes}] above has no `when` and "
                    "always routes",
                )
            elif rule.when is None and (rule.next is not None or rule.conclude is not None):
                always_routes = number
            self.expression(key_path(rule_path, "when"), rule.when)
            self.expression(key_path(rule_path, "evidence"), rule.evidence)
            self.template(key_path(rule_path, "finding"), rule.finding)
            self.check_cause(key_path(rule_path, "cause"), rule.cause)
            if rule.role is not None and rule.role not in ROLES:
                self.semantic(
                    key_path(rule_path, "role"),
                    f"'{rule.role}' is not a role" + suggest(rule.role, ROLES, listing="known"),
                )
            self.check_cause(key_path(rule_path, "conclude"), rule.conclude)
            if rule.next is not None and rule.conclude is not None:
                self.semantic(
                    key_path(rule_path, "next"),
                    "a rule routes with `next` or ends with `conclude`, not both",
                )
            if rule.next is not None and rule.next != END and rule.next not in self.index:
                self.semantic(
                    key_path(rule_path, "next"),
                    f"no stage named '{rule.next}'"
                    + suggest(rule.next, [*self.index, END], listing="stages"),
                )
            for number_out, out in enumerate(rule.rule_out):
                out_path = self.item_path(key_path(rule_path, "rule_out"), number_out)
                self.check_cause(key_path(out_path, "cause"), out.cause or None)
                self.template(key_path(out_path, "because"), out.because)
            for number_p, remedy_id in enumerate(rule.propose):
                self.proposed.add(remedy_id)
                if remedy_id and remedy_id not in self.remedy_ids:
                    where = self.item_path(key_path(rule_path, "propose"), number_p)
                    if self.remedy_ids:
                        self.semantic(
                            where,
                            f"no remedy named '{remedy_id}' under remedies:"
                            + suggest(remedy_id, self.remedy_ids, listing="remedies"),
                        )
                    else:
                        self.semantic(
                            where, f"no remedy named '{remedy_id}': the runbook has no remedies:"
                        )

    def check_remedies(self) -> None:
        first: dict[str, int] = {}
        for position, remedy in enumerate(self.runbook.remedies):
            path = index_path("remedies", position)
            if remedy.id and remedy.id in first:
                self.duplicate(
                    key_path(path, "id"),
                    "remedy",
                    remedy.id,
                    index_path("remedies", first[remedy.id]),
                )
            first.setdefault(remedy.id, position)
            if remedy.kind and kinds.find(remedy.kind) is None:
                self.semantic(
                    key_path(path, "kind"),
                    f"'{remedy.kind}' is not a proposal kind"
                    + suggest(remedy.kind, kinds.names(), listing="known"),
                )
            self.template(key_path(path, "summary"), remedy.summary)
            for name, value in remedy.params.items():
                self.template(key_path(key_path(path, "params"), name), value)
            if remedy.id and remedy.id not in self.proposed and first[remedy.id] == position:
                self.warn(path, f"remedy '{remedy.id}' is never proposed by any rule")

    # -- the stage graph --------------------------------------------------------------------

    def check_graph(self) -> None:
        edges = _stage_edges(self.runbook.stages, self.index)
        found: set[frozenset[int]] = set()
        for source, targets in enumerate(edges):
            for target, next_path in targets:
                if next_path is None or target > source:
                    continue  # fall-through and forward edges cannot close a cycle alone
                route = _shortest_path(edges, target, source)
                if route is None:
                    continue
                members = frozenset(route)
                if members in found:
                    continue
                found.add(members)
                names = " -> ".join(self.stage_ids[i] or f"stages[{i}]" for i in [*route, target])
                self.semantic(next_path, f"cycle in the stage graph: {names}; a walk must end")
        if not self.runbook.stages:
            return
        reached = _reachable(edges, 0)
        first = self.stage_ids[0]
        for position, stage_id in enumerate(self.stage_ids):
            if position not in reached and stage_id:
                self.warn(
                    index_path("stages", position),
                    f"stage '{stage_id}' is never reached from the first stage '{first}'",
                )


Edge = tuple[int, str | None]  # (target stage index, path of the `next:` or None: fall-through)


def _stage_edges(stages: Sequence[Stage], index: Mapping[str, int]) -> list[list[Edge]]:
    """Where a walk can go from each stage: the `next:` of every rule that can be evaluated, and
    the following stage when the stage can fall through (no rule always routes) or be skipped
    (it has a `when`)."""
    edges: list[list[Edge]] = []
    for position, stage in enumerate(stages):
        out: list[Edge] = []
        falls_through = True
        for number, rule in enumerate(stage.decide):
            target = _route_target(rule)
            if target is not None and target in index:
                next_path = key_path(
                    index_path(key_path(index_path("stages", position), "decide"), number), "next"
                )
                out.append((index[target], next_path))
            if rule.when is None and (rule.conclude is not None or rule.next is not None):
                falls_through = False
                break
        if (falls_through or stage.when is not None) and position + 1 < len(stages):
            out.append((position + 1, None))
        edges.append(out)
    return edges


def _route_target(rule: Rule) -> str | None:
    """The stage a matching rule routes to; `conclude` wins over `next`, as in the conductor."""
    if rule.conclude is not None or rule.next is None or rule.next == END:
        return None
    return rule.next


def _shortest_path(edges: Sequence[Sequence[Edge]], start: int, goal: int) -> list[int] | None:
    previous: dict[int, int] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            route = [goal]
            while route[-1] != start:
                route.append(previous[route[-1]])
            return route[::-1]
        for target, _ in edges[node]:
            if target not in previous:
                previous[target] = node
                queue.append(target)
    return None


def _reachable(edges: Sequence[Sequence[Edge]], start: int) -> set[int]:
    seen = {start}
    queue = deque([start])
    while queue:
        for target, _ in edges[queue.popleft()]:
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return seen


# -- shell quoting in collect commands -------------------------------------------------------------

_JINJA_CLOSE = {"{{": "}}", "{%": "%}", "{#": "#}"}


def _quoted_substitution(command: str) -> tuple[str, str] | None:
    """The first `{{ … }}` that sits inside shell quotes, and which quotes, or None.

    A small shell-quote scanner over the template source: Jinja blocks are skipped as units,
    so `printf '%s' {{ x }}` is fine and `cat '{{ dir }}/x'` is not."""
    quote: str | None = None
    position = 0
    while position < len(command):
        pair = command[position : position + 2]
        if pair in _JINJA_CLOSE:
            end = command.find(_JINJA_CLOSE[pair], position + 2)
            end = len(command) if end < 0 else end + 2
            if pair == "{{" and quote is not None:
                substitution = " ".join(command[position:end].split())
                return substitution, "single" if quote == "'" else "double"
            position = end
            continue
        char = command[position]
        if char == "\\" and quote != "'":
            position += 2
            continue
        if quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
        position += 1
    return None
