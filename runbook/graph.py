"""A runbook's decision graph as Graphviz dot or Mermaid: stages, rule edges, fall-through."""

from __future__ import annotations

from dataclasses import dataclass

from runbook.spec.models import END, Runbook


@dataclass(frozen=True)
class Edge:
    source: str
    target: str  # a stage id, END, or `cause:<id>` for a conclude
    label: str


def edges(runbook: Runbook) -> list[Edge]:
    result: list[Edge] = []
    ids = [s.id for s in runbook.stages]
    for position, stage in enumerate(runbook.stages):
        falls_through = True
        for rule in stage.decide:
            label = rule.when or "otherwise"
            if rule.conclude:
                result.append(Edge(stage.id, f"cause:{rule.conclude}", label))
            elif rule.next:
                result.append(Edge(stage.id, rule.next, label))
            else:
                continue
            if rule.when is None:
                # a stage with its own `when` can be skipped, and a skipped stage falls through
                falls_through = stage.when is not None
                break
        if falls_through:
            following = ids[position + 1] if position + 1 < len(ids) else END
            result.append(Edge(stage.id, following, "in order"))
    return result


def _q(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def render_dot(runbook: Runbook) -> str:
    lines = [f'digraph "{_q(runbook.id)}" {{', "  rankdir=TB;", "  node [shape=box];"]
    for stage in runbook.stages:
        lines.append(f'  "{_q(stage.id)}" [label="{_q(stage.title)}"];')
    lines.append(f'  "{END}" [shape=doublecircle];')
    for edge in edges(runbook):
        target = edge.target
        if target.startswith("cause:"):
            lines.append(f'  "{_q(target)}" [shape=ellipse, label="{_q(target[6:])}"];')
        style = ", style=dashed" if edge.label == "in order" else ""
        lines.append(f'  "{_q(edge.source)}" -> "{_q(target)}" [label="{_q(edge.label)}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mid(name: str) -> str:
    return "n_" + "".join(c if c.isalnum() else "_" for c in name)


def _mlabel(text: str) -> str:
    return text.replace('"', "#quot;").replace("|", "#124;")


def render_mermaid(runbook: Runbook) -> str:
    lines = ["flowchart TD"]
    for stage in runbook.stages:
        lines.append(f'  {_mid(stage.id)}["{_mlabel(stage.title)}"]')
    lines.append(f"  {_mid(END)}(((end)))")
    for edge in edges(runbook):
        target = edge.target
        if target.startswith("cause:"):
            lines.append(f'  {_mid(target)}(["{_mlabel(target[6:])}"])')
        arrow = "-.->" if edge.label == "in order" else "-->"
        lines.append(f'  {_mid(edge.source)} {arrow}|"{_mlabel(edge.label)}"| {_mid(target)}')
    return "\n".join(lines) + "\n"
