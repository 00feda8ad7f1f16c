"""verdict.json's layout (runbook/jsontext.py): the same JSON as json.dumps gives, one line per
top-level key and per item of a top-level list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.jsontext import readable

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), values, max_size=6))
def test_it_reads_back_as_the_data_it_was_given(data: dict[str, Any]) -> None:
    text = readable(data)
    assert text.endswith("\n")
    assert json.loads(text) == json.loads(json.dumps(data))


def test_one_line_per_key_and_per_list_item() -> None:
    data = {
        "node": "gpu-7",
        "stages": [{"id": "app-error", "facts": {"a": [1, 2]}}, {"id": "cgroup", "facts": {}}],
        "timeline": [],
        "proposals": ("shm-size",),
    }
    assert readable(data).splitlines() == [
        "{",
        '  "node": "gpu-7",',
        '  "stages": [',
        '    {"id": "app-error", "facts": {"a": [1, 2]}},',
        '    {"id": "cgroup", "facts": {}}',
        "  ],",
        '  "timeline": [],',
        '  "proposals": [',
        '    "shm-size"',
        "  ]",
        "}",
    ]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, {}),
        ({1: "x"}, {"1": "x"}),  # keys as json.dumps writes them
        ({"path": Path("/tmp/x")}, {"path": "/tmp/x"}),  # what json cannot encode, as str()
        ({"line": "ünï\u2028cödé \"q\" \\"}, {"line": "ünï\u2028cödé \"q\" \\"}),
    ],
)
def test_edge_values_keep_their_meaning(data: dict[Any, Any], expected: dict[str, Any]) -> None:
    assert json.loads(readable(data)) == expected
