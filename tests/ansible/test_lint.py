"""ansible-lint over the collection's content (roles/, playbooks/, and galaxy.yml and
meta/runtime.yml, which its galaxy and meta-runtime rules check) with the repository's
.ansible-lint: production profile, offline (it must not reach Galaxy), its cache in an
ANSIBLE_HOME under the test's temp dir. Runs in the background (tests/ansible/background.py).

molecule/ and inventory/ pass too (`ansible-lint roles playbooks molecule inventory`), but
that doubles the run (each playbook is syntax-checked by its own ansible-playbook) and molecule
syntax-checks its playbooks itself (test_molecule.py)."""

from __future__ import annotations

import os

import pytest

from tests.ansible.background import ToolRun, ToolRuns, register, waits_for
from tests.tools.ansible_env import REPO, VENV_BIN, ansible_environment

pytestmark = pytest.mark.ansible


@register("lint")
def start_lint(runs: ToolRuns) -> ToolRun:
    work = runs.workdir("lint")
    env = {**os.environ, **ansible_environment(work / "ansible", runs.short_dir()), "NO_COLOR": "1"}
    env.pop("VIRTUAL_ENV", None)  # ansible-compat would cache under the venv otherwise
    argv = [str(VENV_BIN / "ansible-lint"), "--offline", "--nocolor", "roles", "playbooks",
            "galaxy.yml", "meta"]
    return runs.spawn("lint", argv, cwd=REPO, env=env)


@waits_for("lint")
def test_roles_and_playbooks_pass_ansible_lint_production(tool_runs: ToolRuns) -> None:
    result = tool_runs.result("lint")
    assert result.rc == 0, result.output[-6000:]
    assert "Profile 'production' was required, and it passed" in result.output, result.output
    # both roles and all three playbooks were read (a path it cannot classify is skipped)
    assert "0 failure(s), 0 warning(s)" in result.output, result.output
    assert not (REPO / ".ansible").exists(), "ansible-lint cached inside the repository"
