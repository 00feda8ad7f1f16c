"""The only Jinja2 environments of nccl-runbook: sandboxed, strict, and shell-quoting.

Three uses, three environments over one hardened sandbox:

* **commands** (`render_command`): every `{{ value }}` reaches the shell as exactly one inert
  word — the environment's `finalize` runs `shlex.quote` on each substituted value, so a variable
  holding `$(touch /tmp/x); rm -rf /` is passed as that literal string. Filters that build shell
  text on purpose (`shjoin`) return `ShellSafe`, which `finalize` leaves alone; no value from a
  variable, an inventory or evidence can become `ShellSafe`.
* **text** (`render_text`, `render_message`): findings, reasons and summaries for humans; no
  quoting, still sandboxed. A missing fact renders as nothing (MissingFact: empty, iterates
  empty, falsy), so a node that lacks some evidence (no node.json on an SSH node) still gets
  its message; `render_message` never returns template text: if a message still cannot be
  rendered, the caller gets a plain sentence of what was missing (`unavailable`) instead.
* **expressions** (`evaluate`): Ansible-style `when:` conditions over `facts` and `vars`;
  a missing fact is undefined, falsy and false in comparisons (MissingFact), so
  `facts.x.y > 0` on a stage that collected nothing is False rather than a crash; other
  errors raise TemplateError.

The sandbox refuses attribute tricks (`__class__`, `__globals__`, `mro`), is immutable (no
`.append`/`.update` on facts), drops the globals `lipsum`, `cycler`, `joiner` and `namespace`,
and reserves the name `self`. Jinja's own sandbox bounds `range()` only; ours also refuses, before
it allocates anything, one operation that would build more than MAX_BUILT characters or items:
`'x' * 10**10`, `2 ** 10**9`, a printf or format width of a billion (`'%*d'`, `'{:>N}'`,
`|format`), padding (`center`, `ljust`, `rjust`, `zfill`, `expandtabs`, `|center`, `|indent`),
`replace` and `join` whose result would be that large, and `|batch`/`|slice` counts. (What it
does not bound: work compounded over many operations, such as nested loops over `range()` in
a `{% for %}` template; runbooks are code and are reviewed as such.)
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
import shlex
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NoReturn

import jinja2
from jinja2 import ChainableUndefined, StrictUndefined, nodes
from jinja2.environment import TemplateExpression
from jinja2.exceptions import SecurityError
from jinja2.filters import FILTERS
from jinja2.lexer import describe_token
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from runbook import template_cache
from runbook.errors import TemplateError

__all__ = [
    "CONTEXT_NAMES",
    "Names",
    "ShellSafe",
    "check_expression",
    "check_template",
    "evaluate",
    "missing_facts",
    "prepare",
    "render_command",
    "render_message",
    "render_text",
    "shell_quote",
    "unavailable",
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


def _human_bytes(value: Any, precision: int = 1) -> Any:
    """1.5 GiB style (binary units, as the kernel and kubectl use); a missing fact stays
    missing (renders as nothing)."""
    if isinstance(value, jinja2.Undefined):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(number) < 1024 or unit == "TiB":
            return f"{number:.0f} B" if unit == "B" else f"{number:.{precision}f} {unit}"
        number /= 1024
    raise AssertionError("unreachable")


def _gib(value: Any) -> Any:
    if isinstance(value, jinja2.Undefined):
        return value
    return float(value) / 1024**3


def _dictsort(value: Any, *args: Any, **kwargs: Any) -> Any:
    """Jinja's `dictsort`; a missing mapping sorts to no items."""
    if isinstance(value, jinja2.Undefined):
        return []
    return FILTERS["dictsort"](value, *args, **kwargs)


def _test_search(value: Any, pattern: str) -> bool:
    return value is not None and re.search(pattern, str(value), re.MULTILINE) is not None


def _test_match(value: Any, pattern: str) -> bool:
    return value is not None and re.match(pattern, str(value)) is not None


_DROPPED_GLOBALS = ("lipsum", "cycler", "joiner", "namespace")

#: the most characters (or list items, or bits of an integer) one operation in a template may
#: build; far above any real finding or command, far below what would exhaust memory
MAX_BUILT = 1 << 20
_PRINTF_WIDTHS = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


