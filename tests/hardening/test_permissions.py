"""Run directories and the approval store are created owner-only, whatever the umask: they hold
a node's logs, its pod spec and the proposals' plans."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.integration.conftest import cli_env
from tests.sweep.helpers import runbook
from tests.tools import bundles

BUNDLE = bundles.path("article-incident")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_run_directory_and_the_approval_store_are_owner_only_under_a_lax_umask(
    tmp_path: Path,
) -> None:
    env = cli_env(tmp_path)
    run_dir = tmp_path / "runs" / "incident"
    old = os.umask(0o022)
    try:
        result = runbook(
            [
                "run",
                "nccl-init-failure",
                "--target",
                f"replay://{BUNDLE}",
                "--no-input",
                "--run-dir",
                str(run_dir),
            ],
            env,
        )
    finally:
        os.umask(old)
    assert result.rc == 0, result.stderr[-2000:]
    assert mode(run_dir) == 0o700
    for name in ("events.jsonl", "state.json", "verdict.json"):
        assert mode(run_dir / name) & 0o077 == 0, (name, oct(mode(run_dir / name)))
    store = Path(env["RUNBOOK_STATE_DIR"]) / "approvals.db"
    assert store.exists() and mode(store) == 0o600 and mode(store.parent) == 0o700
