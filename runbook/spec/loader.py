"""YAML -> Runbook model, keeping the line of every node so each issue can say where it is.

Pure except `load_file`. `read` never raises: it builds as much of the model as the file allows,
reporting a *syntax* issue (inspect.Issue) for each node it cannot use, then hands the model to
`inspect.check` for semantics and expressions. `load_text` raises SpecError carrying every issue
when any of them is an error.

Defaults: a runbook's and a stage's `title` default to its id, a remedy's too; `timeout` defaults
to 30 seconds; `parse` and `propose` may be one name or a list; `rule_out` one mapping or a list;
an optional key given as null (`decide:` with nothing under it) is as if left out when it holds a
collection, and an error when it holds a single value.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runbook.bundle import safe_member_name
from runbook.errors import BundleError, SpecError
from runbook.spec.inspect import Issue, check, index_path, key_path, sort_issues, suggest
from runbook.spec.models import (
    DEFAULT_TIMEOUT,
    Collect,
    Derive,
    Remedy,
    Rule,
    RuleOut,
    Runbook,
    Stage,
)

__all__ = ["SHIPPED_DIR", "Reading", "load_file", "load_text", "read", "resolve", "shipped"]

log = logging.getLogger(__name__)

#: where the shipped runbooks live: `runbook/runbooks/<id>.yaml`
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "runbooks"

_ID = re.compile(r"[a-z0-9][a-z0-9-]*\Z")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED_VARS = ("facts", "vars", "results")

RUNBOOK_KEYS = ("id", "title", "description", "vars", "surfaced_as", "stages", "remedies")
STAGE_KEYS = (
    "id", "title", "description", "timeout", "when", "skip_reason", "collect", "parse",
    "derive", "match", "decide",
)  # fmt: skip
#: how a stage's rules are matched: every rule whose `when` holds, or only the first
MATCH_MODES = ("all", "first")
RULE_KEYS = (
    "when", "else", "finding", "cause", "role", "evidence", "next", "conclude", "propose",
    "rule_out",
)  # fmt: skip
RULE_OUT_KEYS = ("cause", "because")
REMEDY_KEYS = ("id", "kind", "title", "summary", "playbook", "params")
#: keys that make a stage a change to the node, which only `remedies:` may declare
_REMEDY_ONLY_KEYS = ("remedy", "playbook")


# -- YAML with lines ----------------------------------------------------------------------------


class LineMap(dict[str, Any]):
    """A YAML mapping that remembers its line, each key's line and each value's line."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[str, int] = {}
        self.value_lines: dict[str, int] = {}
        self.problems: list[tuple[str | None, int, str]] = []  # (key, line, message)


class LineSeq(list[Any]):
    """A YAML sequence that remembers its line and each item's line."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.item_lines: list[int] = []


# libyaml's parser when PyYAML was built with it (the common case: ~10x faster to load a
# runbook); the pure-Python one otherwise. Both keep node marks, so lines are the same.
_SafeBase: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(_SafeBase):  # type: ignore[misc,valid-type]
    """SafeLoader whose mappings and sequences are LineMap / LineSeq."""


def _expect(node: yaml.Node, kind: type[yaml.Node], what: str) -> None:
    """A tag can put a scalar where a collection is built (`!!map 0`): a YAML error, as
    PyYAML's own constructors say it."""
    if not isinstance(node, kind):
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"expected a {what}, but found a {getattr(node, 'id', 'node')}",
            node.start_mark,
        )


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Iterator[LineMap]:
    _expect(node, yaml.MappingNode, "mapping")
    loader.flatten_mapping(node)  # `<<: *anchor` merge keys
    data = LineMap(node.start_mark.line + 1)
    yield data
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
            data.problems.append((None, line, f"key '{shown}' is not a string; quote it"))
            continue
        if key in data:
            data.problems.append(
                (key, line, f"duplicate key '{key}' (first at line {data.key_lines[key]})")
            )
            continue
        data[key] = loader.construct_object(value_node, deep=True)
        data.key_lines[key] = line
        data.value_lines[key] = value_node.start_mark.line + 1


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> Iterator[LineSeq]:
    _expect(node, yaml.SequenceNode, "sequence")
    data = LineSeq(node.start_mark.line + 1)
    yield data
    for item in node.value:
        data.append(loader.construct_object(item, deep=True))
        data.item_lines.append(item.start_mark.line + 1)


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