def _refuse(what: str) -> NoReturn:
    raise SecurityError(f"{what} would build more than {MAX_BUILT} characters or items")


def _too_big(number: Any) -> bool:
    return isinstance(number, int) and number > MAX_BUILT


def _check_digits(text: str, what: str) -> None:
    # a digit run too long to convert is also too big (int() refuses 4300+ digits)
    if any(len(d) > 9 or int(d) > MAX_BUILT for d in _DIGITS.findall(text)):
        _refuse(what)


def _check_printf(fmt: str | bytes, args: Any) -> None:
    """`'%*d' % (10**9, 1)`, `'%1000000000s' % x`: widths and precisions, literal or `*`."""
    text = fmt.decode("latin-1") if isinstance(fmt, bytes) else fmt
    values = args if isinstance(args, tuple) else (args,)
    for match in _PRINTF_WIDTHS.finditer(text):
        for part in match.groups():
            if part == "*" and any(_too_big(v) for v in values):
                _refuse("a printf '*' width")
            elif part and part != "*":
                _check_digits(part, "a printf width")


def _check_format_string(fmt: str) -> None:
    """`'{:>1000000000}'.format(x)`; a field inside a spec (`'{0:{1}}'`) is refused outright."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # the call itself says what is wrong
    for _, _, spec, _ in fields:
        if spec and "{" in spec:
            raise SecurityError("a replacement field inside a format spec is not allowed")
        if spec:
            _check_digits(spec, "a format width")


def _check_replace(s: Any, old: Any, new: Any, count: Any = None) -> None:
    if not isinstance(s, str | bytes) or type(old) is not type(s) or type(new) is not type(s):
        return
    text: Any = s  # str or bytes, old and new the same type
    hits = len(text) + 1 if not old else text.count(old)
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    if len(s) + hits * (len(new) - len(old)) > MAX_BUILT:
        _refuse("replace")


def _join_size(separator: Any, items: list[Any]) -> int:
    sep = len(separator) if isinstance(separator, str | bytes) else 0
    return sep * max(0, len(items) - 1) + sum(len(i) for i in items if isinstance(i, str | bytes))


def _bounded_call(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Refuse a str/bytes method call that would build too much; returns the arguments to call
    with (a `join` argument is made a list first, so its size can be known)."""
    owner = getattr(obj, "__self__", None)
    if not isinstance(owner, str | bytes):
        return args
    name = getattr(obj, "__name__", "")
    if name in ("center", "ljust", "rjust", "zfill"):
        if _too_big(args[0] if args else kwargs.get("width")):
            _refuse(name)
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        tab: Any = "\t" if isinstance(owner, str) else b"\t"
        tabs = owner.count(tab)
        if isinstance(size, int) and tabs * size > MAX_BUILT:
            _refuse(name)
    elif name == "replace":
        _check_replace(owner, *args, **kwargs)
    elif name == "join" and args and not kwargs:
        items = list(args[0])
        if _join_size(owner, items) > MAX_BUILT:
            _refuse(name)
        return (items, *args[1:])
    return args


def _checked(name: str, check: Callable[..., Any]) -> Callable[..., Any]:
    """Jinja's filter `name`, running `check` on its arguments (less Jinja's own context
    argument) first; `check` may return a replacement for the filtered value."""
    func = FILTERS[name]
    skip = 1 if hasattr(func, "jinja_pass_arg") else 0

    @functools.wraps(func)
    def filtered(*args: Any, **kwargs: Any) -> Any:
        value = check(*args[skip:], **kwargs)
        if value is not None:
            args = (*args[:skip], value, *args[skip + 1 :])
        return func(*args, **kwargs)

    return filtered


def _check_join_filter(value: Any, d: Any = "", attribute: Any = None) -> list[Any]:
    items = list(value)
    if attribute is None and _join_size(d, items) > MAX_BUILT:
        _refuse("join")
    return items


