"""The collection plan for roles/evidence_collect: every probe a `runbook collect` would run,
rendered here (in templating's sandbox, every value shell-quoted) and handed to Ansible as a
variable, so a node needs nothing installed beyond the Python Ansible already needs, and the
exact commands are in the job's extra vars for anyone to read before it runs.

Rendered without a node to look at: a command template that reads an earlier stage's facts
(the shipped runbook finds the pod's cgroup from pod.json) sees none, and takes the same
branch as on a node where that fact is absent; give the value as a variable instead
(`--var cgroup_dir=…`). Such probes are listed in `evidence_collect_notes`.

The plan is YAML with every command tagged `!unsafe`: Ansible must not template a command
(a `{{` in an awk script or a value would otherwise be evaluated on the controller).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runbook.ansible_text import unsafe_yaml
from runbook.conductor import Conductor
from runbook.executor import PREAMBLE
from runbook.spec.models import Runbook
from runbook.transports import framing
from runbook.transports.base import Probe


def collection_plan(runbook: Runbook, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The role's variables: `evidence_collect_probes` (name, command, timeout, in the order a
    collection runs them, first of each name kept), `evidence_collect_meta` (bundle.yaml
    fields from the variables) and `evidence_collect_notes`."""
    conductor = Conductor(runbook, variables)
    probes: list[Probe] = list(PREAMBLE)
    notes: list[str] = []
    seen = {p.name for p in probes}
    for stage in runbook.stages:
        rendered, errors = conductor.probes(stage)
        notes += [f"{stage.id}: {e}" for e in errors]
        for probe in rendered:
            if probe.name not in seen:
                seen.add(probe.name)
                probes.append(probe)
        for item in stage.collect:
            if "facts." in item.command:
                notes.append(
                    f"{stage.id}: {item.name} is rendered without the facts of earlier stages"
                )
    meta: dict[str, Any] = {}
    for key in ("pod", "namespace"):
        value = conductor.vars.get(key)
        if value not in (None, "") and (key != "namespace" or conductor.vars.get("pod")):
            meta[key] = str(value)
    if conductor.vars.get("cgroup_dir"):
        meta["cgroup_dir"] = str(conductor.vars["cgroup_dir"])
    return {
        "evidence_collect_runbook": runbook.id,
        # a multi-file probe as it runs: framed, reading its token from its input (the module
        # makes one a run and gives it there: transports/framing.py)
        "evidence_collect_probes": [
            {
                "name": p.name,
                "command": framing.script(p.command) if framing.is_multi(p.name) else p.command,
                "timeout": p.timeout,
            }
            for p in probes
        ],
        "evidence_collect_meta": meta,
        "evidence_collect_notes": notes,
    }


def dump_plan(plan: Mapping[str, Any]) -> str:
    """The plan as an extra-vars file (`ansible-playbook … -e @plan.yml`)."""
    header = (
        "# runbook collect plan: the probes of one runbook, rendered for\n"
        "# playbooks/collect.yml (ansible-playbook playbooks/collect.yml -e @THIS_FILE\n"
        "#   -e evidence_collect_dest=DIR); every value is !unsafe: Ansible must not template it\n"
    )
    return header + unsafe_yaml(plan)
