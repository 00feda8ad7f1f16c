"""The package's layers and the import check that holds them (docs/architecture.md).

Data flows one way: evidence comes in through a transport, is kept as a bundle, read by the
parsers into facts, walked by the runbook's decision tree into a verdict, which proposes remedies
a person approves, whose effect is verified; a session ties those together for one node, a job
or a fleet; the command line and the reports sit on top. A module may import its own layer or a
lower one, never a higher one, and no two modules may import each other, directly or round a
loop. Imports inside functions (kept lazy for start-up time) count the same as those at the top;
only `if TYPE_CHECKING:` blocks are left out, since they never run.

`check(root)` parses every module under `root` with `ast` (nothing is imported) and returns the
violations as lines a person can act on; tests/unit/test_architecture.py asserts there are none,
and that the check itself catches a planted wrong-way import and a planted cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: lowest first; each entry: the layer's name and the module prefixes in it (longest prefix wins)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "runbook",  # the package itself: its __init__ holds only the version
            "runbook.errors", "runbook.atomic", "runbook.redact", "runbook.units",
            "runbook.output", "runbook.interrupt", "runbook.config", "runbook.ansible_text",
            "runbook.templating", "runbook.template_cache", "runbook.jsontext", "runbook.once",
            "runbook.cache_dir", "runbook.dataclass_cache",
            "runbook.signatures", "runbook.causal",
            "runbook.redacted_output", "runbook.timestamps", "runbook.data", "runbook.runbooks",
            "runbook.not_run", "runbook.dburl",
        ),
    ),
    ("transports", ("runbook.transports",)),
    # the replay transport reads a bundle back, and targets open any transport (replay too)
    ("bundle", ("runbook.bundle", "runbook.bundle_files", "runbook.transports.replay",
                "runbook.targets")),
    # a hang's line-up of ranks is read from the parsers' records (runbook.hang)
    ("parsers", ("runbook.parsers", "runbook.hang")),
    # what each remedy kind is and how it is planned: the vocabulary a runbook's remedies use
    ("remedy kinds", ("runbook.remedies.kinds", "runbook.remedies.plans",
                      "runbook.remedies.workload", "runbook.remedies.kubectl",
                      "runbook.remedies.manifest_edit", "runbook.remedies.estimate",
                      "runbook.remedies.advice", "runbook.remedies.guards",
                      "runbook.remedies.ab", "runbook.remedies.reach")),
    ("spec", ("runbook.spec", "runbook.conductor", "runbook.graph")),
    # the typed verdict and the typed results built from verdicts (a sweep's hosts)
    # the run directory that holds them, and the walk that fills it
    ("diagnosis", ("runbook.diagnosis", "runbook.verdict", "runbook.executor",
                   "runbook.rundir", "runbook.sweep.results")),
    ("approvals", ("runbook.remedies", "runbook.oncall", "runbook.notify", "runbook.metrics",
                   "runbook.paging")),
    ("verify", ("runbook.verify",)),
    ("render", ("runbook.render",)),
    ("session", ("runbook.session", "runbook.sweep",
                 "runbook.job", "runbook.npd")),
    # the approval desk on the web is a front end beside the command line
    ("cli", ("runbook.cli", "runbook.report", "runbook.demo", "runbook.__main__",
             "runbook.start", "runbook.desk")),
)

#: third-party packages only some layers may use: (package, the module prefixes allowed it)
CONFINED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("click", ("runbook.cli",)),
    ("rich", ("runbook.output", "runbook.render", "runbook.cli")),
    ("ansible_runner", ("runbook.remedies.playbook",)),
)


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_under(root: Path) -> dict[str, Path]:
    return {module_name(root, p): p for p in sorted(root.rglob("*.py"))}


def _type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def imports_of(name: str, path: Path, known: Iterable[str]) -> list[Import]:
    """Every import statement in the module that runs (top level or in a function)."""
    known = set(known)
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def target(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = name.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.extend(Import(name, a.name, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = target(child)
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    found.append(Import(name, full if full in known else base, child.lineno))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return found


def _owner(module: str, known: set[str]) -> str:
    """The module an import names (an imported function's module, a package's __init__)."""
    while module not in known and "." in module:
        module = module.rsplit(".", 1)[0]
    return module


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int:
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def check(
    root: Path,
    layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS,
    confined: tuple[tuple[str, tuple[str, ...]], ...] = CONFINED,
) -> list[str]:
    """Every wrong-way import, unplaced module, confined-package use and cycle under `root`."""
    modules = modules_under(root)
    known = set(modules)
    top = root.name
    problems: list[str] = []
    graph: dict[str, set[str]] = {name: set() for name in modules}
    names = [name for name, _ in layers]
    for name, path in modules.items():
        mine = layer_of(name, layers)
        if mine < 0:
            problems.append(f"{name}: in no layer (add it to tests/tools/layers.py LAYERS)")
            continue
        for imp in imports_of(name, path, known):
            head = imp.imported.split(".")[0]
            for package, allowed in confined:
                if head == package and not any(
                    name == p or name.startswith(p + ".") for p in allowed
                ):
                    problems.append(
                        f"{name}:{imp.line} imports {package}, which only"
                        f" {', '.join(allowed)} may"
                    )
            if head != top:
                continue
            owner = _owner(imp.imported, known)
            if owner == name:
                continue
            graph[name].add(owner)
            theirs = layer_of(owner, layers)
            if theirs > mine:
                problems.append(
                    f"{name}:{imp.line} ({names[mine]}) imports {owner} ({names[theirs]}),"
                    " a higher layer"
                )
    for component in _cycles(graph):
        problems.append("import cycle: " + " → ".join(component))
    return problems
