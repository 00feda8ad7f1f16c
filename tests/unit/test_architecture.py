"""The package keeps its one-way flow: no import reaches a higher layer, none goes round a loop,
and click, rich and ansible-runner stay where they belong (tests/tools/layers.py says which).

The last two tests plant a wrong-way import and a cycle in a small package of their own, so a
check that had stopped seeing them would fail here rather than pass everything."""

from __future__ import annotations

from pathlib import Path

from tests.tools.layers import LAYERS, check, layer_of

ROOT = Path(__file__).resolve().parents[2] / "runbook"


def test_the_package_has_no_wrong_way_import_no_cycle_and_no_unplaced_module() -> None:
    problems = check(ROOT)
    assert not problems, "\n".join(problems)


def test_every_layer_named_in_the_table_holds_a_module() -> None:
    from tests.tools.layers import modules_under

    used = {layer_of(name) for name in modules_under(ROOT)}
    empty = [name for index, (name, _) in enumerate(LAYERS) if index not in used]
    assert not empty


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "runbook"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_planted_wrong_way_import_is_reported_with_its_line(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "parsers/__init__.py": "",
            # a parser reaching up into the approval store, inside a function (lazy) at that
            "parsers/dmesg.py": (
                "import re\n\n\ndef f():\n    from runbook.remedies.store import Store\n"
            ),
            "remedies/__init__.py": "",
            "remedies/store.py": "from runbook.parsers import dmesg\nStore = 1\n",
        },
    )
    problems = check(root)
    assert problems == [
        "runbook.parsers.dmesg:5 (parsers) imports runbook.remedies.store (approvals),"
        " a higher layer",
        "import cycle: runbook.parsers.dmesg → runbook.remedies.store",
    ]


def test_a_planted_cycle_within_one_layer_and_a_confined_package_are_reported(
    tmp_path: Path,
) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "spec/__init__.py": "",
            "spec/loader.py": "from . import inspect\n",
            "spec/inspect.py": "from runbook.spec.loader import load\nimport click\n",
            "spec/models.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from runbook.cli import app\n",
        },
    )
    problems = check(root)
    assert problems == [
        "runbook.spec.inspect:2 imports click, which only runbook.cli may",
        "import cycle: runbook.spec.inspect → runbook.spec.loader",
    ]
