"""`runbook collect-plan`: the probes of a runbook rendered for roles/evidence_collect, in the
order a collection runs them, each command shell-quoted by runbook's sandbox and marked
`!unsafe` (as every value of the plan), so that Ansible, loading the plan as it loads any
extra-vars file, never templates a command (a `{{` from a variable stays text)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runbook.transports import framing
from tests.sweep.helpers import runbook


def test_the_plan_is_every_probe_once_and_ansible_will_not_template_it(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = tmp_path / "plan.yml"
    result = runbook(
        [
            "collect-plan",
            "nccl-init-failure",
            "--var",
            "app_log_dir=/x/{{ lookup('pipe','id') }}",
            "--var",
            "pod=trainer-0",
            "--var",
            "namespace=ml",
            "-o",
            str(plan),
        ],
        env,
    )
    assert result.rc == 0, result.stderr
    # facts-dependent probes are named, not silently rendered wrong
    assert "cgroup/memory.* is rendered without the facts of earlier stages" in result.stderr

    monkeypatch.setenv("ANSIBLE_HOME", env["ANSIBLE_HOME"])
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import is_trusted_as_template

    data = DataLoader().load_from_file(str(plan), trusted_as_template=True)  # as `-e @plan`
    probes = data["evidence_collect_probes"]
    names = [p["name"] for p in probes]
    assert names[:3] == ["hostname.txt", "clock.txt", "timezone.txt"]  # the executor's preamble
    assert len(names) == len(set(names))
    assert {"app/*.log", "dmesg.txt", "nvidia-smi-q.txt", "nccl-tests/*.txt"} <= set(names)
    # every string of the plan is text to Ansible: commands, names, the node's metadata
    assert all(not is_trusted_as_template(p["command"]) for p in probes)
    assert not any(is_trusted_as_template(name) for name in names)
    app = next(p["command"] for p in probes if p["name"] == "app/*.log")
    # framed as it runs (the module gives it its token on its input), the value one quoted word
    assert app == framing.script(
        "rbk_tail 5000 '/x/{{ lookup('\"'\"'pipe'\"'\"','\"'\"'id'\"'\"') }}' '*.log'"
    )
    assert data["evidence_collect_meta"] == {"pod": "trainer-0", "namespace": "ml"}
