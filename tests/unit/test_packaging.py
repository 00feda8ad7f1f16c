"""An installed copy carries every playbook and role file: each file under playbooks/ and
roles/ matches a [tool.setuptools.data-files] glob (a new kind of file, or a new role
directory, would otherwise be silently left out of `pip install .`)."""

from __future__ import annotations

import importlib
from pathlib import Path

tomllib = importlib.import_module("tomllib")  # Python 3.11+, as the suite runs

REPO = Path(__file__).resolve().parents[2]


def test_every_playbook_and_role_file_is_shipped() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    data_files = config["tool"]["setuptools"]["data-files"]
    shipped = {
        path.relative_to(REPO)
        for patterns in data_files.values()
        for pattern in patterns
        for path in REPO.glob(pattern)
    }
    wanted = {
        path.relative_to(REPO)
        for top in ("playbooks", "roles")
        for path in (REPO / top).rglob("*")
        if path.is_file()
    }
    assert wanted, "no playbooks or roles found"
    assert wanted - shipped == set()
    for target, patterns in data_files.items():
        for pattern in patterns:
            assert target == "share/nccl-runbook/" + str(Path(pattern).parent), (target, pattern)