def _parse_yaml(text: str) -> Any:
    loader = _LineLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_issue(exc: yaml.YAMLError, file: str) -> Issue:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else 1
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem:
        message = f"invalid YAML: {problem}" + (f" ({context})" if context else "")
    else:
        message = f"invalid YAML: {' '.join(str(exc).split())}"
    return Issue("syntax", "", line, message, file=file)


# -- reading into the model ---------------------------------------------------------------------


@dataclass
class Reading:
    """What `read` made of a file: the model (None when the YAML could not be used at all),
    every issue, and the line of every node by path."""

    runbook: Runbook | None
    issues: list[Issue]
    lines: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]


#: the longest runbook read, in characters: the shipped one is 30 KB; reading YAML costs about
#: 60 bytes of memory per byte of text, so a 20 MB file of keys would take over a gigabyte
MAX_RUNBOOK_CHARS = 4 * 1024 * 1024


def read(text: str, path: str = "<string>") -> Reading:
    """Read a runbook's YAML into the model, collecting every issue; never raises."""
    if len(text) > MAX_RUNBOOK_CHARS:
        message = (
            f"{len(text)} characters is more than a runbook may hold ({MAX_RUNBOOK_CHARS}); "
            "is this the right file?"
        )
        return Reading(None, [Issue("syntax", "", 1, message, file=path)])
    try:
        data = _parse_yaml(text)
    except yaml.YAMLError as exc:
        return Reading(None, [_yaml_issue(exc, path)])
    except RecursionError:
        # libyaml stops flow nesting at 1000 levels, but the constructors recurse per level
        message = "invalid YAML: nested too deeply to be a runbook"
        return Reading(None, [Issue("syntax", "", 1, message, file=path)])
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        # PyYAML's safe constructors fail this way on an explicit tag its value does not fit
        # (`!!int x`, `!!bool x`, `!!timestamp x`)
        message = f"invalid YAML: a tagged value cannot be built ({type(exc).__name__}: {exc})"
        return Reading(None, [Issue("syntax", "", 1, message, file=path)])
    builder = _Builder(path)
    runbook = builder.runbook(data)
    issues = builder.issues
    if runbook is not None:
        issues += check(runbook, builder.lines, path)
    return Reading(runbook, sort_issues(issues), builder.lines)


def inspect_text(text: str, path: str = "<string>") -> list[Issue]:
    """Every issue in a runbook's YAML text, errors and warnings, grouped by kind."""
    return read(text, path).issues


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


