"""Write kubectl's patched manifest back as the smallest edit of the file as it was.

`kubectl patch --local` is the authority on what a patch does, but it prints keys sorted and
drops comments: written back into a Git checkout as is, a one-line sizeLimit change would show
as a rewrite of the whole file, and the approver could not see the change for the noise. So the
change is carried over onto a round-trip parse of the original (ruamel.yaml keeps order,
comments, quoting and indentation: no hand-written YAML emitter could), and the result is
accepted only if it loads to exactly what kubectl rendered; otherwise kubectl's own text is
used. The approver sees a diff of only what changes; what is written is what kubectl computed.
"""

from __future__ import annotations

import io
import itertools
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq


def _carry(node: Any, before: Any, after: Any) -> Any:
    """`node` (round-trip, equal to `before`) edited in place to equal `after`; returns the
    node to store (a new value where the shape changed)."""
    if isinstance(node, CommentedMap) and isinstance(before, dict) and isinstance(after, dict):
        for key in [k for k in node if k not in after]:
            del node[key]
        for key, value in after.items():
            if key not in node:
                node[key] = value
            elif before.get(key) != value:
                node[key] = _carry(node[key], before.get(key), value)
        return node
    if (
        isinstance(node, CommentedSeq)
        and isinstance(before, list)
        and isinstance(after, list)
        and len(before) == len(after) == len(node)
    ):
        for index, value in enumerate(after):
            if before[index] != value:
                node[index] = _carry(node[index], before[index], value)
        return node
    return after


def _dump(yaml_rt: YAML, documents: list[Any]) -> str:
    stream = io.StringIO()
    yaml_rt.dump_all(documents, stream)
    return stream.getvalue()


def minimal_edit(original: str, rendered: str) -> str:
    """The original text carrying the change that turns it into `rendered` (kubectl's output,
    all documents); `rendered` itself when the change cannot be carried over exactly."""
    want = [d for d in yaml.safe_load_all(rendered) if d is not None]
    have = [d for d in yaml.safe_load_all(original) if d is not None]
    if len(want) != len(have):
        return rendered
    yaml_rt = YAML(typ="rt")
    yaml_rt.preserve_quotes = True
    yaml_rt.width = 4096
    # keep the file's own sequence indentation (`- ` under or beside its key)
    yaml_rt.indent(mapping=2, sequence=4 if _indented_sequences(original) else 2,
                   offset=2 if _indented_sequences(original) else 0)
    try:
        nodes = [d for d in yaml_rt.load_all(original) if d is not None]
    except Exception:  # ruamel raises many kinds; any of them means: use kubectl's text
        return rendered
    if len(nodes) != len(want):
        return rendered
    edited = [_carry(n, b, a) for n, b, a in zip(nodes, have, want, strict=True)]
    text = _dump(yaml_rt, edited)
    if original.lstrip().startswith("---") and not text.startswith("---"):
        text = "---\n" + text
    try:
        check = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError:
        return rendered
    return text if check == want else rendered


def _indented_sequences(text: str) -> bool:
    """Whether the file writes `- item` indented under its key (`key:\\n  - a`)."""
    lines = text.splitlines()
    for prev, line in itertools.pairwise(lines):
        stripped = line.lstrip()
        if stripped.startswith("- ") and prev.rstrip().endswith(":"):
            return len(line) - len(stripped) > len(prev) - len(prev.lstrip())
    return False
