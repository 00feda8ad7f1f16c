"""The only Jinja2 environments of nccl-runbook: sandboxed, strict, and shell-quoting.

Three uses, three environments over one hardened sandbox:

* **commands** (`render_command`): every `{{ value }}` reaches the shell as exactly one inert
  word — the environment's `finalize` runs `shlex.quote` on each substituted value, so a variable
  holding `$(touch /tmp/x); rm -rf /` is passed as that literal string. Filters that build shell
  text on purpose (`shjoin`) return `ShellSafe`, which `finalize` leaves alone; no value from a
  variable, an inventory or evidence can become `ShellSafe`.
* **text** (`render_text`): findings and summaries for humans; no quoting, still sandboxed.
* **expressions** (`evaluate`): Ansible-style `when:` conditions over `facts` and `vars`;
  a missing fact is undefined, falsy and false in comparisons (MissingFact), so
  `facts.x.y > 0` on a stage that collected nothing is False rather than a crash; other
  errors raise TemplateError.

The sandbox refuses attribute tricks (`__class__`, `__globals__`, `mro`), is immutable (no
`.append`/`.update` on facts), and drops the globals `lipsum`, `cycler`, `joiner` and `namespace`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import ChainableUndefined, StrictUndefined, nodes
from jinja2.exceptions import SecurityError
from jinja2.lexer import describe_token
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from runbook.errors import TemplateError

__all__ = [
    "ShellSafe",
    "check_expression",
    "check_template",
    "evaluate",
    "render_command",
    "render_text",
    "shell_quote",
]


class ShellSafe(str):
    """Shell text that templating built itself and already quoted; never from user data."""

    __slots__ = ()


def shell_quote(value: Any) -> str:
    """One inert shell word for any value (None becomes the empty word)."""
    if isinstance(value, ShellSafe):
        return str(value)
    if value is None:
        return "''"
    if isinstance(value, bool):
        return "true" if value else "false"
    return shlex.quote(str(value))


def _shjoin(values: Iterable[Any], sep: str = " ") -> ShellSafe:
    """`{{ paths | shjoin }}`: several words, each quoted on its own."""
    if isinstance(values, str | bytes):
        values = [values]
    return ShellSafe(sep.join(shell_quote(v) for v in values))


def _regex_search(value: Any, pattern: str, group: int = 0) -> str | None:
    match = re.search(pattern, str(value), re.MULTILINE)
    return match.group(group) if match else None


def _regex_findall(value: Any, pattern: str) -> list[Any]:
    return re.findall(pattern, str(value), re.MULTILINE)


def _human_bytes(value: Any, precision: int = 1) -> str:
    """1.5 GiB style (binary units, as the kernel and kubectl use)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(number) < 1024 or unit == "TiB":
            return f"{number:.0f} B" if unit == "B" else f"{number:.{precision}f} {unit}"
        number /= 1024
    raise AssertionError("unreachable")


def _gib(value: Any) -> float:
    return float(value) / 1024**3


def _test_search(value: Any, pattern: str) -> bool:
    return value is not None and re.search(pattern, str(value), re.MULTILINE) is not None


def _test_match(value: Any, pattern: str) -> bool:
    return value is not None and re.match(pattern, str(value)) is not None


_DROPPED_GLOBALS = ("lipsum", "cycler", "joiner", "namespace")


def _make_env(**kwargs: Any) -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(autoescape=False, keep_trailing_newline=False, **kwargs)
    for name in _DROPPED_GLOBALS:
        env.globals.pop(name, None)
    env.filters.update(
        shjoin=_shjoin,
        regex_search=_regex_search,
        regex_findall=_regex_findall,
        human_bytes=_human_bytes,
        gib=_gib,
    )
    env.tests.update(search=_test_search, match=_test_match)
    return env


_COMMAND_ENV = _make_env(undefined=StrictUndefined, finalize=shell_quote)
_TEXT_ENV = _make_env(undefined=StrictUndefined)


