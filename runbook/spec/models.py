"""The runbook model: frozen dataclasses, built by spec.loader from YAML, read by the conductor.

A runbook (YAML; documented in docs/runbook-format.md)::

    id: nccl-init-failure            # [a-z0-9-]+
    title: NCCL communicator init failure
    description: ...
    vars:                            # defaults; `--var k=v` overrides; strings, numbers, bools
      log_dir: /var/log/train
    surfaced_as: facts.applog.surfaced   # optional expression: the error the job showed
    stages:                          # read-only diagnostic stages, walked in order
      - id: cgroup-memory
        title: cgroup memory
        timeout: 30                  # per command, seconds (default 30)
        when: vars.cgroup_dir != ''  # optional: run the stage only if true, else `skipped`
        skip_reason: no cgroup given (--cgroup DIR)  # optional: why, as the walk says it
        collect:                     # bundle file name -> shell command template
          cgroup/memory.events: "cat {{ cgroup_dir }}/memory.events"
        parse: cgroup                # a registered parser name, or a list of names
        decide:                      # rules, in order (see Rule)
          - when: facts.cgroup.oom_kills > 0
            finding: "{{ facts.cgroup.oom_kills }} OOM kills"
            cause: host-memory-oom
            evidence: facts.cgroup.evidence
            propose: [memory-limit]
            next: kernel-logs
          - rule_out: {cause: gpu-hardware, because: "no Xid"}
    remedies:                        # the only place a change may be declared
      - id: memory-limit
        kind: memory-limit           # a remedy kind (runbook.remedies.kinds)
        title: Size the pod memory limit from the measured peak
        summary: "raise limit to {{ ... }}"
        playbook: memory-limit.yml   # under playbooks/
        params: {limit_bytes: "{{ facts.cgroup.peak_bytes * 1.2 }}"}

Every expression (`when`, `evidence`, `surfaced_as`) is a Jinja2 expression compiled in the
sandbox; every template (`collect` commands, `finding`, `summary`, `params`) is rendered in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: DESIGN §5 root-cause ids
ROOT_CAUSES = (
    "host-memory-oom",
    "gpu-memory-oom",
    "gpu-hardware",
    "pcie-error",
    "shm-exhausted",
    "p2p-unavailable",
    "rdma-misconfigured",
    "network-socket",
    "peer-rank-exited",
    "collective-desync",
    "rank-stalled",
    "collective-hung",
    "healthy",
    "inconclusive",
)

#: a `next:` that ends the walk without naming a cause
END = "end"

DEFAULT_TIMEOUT = 30.0

#: why a stage whose `when` is false was skipped, when its runbook gives no `skip_reason`
SKIPPED_BECAUSE = "its condition does not hold"


@dataclass(frozen=True)
class RuleOut:
    cause: str
    because: str


@dataclass(frozen=True)
class Rule:
    """One `decide` entry. Matching rules record their finding/rule_out/proposals in order;
    the first matching rule with `next` or `conclude` routes the walk and stops evaluation.
    A rule without `when` always matches."""

    when: str | None = None
    finding: str | None = None  # template; a finding makes the stage an `anomaly`
    cause: str | None = None  # root-cause id this finding points to
    #: `else: true`: the rule is considered only when none of the rules of its chain (the rules
    #: just above it back to the first without `else`) matched: if / elif / else
    otherwise: bool = False
    #: its causal role (runbook.signatures.ROLES); default: its evidence's, else `cause` when
    #: it names one, else `local-error`. `context` findings are listed apart ("also seen")
    role: str | None = None
    evidence: str | None = None  # expression -> dict or list of {source, line, time, text}
    next: str | None = None  # a stage id, or END
    conclude: str | None = None  # a root-cause id: end the walk with it
    propose: tuple[str, ...] = ()  # remedy ids
    rule_out: tuple[RuleOut, ...] = ()
    line: int = 0


@dataclass(frozen=True)
class Collect:
    name: str  # bundle file name, e.g. `dmesg.txt`, `cgroup/memory.events`
    command: str  # template
    line: int = 0


@dataclass(frozen=True)
class Derive:
    """A fact computed from the facts, after the stage's parsers and before its rules,
    available as `facts.derived.<name>` from then on: `derive: [name]` names one decided in
    Python (runbook.derived; `expression` None), `derive: {name: expression}` one written as
    an expression."""

    name: str
    expression: str | None = None
    line: int = 0


@dataclass(frozen=True)
class Stage:
    id: str
    title: str
    collect: tuple[Collect, ...] = ()
    parse: tuple[str, ...] = ()
    derive: tuple[Derive, ...] = ()
    decide: tuple[Rule, ...] = ()
    when: str | None = None
    #: why the stage is skipped when its `when` is false: a sentence for the walk and the
    #: verdict (say how to run it), never an expression; default SKIPPED_BECAUSE
    skip_reason: str = ""
    timeout: float = DEFAULT_TIMEOUT
    description: str = ""
    #: `all`: every rule whose `when` holds records its finding; `first`: only the first one
    #: does (a later rule is the `else` of the earlier ones: no pasted negations)
    match: str = "all"
    line: int = 0


@dataclass(frozen=True)
class Remedy:
    id: str
    kind: str
    title: str
    summary: str = ""
    playbook: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    line: int = 0


@dataclass(frozen=True)
class Runbook:
    id: str
    title: str
    stages: tuple[Stage, ...]
    description: str = ""
    vars: dict[str, Any] = field(default_factory=dict)
    remedies: tuple[Remedy, ...] = ()
    surfaced_as: str | None = None
    path: str = ""

    def stage(self, stage_id: str) -> Stage:
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(stage_id)

    @property
    def parsers(self) -> frozenset[str]:
        """Every parser its stages name."""
        return frozenset(name for stage in self.stages for name in stage.parse)

    def remedy(self, remedy_id: str) -> Remedy:
        for remedy in self.remedies:
            if remedy.id == remedy_id:
                return remedy
        raise KeyError(remedy_id)
