"""The I/O edge of the workload patches: render a `Patch` with the real `kubectl patch --local`
(offline: no API server is contacted) and diff the result against the manifest as written.

A multi-document file is not handed to kubectl whole: ``kubectl patch --local`` applies the
patch to *every* document in it and prints them without ``---`` separators. Instead the target
document is piped in alone and its rendering put back between the other documents, which stay
byte for byte as they were.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from runbook.errors import RunbookError
from runbook.remedies.workload import Patch

_DOCUMENT_START = re.compile(r"^---(?:[ \t].*)?$", re.MULTILINE)


def patch_argv(
    manifest: str, patch: Patch, *, kubectl: str = "kubectl", output: str = "yaml"
) -> list[str]:
    """`kubectl patch --local -f MANIFEST --type T -p JSON -o yaml` as an argv (no shell)."""
    body = json.dumps(patch.body, separators=(",", ":"))
    return [
        kubectl,
        "patch",
        "--local",
        "-f",
        manifest,
        "--type",
        patch.type,
        "-p",
        body,
        "-o",
        output,
    ]


def _run(argv: list[str], *, stdin: str | None, timeout: float, what: str) -> str:
    # an empty kubeconfig: a broken or remote one cannot fail (or slow down) a local render
    env = {**os.environ, "KUBECONFIG": os.devnull}
    try:
        proc = subprocess.run(
            argv,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except FileNotFoundError as exc:
        raise RunbookError(f"kubectl not found: {argv[0]}") from exc
    except subprocess.TimeoutExpired as exc:
        raise RunbookError(
            f"kubectl patch --local timed out after {timeout:g} s on {what}"
        ) from exc
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise RunbookError(f"kubectl patch --local failed on {what}: {lines[0].strip()}")
    return proc.stdout


def split_documents(text: str) -> list[str]:
    """The text of each YAML document, each piece starting at its `---` line (if it has one)."""
    starts = [m.start() for m in _DOCUMENT_START.finditer(text)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def _body(piece: str) -> str:
    """A piece without its `---` marker line."""
    if _DOCUMENT_START.match(piece):
        return piece.partition("\n")[2]
    return piece


def _identity(document: Any) -> tuple[object, object, object, object]:
    metadata = document.get("metadata") if isinstance(document, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    head = document if isinstance(document, dict) else {}
    return (
        head.get("apiVersion"),
        head.get("kind"),
        metadata.get("name"),
        metadata.get("namespace"),
    )


def render_patch(
    manifest_path: str | os.PathLike[str],
    patch: Patch,
    *,
    kubectl: str = "kubectl",
    timeout: float = 30,
) -> str:
    """The manifest at `manifest_path` with `patch` applied, as kubectl prints it (YAML).

    Raises RunbookError (one line, kubectl's first stderr line) when kubectl refuses the patch,
    is missing or runs past `timeout` seconds.
    """
    path = Path(manifest_path)
    try:
        text = path.read_text(encoding="utf-8")
        documents = list(yaml.safe_load_all(text))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunbookError(f"cannot read manifest {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise RunbookError(
            f"manifest {path} is not valid YAML: {' '.join(str(exc).split())}"
        ) from exc
    if sum(d is not None for d in documents) <= 1:
        argv = patch_argv(str(path), patch, kubectl=kubectl)
        return _run(argv, stdin=None, timeout=timeout, what=str(path))

    pieces = split_documents(text)
    loaded = [yaml.safe_load(_body(piece)) for piece in pieces]
    if [d for d in loaded if d is not None] != [d for d in documents if d is not None]:
        raise RunbookError(f"cannot split {path} into its documents safely; patch one document")
    target = patch.target
    wanted = (target.api_version, target.kind, target.name, target.namespace)
    matches = [i for i, d in enumerate(loaded) if _identity(d) == wanted]
    if len(matches) != 1:
        raise RunbookError(
            f"{path} holds {len(matches)} documents {patch.target.ref} ({patch.target.api_version}"
            f", namespace {patch.target.namespace or 'unset'}); expected exactly one"
        )
    index = matches[0]
    rendered = _run(
        patch_argv("-", patch, kubectl=kubectl),
        stdin=_body(pieces[index]),
        timeout=timeout,
        what=f"{path} ({patch.target.ref})",
    )
    # every piece but the first starts with its `---` line, and each ends in a newline
    marker = pieces[index][: len(pieces[index]) - len(_body(pieces[index]))]
    pieces[index] = marker + rendered
    return "".join(pieces)


def unified_diff(before_text: str, after_text: str, path: str, *, normalize: bool = False) -> str:
    """A unified diff (`a/PATH`, `b/PATH`) of the manifest before and after.

    kubectl prints keys sorted and drops comments, so a diff of the file as written against
    its rendering shows those too; `normalize` re-serialises both sides the same way first, so
    that only the changed values remain (what an approver needs to read).
    """
    if normalize:
        before_text, after_text = _normalized(before_text), _normalized(after_text)
    lines = difflib.unified_diff(
        before_text.splitlines(keepends=True),
        after_text.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _normalized(text: str) -> str:
    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    return yaml.safe_dump_all(documents, sort_keys=True, default_flow_style=False)