class MissingFact(ChainableUndefined):
    """Undefined in conditions: chainable (`facts.a.b.c`), falsy, and false in every ordering
    comparison, so `facts.cgroup.oom_kills > 0` on a stage that collected nothing is simply
    False instead of a TypeError."""

    __slots__ = ()

    def __lt__(self, other: Any) -> bool:  # type: ignore[override]
        return False

    def __le__(self, other: Any) -> bool:  # type: ignore[override]
        return False

    def __gt__(self, other: Any) -> bool:  # type: ignore[override]
        return False

    def __ge__(self, other: Any) -> bool:  # type: ignore[override]
        return False


_EXPR_ENV = _make_env(undefined=MissingFact)


@lru_cache(maxsize=1024)
def _command_template(source: str) -> jinja2.Template:
    return _COMMAND_ENV.from_string(source)


@lru_cache(maxsize=1024)
def _text_template(source: str) -> jinja2.Template:
    return _TEXT_ENV.from_string(source)


@lru_cache(maxsize=1024)
def _expression(source: str) -> Callable[..., Any]:
    return _EXPR_ENV.compile_expression(source, undefined_to_none=False)


def _describe(exc: Exception) -> str:
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"syntax error: {exc.message}"
    if isinstance(exc, jinja2.UndefinedError):
        return f"undefined: {exc.message}"
    if isinstance(exc, SecurityError):
        return f"refused by the sandbox: {exc}"
    return f"{type(exc).__name__}: {exc}"


def render_command(source: str, variables: Mapping[str, Any]) -> str:
    """Render a command template; every substituted value is shell-quoted."""
    try:
        return _command_template(source).render(variables)
    except Exception as exc:  # Jinja raises many types; each becomes one TemplateError
        raise TemplateError(f"command template {source!r}: {_describe(exc)}") from exc


def render_text(source: str, variables: Mapping[str, Any]) -> str:
    try:
        return _text_template(source).render(variables)
    except Exception as exc:
        raise TemplateError(f"text template {source!r}: {_describe(exc)}") from exc


def evaluate(source: str, variables: Mapping[str, Any]) -> Any:
    """Evaluate an expression; an undefined result comes back as None."""
    try:
        result = _expression(source)(**variables)
    except Exception as exc:
        raise TemplateError(f"expression {source!r}: {_describe(exc)}") from exc
    if isinstance(result, jinja2.Undefined):
        return None
    return result


def _unknown_names(tree: nodes.Node) -> str | None:
    """What Jinja's code generator would refuse: a filter or test nobody registered. Checked on
    the syntax tree, because generating code for every template of a runbook costs more than
    the rest of a run (templates are compiled when first rendered, most never are)."""
    for node in (tree, *tree.find_all((nodes.Filter, nodes.Test))):
        if isinstance(node, nodes.Filter) and node.name not in _TEXT_ENV.filters:
            return f"syntax error: No filter named {node.name!r}."
        if isinstance(node, nodes.Test) and node.name not in _TEXT_ENV.tests:
            return f"syntax error: No test named {node.name!r}."
    return None


@lru_cache(maxsize=4096)
def check_template(source: str) -> str | None:
    """The problem in a template (syntax, or an unknown filter or test), or None."""
    try:
        tree = _TEXT_ENV.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        return _describe(exc)
    return _unknown_names(tree)


@lru_cache(maxsize=4096)
def check_expression(source: str) -> str | None:
    """The problem in an expression (syntax, or an unknown filter or test), or None."""
    try:
        parser = Parser(_EXPR_ENV, source, state="variable")
        tree = parser.parse_expression()
        if not parser.stream.eos:
            token = parser.stream.current
            raise jinja2.TemplateSyntaxError(
                f"unexpected {describe_token(token)!r}", token.lineno, None, None
            )
    except jinja2.TemplateSyntaxError as exc:
        return _describe(exc)
    return _unknown_names(tree)