class _Builder:
    """Builds the model leniently: a node it cannot use is reported and left at its default."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.issues: list[Issue] = []
        self.lines: dict[str, int] = {}

    def syntax(self, path: str, line: int, message: str) -> None:
        self.issues.append(Issue("syntax", path, line, message, file=self.file))

    def wrong_type(self, path: str, line: int, expected: str, value: Any) -> None:
        self.syntax(path, line, f"must be {expected}, not {_describe(value)}")

    def mapping(
        self,
        value: Any,
        path: str,
        line: int,
        keys: Sequence[str] | None,
        *,
        what: str,
        also: Sequence[str] = (),
    ) -> LineMap | None:
        """`value` as a mapping with only `keys` (and `also`, which the caller handles; None:
        any key); records the line of every key's value."""
        if not isinstance(value, LineMap):
            self.wrong_type(path, line, what, value)
            return None
        self.lines[path] = value.line
        for key, problem_line, message in value.problems:
            self.syntax(key_path(path, key) if key else path, problem_line, message)
        for key in value:
            self.lines[key_path(path, key)] = value.value_lines[key]
            if keys is not None and key not in keys and key not in also:
                self.syntax(
                    key_path(path, key),
                    value.key_lines[key],
                    f"unknown key '{key}'" + suggest(key, keys),
                )
        return value

    def present(self, data: LineMap, key: str, path: str, *, required: bool = False) -> bool:
        if key in data:
            return True
        if required:
            self.syntax(path, data.line, f"missing required key '{key}'")
        return False

    def text(self, data: LineMap, key: str, path: str, *, required: bool = False) -> str | None:
        if not self.present(data, key, path, required=required):
            return None
        value = data[key]
        if not isinstance(value, str):
            self.wrong_type(key_path(path, key), data.value_lines[key], "a string", value)
            return None
        return value

    def ident(self, data: LineMap, key: str, path: str, *, required: bool = True) -> str | None:
        value = self.text(data, key, path, required=required)
        if value is not None and not _ID.match(value):
            self.syntax(
                key_path(path, key),
                data.value_lines[key],
                f"'{value}' is not a valid id: use lowercase letters, digits and '-', "
                "starting with a letter or digit (like 'kernel-logs')",
            )
        return value

    def names(self, data: LineMap, key: str, path: str) -> tuple[str, ...]:
        """One name or a list of names."""
        if key not in data or data[key] is None:
            return ()
        value, here, line = data[key], key_path(path, key), data.value_lines[key]
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, LineSeq):
            self.wrong_type(here, line, "a name or a list of names", value)
            return ()
        result = []
        for number, (item, item_line) in enumerate(zip(value, value.item_lines, strict=True)):
            self.lines[index_path(here, number)] = item_line
            if isinstance(item, str):
                result.append(item)
            else:  # "" keeps the later names at their index; inspect skips it
                self.wrong_type(index_path(here, number), item_line, "a name", item)
                result.append("")
        return tuple(result)

    def string_map(
        self, data: LineMap, key: str, path: str, what: str
    ) -> list[tuple[str, str, int]]:
        """A mapping of names to strings (numbers are taken as their text)."""
        if key not in data or data[key] is None:
            return []
        here = key_path(path, key)
        value = self.mapping(data[key], here, data.value_lines[key], None, what=what)
        if value is None:
            return []
        result = []
        for name, item in value.items():
            line = value.value_lines[name]
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                self.wrong_type(key_path(here, name), line, "a string", item)
                continue
            result.append((name, str(item), line))
        return result

    def items(self, data: LineMap, key: str, path: str, *, what: str) -> list[tuple[Any, str, int]]:
        """A list's items with their paths and lines (null: no items)."""
        if key not in data or data[key] is None:
            return []
        here, value = key_path(path, key), data[key]
        if not isinstance(value, LineSeq):
            self.wrong_type(here, data.value_lines[key], what, value)
            return []
        self.lines[here] = value.line
        result = []
        for number, (item, line) in enumerate(zip(value, value.item_lines, strict=True)):
            self.lines[index_path(here, number)] = line
            result.append((item, index_path(here, number), line))
        return result

    # -- the model --------------------------------------------------------------------------

    def runbook(self, data: Any) -> Runbook | None:
        if data is None:
            self.syntax("", 1, "the file is empty: a runbook is a mapping with `id` and `stages`")
            return None
        line = data.line if isinstance(data, LineMap | LineSeq) else 1
        top = self.mapping(
            data, "", line, RUNBOOK_KEYS, what="a mapping (a runbook has `id`, `stages`, ...)"
        )
        if top is None:
            return None
        self.lines[""] = top.line
        runbook_id = self.ident(top, "id", "") or ""
        stages = tuple(self.stage(*item) for item in self.stage_items(top))
        remedies = tuple(
            self.remedy(*item)
            for item in self.items(top, "remedies", "", what="a list of remedies")
        )
        return Runbook(
            id=runbook_id,
            title=self.text(top, "title", "") or runbook_id,
            stages=stages,
            description=self.text(top, "description", "") or "",
            vars=self.variables(top),
            remedies=remedies,
            surfaced_as=self.text(top, "surfaced_as", ""),
            path=self.file,
        )

    def stage_items(self, top: LineMap) -> list[tuple[Any, str, int]]:
        if not self.present(top, "stages", "", required=True):
            return []
        items = self.items(top, "stages", "", what="a list of stages")
        if not items and isinstance(top["stages"], LineSeq | None):
            self.syntax("stages", top.value_lines["stages"], "must list at least one stage")
        return items

    def variables(self, top: LineMap) -> dict[str, Any]:
        if top.get("vars") is None:
            return {}
        value = self.mapping(
            top["vars"], "vars", top.value_lines["vars"], None, what="a mapping of names to values"
        )
        if value is None:
            return {}
        result: dict[str, Any] = {}
        for name, item in value.items():
            here, line = key_path("vars", name), value.value_lines[name]
            if not _IDENTIFIER.match(name):
                self.syntax(
                    here,
                    value.key_lines[name],
                    f"variable name '{name}' must be an identifier (letters, digits, _)",
                )
                continue
            if name in _RESERVED_VARS:
                self.syntax(
                    here,
                    value.key_lines[name],
                    f"variable name '{name}' is reserved ({', '.join(_RESERVED_VARS)})",
                )
                continue
            if not _plain_value(item):
                self.wrong_type(here, line, "a string, number, boolean or a list of them", item)
                continue
            result[name] = list(item) if isinstance(item, list) else item
        return result

    # A node that is not a mapping still yields a placeholder (id ""), so that every later
    # sibling keeps its index and the paths inspect reports stay those of the file.

    def stage(self, item: Any, path: str, line: int) -> Stage:
        data = self.mapping(
            item, path, line, STAGE_KEYS, what="a mapping (a stage)", also=_REMEDY_ONLY_KEYS
        )
        if data is None:
            return Stage("", "", line=line)
        stage_id = self.ident(data, "id", path) or ""
        for key in _REMEDY_ONLY_KEYS:
            if key in data and (key != "remedy" or data[key] is not False):
                self.issues.append(
                    Issue(
                        "semantics",
                        key_path(path, key),
                        data.key_lines[key],
                        f"stage '{stage_id or path}' changes the node: declare it under "
                        "remedies:, where it needs approval",
                        file=self.file,
                    )
                )
                break
        return Stage(
            id=stage_id,
            title=self.text(data, "title", path) or stage_id,
            collect=tuple(
                Collect(name, command, command_line)
                for name, command, command_line in self.string_map(
                    data, "collect", path, "a mapping of bundle file names to commands"
                )
                if self.bundle_name(name, key_path(key_path(path, "collect"), name), command_line)
            ),
            parse=self.names(data, "parse", path),
            derive=self.derive(data, path),
            decide=tuple(
                self.rule(*rule)
                for rule in self.items(data, "decide", path, what="a list of rules")
            ),
            when=self.text(data, "when", path),
            skip_reason=self.sentence(data, "skip_reason", path),
            timeout=self.timeout(data, path),
            description=self.text(data, "description", path) or "",
            match=self.match(data, path),
            line=data.line,
        )

    def derive(self, data: LineMap, path: str) -> tuple[Derive, ...]:
        """`derive:` as a mapping of names to expressions, or a list whose items are the names
        of facts derived in Python (runbook.derived) or one-entry mappings `{name: expression}`,
        computed in the order written."""
        if not isinstance(data.get("derive"), LineSeq):
            return tuple(
                Derive(name, expression, line)
                for name, expression, line in self.string_map(
                    data,
                    "derive",
                    path,
                    "a mapping of fact names to expressions, or a list of derived fact names",
                )
            )
        result = []
        for item, item_path, line in self.items(data, "derive", path, what="a list"):
            if isinstance(item, str):
                result.append(Derive(item, None, line))
                continue
            if isinstance(item, LineMap) and len(item) == 1:
                ((name, expression),) = item.items()
                if isinstance(expression, str):
                    result.append(Derive(name, expression, item.value_lines[name]))
                    continue
            self.wrong_type(
                item_path,
                line,
                "a derived fact's name, or a mapping of one fact name to an expression",
                item,
            )
        return tuple(result)

    def sentence(self, data: LineMap, key: str, path: str) -> str:
        """A plain sentence for people (not a template: it is shown as written), on one line."""
        value = self.text(data, key, path)
        if value is None:
            return ""
        if any(mark in value for mark in ("{{", "{%", "{#")):
            self.syntax(
                key_path(path, key),
                data.value_lines[key],
                "must be a plain sentence, not a template: it is shown as written",
            )
            return ""
        return " ".join(value.split())

    def flag(self, data: LineMap, key: str, path: str) -> bool:
        value = data.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.issues.append(
                Issue(
                    "syntax",
                    key_path(path, key),
                    data.value_lines[key],
                    f"must be true or false, not {_describe(value)}",
                    file=self.file,
                )
            )
            return False
        return value

    def match(self, data: LineMap, path: str) -> str:
        value = data.get("match")
        if value is None:
            return "all"
        if value not in MATCH_MODES:
            self.issues.append(
                Issue(
                    "syntax",
                    key_path(path, "match"),
                    data.value_lines["match"],
                    f"must be one of {', '.join(MATCH_MODES)}, not {_describe(value)}",
                    file=self.file,
                )
            )
            return "all"
        return str(value)

    def bundle_name(self, name: str, path: str, line: int) -> bool:
        try:
            safe_member_name(name)
        except BundleError:
            self.syntax(
                path, line, f"'{name}' is not a bundle file name: use a relative path without '..'"
            )
            return False
        return True

    def timeout(self, data: LineMap, path: str) -> float:
        if "timeout" not in data:
            return DEFAULT_TIMEOUT
        value = data["timeout"]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            self.syntax(
                key_path(path, "timeout"),
                data.value_lines["timeout"],
                f"must be a positive number of seconds, not {_describe(value)}",
            )
            return DEFAULT_TIMEOUT
        return float(value)

    def rule(self, item: Any, path: str, line: int) -> Rule:
        data = self.mapping(item, path, line, RULE_KEYS, what="a mapping (a rule)")
        if data is None:
            return Rule(line=line)
        return Rule(
            when=self.text(data, "when", path),
            finding=self.text(data, "finding", path),
            cause=self.text(data, "cause", path),
            role=self.text(data, "role", path),
            otherwise=self.flag(data, "else", path),
            evidence=self.text(data, "evidence", path),
            next=self.text(data, "next", path),
            conclude=self.text(data, "conclude", path),
            propose=self.names(data, "propose", path),
            rule_out=self.rule_outs(data, path),
            line=data.line,
        )

    def rule_outs(self, data: LineMap, path: str) -> tuple[RuleOut, ...]:
        if data.get("rule_out") is None:
            return ()
        value, here = data["rule_out"], key_path(path, "rule_out")
        if isinstance(value, LineSeq):
            entries = self.items(data, "rule_out", path, what="a list")
        else:
            entries = [(value, here, data.value_lines["rule_out"])]
        result = []
        for entry, entry_path, entry_line in entries:
            out = self.mapping(
                entry,
                entry_path,
                entry_line,
                RULE_OUT_KEYS,
                what="a mapping with `cause` and `because`",
            )
            if out is None:
                result.append(RuleOut("", ""))
                continue
            cause = self.text(out, "cause", entry_path, required=True)
            because = self.text(out, "because", entry_path, required=True)
            result.append(RuleOut(cause or "", because or ""))
        return tuple(result)

    def remedy(self, item: Any, path: str, line: int) -> Remedy:
        data = self.mapping(item, path, line, REMEDY_KEYS, what="a mapping (a remedy)")
        if data is None:
            return Remedy("", "", "", line=line)
        remedy_id = self.ident(data, "id", path) or ""
        playbook = self.text(data, "playbook", path)
        if playbook is not None and not _relative(playbook):
            self.syntax(
                key_path(path, "playbook"),
                data.value_lines["playbook"],
                f"'{playbook}' must be a relative path under playbooks/",
            )
        return Remedy(
            id=remedy_id,
            kind=self.text(data, "kind", path, required=True) or "",
            title=self.text(data, "title", path) or remedy_id,
            summary=self.text(data, "summary", path) or "",
            playbook=playbook,
            params={
                name: value
                for name, value, _ in self.string_map(
                    data, "params", path, "a mapping of names to templates"
                )
            },
            line=data.line,
        )


