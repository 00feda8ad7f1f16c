"""kubectl's patched manifest carried back onto the file as it was written: the real
`kubectl patch --local` renders, and the file written keeps its comments, key order and
indentation, differing only in the patched lines — or is kubectl's own text when the change
cannot be carried over exactly."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import yaml

from runbook.remedies import kubectl, workload
from runbook.remedies.manifest_edit import minimal_edit

MANIFESTS = Path(__file__).parents[1] / "fixtures" / "manifests"


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="")
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


@pytest.mark.parametrize(
    ("name", "kind", "expected"),
    [
        ("job.yaml", None, ["+            sizeLimit: 12Gi"]),
        ("deployment.yaml", None, ["-            sizeLimit: 1Gi", "+            sizeLimit: 12Gi"]),
    ],
)
def test_a_shm_patch_changes_only_the_size_line(
    tmp_path: Path, name: str, kind: str | None, expected: list[str]
) -> None:
    source = tmp_path / name
    text = "# owned by the training platform team\n" + (MANIFESTS / name).read_text()
    source.write_text(text)
    patch = workload.shm_size_patch(workload.select_document(text, kind=kind), 12 * 2**30)
    rendered = kubectl.render_patch(source, patch)
    edited = minimal_edit(text, rendered)
    assert changed_lines(text, edited) == expected
    assert edited.startswith("# owned by the training platform team\n")
    # what is written loads to exactly what kubectl computed
    assert list(yaml.safe_load_all(edited)) == list(yaml.safe_load_all(rendered))


def test_a_memory_patch_on_a_pytorchjob_keeps_everything_else(tmp_path: Path) -> None:
    source = tmp_path / "pytorchjob.yaml"
    text = (MANIFESTS / "pytorchjob.yaml").read_text()
    source.write_text(text)
    patch = workload.memory_patch(
        workload.select_document(text), request_bytes=700 * 2**30, limit_bytes=800 * 2**30
    )
    rendered = kubectl.render_patch(source, patch)
    edited = minimal_edit(text, rendered)
    changes = changed_lines(text, edited)
    assert changes, changes
    assert all(
        line.split(":")[0].strip("+- ") in ("memory", "requests", "limits") for line in changes
    ), changes
    assert list(yaml.safe_load_all(edited)) == list(yaml.safe_load_all(rendered))


def test_falls_back_to_kubectl_text_when_the_change_cannot_be_carried() -> None:
    original = "a: 1\nb: [1, 2]\n"
    rendered = "a: 1\nb:\n- 1\n- 2\n- 3\nc: {d: 1}\n"
    edited = minimal_edit(original, rendered)
    assert yaml.safe_load(edited) == yaml.safe_load(rendered)
    # a document count that differs cannot be an edit of the original
    assert minimal_edit("a: 1\n", "a: 1\n---\nb: 2\n") == "a: 1\n---\nb: 2\n"