def _check_indent(s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> None:
    lines = str(s).count("\n") + 1
    if isinstance(width, str):
        width = len(width)
    if isinstance(width, int) and lines * width > MAX_BUILT:
        _refuse("indent")


def _check_count(value: Any, count: Any, fill_with: Any = None) -> None:
    if _too_big(count):
        _refuse("a batch or slice count")


_BOUNDED_FILTERS: dict[str, Callable[..., Any]] = {
    "center": lambda value, width=80: _refuse("center") if _too_big(width) else None,
    "indent": _check_indent,
    "format": lambda value, *args, **kwargs: _check_printf(str(value), kwargs or args),
    "replace": _check_replace,
    "join": _check_join_filter,
    "batch": _check_count,
    "slice": _check_count,
}


class _Sandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the size bounds of the module docstring."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                sized = isinstance(seq, str | bytes | list | tuple)
                if sized and isinstance(times, int) and len(seq) * times > MAX_BUILT:
                    _refuse(f"'*' of a {type(seq).__name__}")
        elif operator == "**":
            whole = isinstance(left, int) and isinstance(right, int)
            if whole and abs(left) > 1 and right > 0 and abs(left).bit_length() * right > MAX_BUILT:
                _refuse("'**'")
        elif operator == "%" and isinstance(left, str | bytes):
            _check_printf(left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        args = _bounded_call(__obj, args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            _check_format_string(str(value.__self__))
        return wrapped

    def compile(self, source: Any, *args: Any, **kwargs: Any) -> Any:
        # every template and expression is compiled here (expressions from a tree)
        tree = self.parse(source) if isinstance(source, str) else source
        problem = _reserved_name(tree)
        if problem is not None:
            raise jinja2.TemplateSyntaxError(problem, 1)
        return super().compile(tree, *args, **kwargs)


def _reserved_name(tree: nodes.Node) -> str | None:
    """`self` would hand a template a reference to its own render context."""
    names = (tree, *tree.find_all(nodes.Name))  # find_all leaves the root out: `when: self`
    if any(isinstance(node, nodes.Name) and node.name == "self" for node in names):
        return "the name 'self' is reserved"
    return None


def _make_env(**kwargs: Any) -> ImmutableSandboxedEnvironment:
    env = _Sandbox(autoescape=False, keep_trailing_newline=False, **kwargs)
    for name in _DROPPED_GLOBALS:
        env.globals.pop(name, None)
    env.filters.update({name: _checked(name, check) for name, check in _BOUNDED_FILTERS.items()})
    env.filters.update(
        shjoin=_shjoin,
        regex_search=_regex_search,
        regex_findall=_regex_findall,
        human_bytes=_human_bytes,
        gib=_gib,
        dictsort=_dictsort,
    )
    env.tests.update(search=_test_search, match=_test_match)
    return env


class MissingFact(ChainableUndefined):
    """A fact the node did not give: chainable (`facts.a.b.c`), falsy, empty when rendered or
    iterated, and false in every ordering comparison, so `facts.cgroup.oom_kills > 0` on a
    stage that collected nothing is simply False instead of a TypeError, and a message that
    names it says nothing there instead of failing."""

    __slots__ = ()

    def __lt__(self, other: Any) -> bool:  # type: ignore[override]
        return False

    def __le__(self, other: Any) -> bool:  # type: ignore[override]
        return False

    def __gt__(self, other: Any) -> bool:  # type: ignore[override]
        return False

    def __ge__(self, other: Any) -> bool:  # type: ignore[override]
        return False


#: a command must not run with a word missing: an undefined value there is an error
_COMMAND_ENV = _make_env(undefined=StrictUndefined, finalize=shell_quote)
#: a message for a person says what the facts hold, and nothing of what they lack
_TEXT_ENV = _make_env(undefined=MissingFact)


_EXPR_ENV = _make_env(undefined=MissingFact)


def _template(
    env: ImmutableSandboxedEnvironment,
    kind: str,
    source: str,
    tree: Callable[[], nodes.Template | str],
) -> jinja2.Template:
    """One template or expression, compiled: its code from the template cache (runbook/
    template_cache.py) when an earlier run compiled the same text, else compiled from `tree()`
    (the tree the load-time check parsed, or the text) and stored for the next run."""
    cache = template_cache.get()
    code = cache.load(env, kind, source) if cache is not None else None
    if code is None:
        code = env.compile(tree())
        if cache is not None:
            cache.store(env, kind, source, code)
    return env.template_class.from_code(env, code, env.make_globals(None), None)


@lru_cache(maxsize=1024)
def _command_template(source: str) -> jinja2.Template:
    return _template(_COMMAND_ENV, "command", source, lambda: source)


#: syntax trees the load-time checks parsed, each handed to the first compile of its source
#: (Jinja compiles from a tree as well as from text): a runbook's templates are parsed once per
#: process, not once to check them and again to run them
_PARSED: dict[tuple[str, str], nodes.Node] = {}
_PARSED_MAX = 4096


def _keep_tree(kind: str, source: str, tree: nodes.Node) -> None:
    if len(_PARSED) < _PARSED_MAX:
        _PARSED[(kind, source)] = tree


@lru_cache(maxsize=1024)
def _text_template(source: str) -> jinja2.Template:
    def tree() -> nodes.Template | str:
        parsed = _PARSED.pop(("text", source), None)
        return parsed if isinstance(parsed, nodes.Template) else source

    return _template(_TEXT_ENV, "text", source, tree)


@lru_cache(maxsize=1024)
def _expression(source: str) -> Callable[..., Any]:
    def tree() -> nodes.Template:
        expr = _PARSED.pop(("expr", source), None)
        if not isinstance(expr, nodes.Expr):
            expr = _parse_expression(source)
        # what Environment.compile_expression builds around the expression it parsed
        body = [nodes.Assign(nodes.Name("result", "store"), expr, lineno=1)]
        return nodes.Template(body, lineno=1)

    try:
        template = _template(_EXPR_ENV, "expr", source, tree)
    except jinja2.TemplateSyntaxError:
        # raised again by Jinja's own compile, in its words
        return _EXPR_ENV.compile_expression(source, undefined_to_none=False)
    return TemplateExpression(template, undefined_to_none=False)


_JINJA_UNDEFINED = (
    (re.compile(r"'(?P<name>[^']+)' is undefined"), "no value for {name!r}"),
    (re.compile(r"'?[\w ]+?'? has no attribute '(?P<name>[^']+)'"), "no {name!r} in the facts"),
    (re.compile(r"'?[\w ]+?'? has no element (?P<name>\S+)"), "no item {name} in the list"),
    (re.compile(r"No first item, sequence was empty"), "an empty list has no first item"),
    (re.compile(r"No last item, sequence was empty"), "an empty list has no last item"),
)


def _plain_missing(message: str | None) -> str:
    """Jinja's sentence for a missing value said without its vocabulary (no "undefined")."""
    text = message or ""
    for pattern, said in _JINJA_UNDEFINED:
        match = pattern.search(text)
        if match:
            return said.format(**match.groupdict())
    return re.sub(r"(?i)\bundefined\b", "missing", text) or "a value is missing"


def _describe(exc: Exception) -> str:
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"syntax error: {exc.message}"
    if isinstance(exc, jinja2.UndefinedError):
        return f"missing value: {_plain_missing(exc.message)}"
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
    """Render a text template (a missing fact renders as nothing); TemplateError, naming the
    template, when it still cannot be rendered. Messages for a person go through
    `render_message`, which never names the template."""
    try:
        return _text_template(source).render(variables)
    except Exception as exc:
        raise TemplateError(f"text template {source!r}: {_describe(exc)}") from exc


def render_message(source: str, variables: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """A message for a person (a finding, a rule-out's reason, a remedy's summary or param)
    rendered from `variables`: `(text, None)`. A fact the node did not give renders as nothing;
    when the message still cannot be rendered (a fact of another type than the template
    expects, a refusal of the sandbox), `(None, problem)`: `problem` says in plain words what
    was missing (`unavailable`), for the caller to build its sentence and record its error
    from. Never raises, and never returns template text."""
    try:
        return _text_template(source).render(variables), None
    except Exception as exc:  # whatever Jinja raised, the caller gets a sentence
        return None, unavailable(source, variables, exc)


def unavailable(source: str, variables: Mapping[str, Any], exc: Exception) -> str:
    """Why `source` could not be rendered from `variables`, said plainly: the facts it reads
    that are not there (`kube.node was not collected`), else what went wrong, without the
    template's text."""
    missing = missing_facts(source, variables)
    if missing:
        listed = ", ".join(missing[:-1]) + (" and " if len(missing) > 1 else "") + missing[-1]
        return f"{listed} {'was' if len(missing) == 1 else 'were'} not collected"
    if isinstance(exc, jinja2.UndefinedError):
        return f"the facts collected lack a value it needs ({_plain_missing(exc.message)})"
    if isinstance(exc, SecurityError):
        return f"refused by the sandbox: {exc}"
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return f"it does not compile ({exc.message})"
    return f"the facts collected do not fit it ({type(exc).__name__}: {exc})"


def _key(node: nodes.Node) -> str | None:
    """The constant name `node` reads (`x.name`, `x['name']`, `x[0]`), or None."""
    if isinstance(node, nodes.Getattr):
        return node.attr
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        value = node.arg.value
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
    return None


def _chain(node: nodes.Node) -> list[str] | None:
    """`facts.kube.node['x']` as ['facts', 'kube', 'node', 'x']; None for what is not a chain
    of constant names from a variable."""
    parts: list[str] = []
    while isinstance(node, nodes.Getattr | nodes.Getitem):
        key = _key(node)
        if key is None:
            return None
        parts.append(key)
        node = node.node
    if not isinstance(node, nodes.Name) or not parts:
        return None
    return [node.name, *reversed(parts)]


@lru_cache(maxsize=256)
def _chains(source: str) -> tuple[tuple[str, ...], ...]:
    try:
        tree = _TEXT_ENV.parse(source)
    except jinja2.TemplateSyntaxError:
        return ()
    found = (_chain(n) for n in tree.find_all((nodes.Getattr, nodes.Getitem)))
    return tuple(tuple(c) for c in found if c is not None)


def _absent_prefix(chain: tuple[str, ...], variables: Mapping[str, Any]) -> str | None:
    """The shortest part of `chain` that `variables` do not hold, dotted; None when all of it
    is there (or it reads something other than data: a method, a local name)."""
    if chain[0] not in variables:
        return None  # a name the template set itself
    value: Any = variables[chain[0]]
    for depth, part in enumerate(chain[1:], start=2):
        if isinstance(value, Mapping):
            if part in value:
                value = value[part]
                continue
            if hasattr(value, part):
                return None  # a method (`.items()`)
        elif isinstance(value, list | tuple) and part.lstrip("-").isdigit():
            if -len(value) <= int(part) < len(value):
                value = value[int(part)]
                continue
        else:
            return None
        shown = chain[1:depth] if chain[0] == "facts" else chain[:depth]
        return ".".join(shown)
    return None


def missing_facts(source: str, variables: Mapping[str, Any]) -> list[str]:
    """The facts `source` reads that `variables` lack, each as the shortest dotted path that is
    absent (`kube.node`, `nccl_log.warns.0`), in order of first mention."""
    found: list[str] = []
    for chain in _chains(source):
        absent = _absent_prefix(chain, variables)
        if absent is not None and absent not in found:
            found.append(absent)
    return found


_COMPILERS: dict[str, Callable[[str], Any]] = {
    "command": _command_template,
    "text": _text_template,
    "expr": _expression,
}


def prepare(kind: str, source: str) -> None:
    """Compile a `command`, `text` or `expr` source and keep it compiled, rendering nothing (a
    sweep does this for every template once, before its hosts start); TemplateError if it
    does not compile."""
    try:
        _COMPILERS[kind](source)
    except Exception as exc:
        raise TemplateError(f"{kind} {source!r}: {_describe(exc)}") from exc


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
    reserved = _reserved_name(tree)
    return f"syntax error: {reserved}" if reserved else None


#: names every template may use whatever the runbook declares: what the walk gives
#: (runbook.conductor.Conductor.context), and Jinja's loop variable
CONTEXT_NAMES = frozenset({"facts", "vars", "results", "node", "loop"})


@dataclass(frozen=True)
class Names:
    """What a runbook's templates and expressions may read, checked when it loads: a derived
    fact (`facts.derived.<name>`) no stage derives is an error (missing on every node). With
    `strict`, so are a name that is not one of its variables (nor CONTEXT_NAMES) and the facts
    of a parser none of its stages runs (`facts.<parser>`): the shipped runbooks are held to
    that; a runbook of one's own may read a variable only `--var` gives."""

    variables: frozenset[str]
    facts: frozenset[str]
    derived: frozenset[str]
    strict: bool = False

    @functools.cached_property
    def mark(self) -> str:
        """A short digest of the names: the template cache remembers a check with them."""
        parts = [*sorted(self.variables), "|", *sorted(self.facts), "|", *sorted(self.derived)]
        text = "\n".join([*parts, "|", str(self.strict)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _close(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _unknown_references(tree: nodes.Node, names: Names) -> str | None:
    """The first derived fact `tree` reads that no stage derives (with `names.strict`, also a
    name or a parser's facts the runbook does not give): each would be missing on every node,
    a mistake to report at load, not a message that silently says nothing."""
    everything = (tree, *tree.find_all((nodes.Name, nodes.Getattr, nodes.Getitem)))
    assigned = {n.name for n in everything if isinstance(n, nodes.Name) and n.ctx != "load"}
    known = names.variables | CONTEXT_NAMES | assigned | set(_TEXT_ENV.globals)
    for node in everything:
        if isinstance(node, nodes.Name):
            if names.strict and node.ctx == "load" and node.name not in known:
                return (
                    f"unknown name {node.name!r}: not a variable of the runbook (declare it "
                    "under vars:) nor facts, vars or results" + _close(node.name, known)
                )
            continue
        chain = _chain(node)
        if chain is None or chain[0] != "facts" or "facts" in assigned or len(chain) < 2:
            continue
        if chain[1] == "derived":
            if len(chain) >= 3 and chain[2] not in names.derived:
                return f"facts.derived.{chain[2]}: no stage derives it" + _close(
                    chain[2], names.derived
                )
        elif names.strict and chain[1] not in names.facts:
            return f"facts.{chain[1]}: no stage of the runbook parses {chain[1]!r}" + _close(
                chain[1], names.facts
            )
    return None


def _check_mark(kind: str, names: Names | None) -> str:
    return kind if names is None else f"{kind} {names.mark}"


@lru_cache(maxsize=4096)
def check_template(source: str, names: Names | None = None) -> str | None:
    """The problem in a template (syntax, an unknown filter or test; with `names`, a name,
    parser's facts or derived fact the runbook does not give), or None."""
    cache = template_cache.get()
    mark = _check_mark("text", names)
    if cache is not None and (
        cache.checked(mark, source) or (names is None and cache.has("command", source))
    ):
        return None  # passed in an earlier run
    try:
        tree = _TEXT_ENV.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        return _describe(exc)
    problem = _unknown_names(tree)
    if problem is None and names is not None:
        problem = _unknown_references(tree, names)
    if problem is None:
        _keep_tree("text", source, tree)
        if cache is not None:
            cache.mark_checked(mark, source)
    return problem


@lru_cache(maxsize=4096)
def check_expression(source: str, names: Names | None = None) -> str | None:
    """The problem in an expression (as check_template), or None."""
    cache = template_cache.get()
    mark = _check_mark("expr", names)
    if cache is not None and cache.checked(mark, source):
        return None  # passed in an earlier run
    try:
        tree = _parse_expression(source)
    except jinja2.TemplateSyntaxError as exc:
        return _describe(exc)
    problem = _unknown_names(tree)
    if problem is None and names is not None:
        problem = _unknown_references(tree, names)
    if problem is None:
        _keep_tree("expr", source, tree)
        if cache is not None:
            cache.mark_checked(mark, source)
    return problem


def _parse_expression(source: str) -> nodes.Expr:
    """One whole expression's syntax tree (TemplateSyntaxError if it is not one)."""
    parser = Parser(_EXPR_ENV, source, state="variable")
    tree = parser.parse_expression()
    if not parser.stream.eos:
        token = parser.stream.current
        raise jinja2.TemplateSyntaxError(
            f"unexpected {describe_token(token)!r}", token.lineno, None, None
        )
    tree.set_environment(_EXPR_ENV)
    return tree