def _plain_value(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain_value(v) and not isinstance(v, list) for v in value)
    return isinstance(value, str | int | float | bool)


def _relative(path: str) -> bool:
    parts = Path(path).parts
    return bool(parts) and not Path(path).is_absolute() and ".." not in parts


# -- loading -------------------------------------------------------------------------------------


def load_text(text: str, path: str = "<string>") -> Runbook:
    """The runbook in `text`; SpecError carrying every issue if any is an error."""
    reading = read(text, path)
    errors = reading.errors
    if errors or reading.runbook is None:
        issues: list[object] = [*reading.issues]
        count = f"{len(errors)} error{'s' if len(errors) != 1 else ''}"
        raise SpecError(
            f"{path} is not a valid runbook ({count}; `runbook validate {path}` lists them all): "
            f"{errors[0]}",
            issues=issues,
        )
    for issue in reading.issues:
        log.warning("%s", issue)
    return reading.runbook


def load_file(path: str | Path) -> Runbook:
    """Read and load a runbook file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SpecError(f"cannot read runbook {path}: {reason}") from None
    return load_text(text, str(path))


def shipped() -> list[str]:
    """The ids of the runbooks shipped in the package."""
    if not SHIPPED_DIR.is_dir():
        return []
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))


def resolve(ref: str) -> Path:
    """A RUNBOOK argument as a file: a shipped runbook id, or a path to a YAML file (a shipped
    id wins over a file of the same name in the current directory)."""
    if _ID.match(ref):
        candidate = SHIPPED_DIR / f"{ref}.yaml"
        if candidate.is_file():
            return candidate
    path = Path(ref)
    if path.is_file():
        return path
    ids = shipped()
    listing = ", ".join(ids) if ids else "none"
    raise SpecError(f"no runbook '{ref}': not a shipped runbook id ({listing}) nor a YAML file")
