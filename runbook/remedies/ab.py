"""The NCCL_IB_DISABLE A/B comparison, from the two outputs the playbook brought back.

Pure: each case's combined output and exit code in, a comparison out — did it complete,
`#wrong`, average bus bandwidth, the network and channel transports NCCL chose — read with the
same nccl_tests and nccl_log parsers a runbook stage uses, and a one-line conclusion.

A comparison is only made of two cases that ran. A case whose command could not run on the
node — not found (exit 127), not executable (126), stopped by the time limit (124, or 137 from
its KILL), no usable GPU, no output at all — measured nothing: the result says so ("could not
measure: all_reduce_perf not found on gpu-node-01") and `measured` is false, and a case that
ran beside one that did not is reported as such, never compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runbook import not_run
from runbook.parsers.nccl_log import merge, parse_nccl_log
from runbook.parsers.nccl_tests import parse_nccl_tests

CASES = ("ib-enabled", "ib-disabled")
#: the role's default command (nccl_ab_test_command)
COMMAND = "all_reduce_perf"


@dataclass(frozen=True)
class Case:
    name: str
    rc: int | None
    completed: bool
    passed: bool
    wrong: int
    avg_busbw: float | None
    network: str | None
    transports: tuple[str, ...]
    failure: str | None
    #: why the case measured nothing (its command could not run), or None: it ran
    not_run: str | None = None


def not_run_reason(output: str, rc: int | None, *, node: str, command: str = COMMAND) -> str | None:
    """Why a case's command measured nothing on `node`, or None when it ran (runbook.not_run:
    not found, not executable, stopped by the time limit, no usable GPU, nothing printed)."""
    return not_run.reason(output, rc, node=node, program=not_run.program_of(command, COMMAND))


def read_case(
    name: str, output: str, rc: int | None, *, node: str = "the node", command: str = COMMAND
) -> Case:
    lines = output.splitlines()
    tests = parse_nccl_tests(lines, source=f"{name}.log")
    nccl = merge([parse_nccl_log(lines, source=f"{name}.log")])
    failure = None
    if tests.failures:
        failure = str(tests.failures[0].text)
    elif nccl.get("warns"):
        failure = str(nccl["warns"][0].get("text"))
    elif rc not in (0, None):
        failure = f"exit status {rc}"
    return Case(
        name=name,
        rc=rc,
        completed=tests.finished and rc in (0, None),
        passed=tests.passed and rc in (0, None),
        wrong=tests.wrong_total,
        avg_busbw=tests.avg_busbw,
        network=nccl.get("network"),
        transports=tuple(nccl.get("transport_kinds") or ()),
        failure=failure,
        not_run=not_run_reason(output, rc, node=node, command=command)
        or (
            f"it measured nothing about the fabric: {tests.unmeasured}"
            if tests.unmeasured
            else None
        ),
    )


def conclude(enabled: Case, disabled: Case) -> str:
    """The finding of two cases that both ran."""
    if not enabled.passed and disabled.passed:
        return (
            "IB init/transport fails and Socket succeeds: the fault is in the RDMA path "
            "(device, driver, subnet manager or NCCL_IB_* settings), not the GPUs"
        )
    if enabled.passed and disabled.passed:
        a, b = enabled.avg_busbw, disabled.avg_busbw
        ratio = f" ({a:.1f} vs {b:.1f} GB/s)" if a and b else ""
        return "both pass: IB is not what fails" + ratio
    if not enabled.passed and not disabled.passed:
        return "both fail: the fault is not IB-specific (GPU, driver, SHM/P2P or the job itself)"
    return "IB passes but Socket fails: the Socket path (interface selection) is broken"


def _outcome(case: Case) -> str:
    return "passed" if case.passed else ("completed" if case.completed else "failed")


def unmeasured(cases: Mapping[str, Case], *, node: str) -> str | None:
    """Why there is no comparison — a case missing or one that could not run — or None."""
    missing = {n: f"no output came back from {node}" for n in CASES if n not in cases}
    reasons = {**missing, **{n: c.not_run for n, c in cases.items() if c.not_run}}
    if not reasons:
        return None
    ran = [cases[n] for n in CASES if n in cases and n not in reasons]
    if not ran:
        distinct = list(dict.fromkeys(reasons[n] for n in CASES))
        if len(distinct) == 1:
            return f"could not measure: {distinct[0]}"
        return "could not measure: " + "; ".join(f"{n}: {reasons[n]}" for n in CASES)
    (done,) = ran
    (other,) = [n for n in CASES if n in reasons]
    return (
        f"could not compare: {other} did not run ({reasons[other]}); "
        f"{done.name} ran and {_outcome(done)}"
    )


def compare(
    outputs: Mapping[str, tuple[str, int | None]],
    *,
    node: str = "the node",
    command: str = COMMAND,
) -> dict[str, Any]:
    """The comparison of the two cases of one node: `measured` false, and the conclusion the
    reason, when either could not run."""
    cases = {
        name: read_case(name, *outputs[name], node=node, command=command)
        for name in CASES
        if name in outputs
    }
    result: dict[str, Any] = {"cases": {n: asdict(c) for n, c in cases.items()}}
    reason = unmeasured(cases, node=node)
    result["measured"] = reason is None
    if reason is None:
        result["conclusion"] = conclude(cases["ib-enabled"], cases["ib-disabled"])
    else:
        result["conclusion"] = reason
    return result


def read_dir(path: Path) -> dict[str, tuple[str, int | None]]:
    """The playbook's `<output_dir>/<host>/{case}.log` and `.rc` files."""
    outputs: dict[str, tuple[str, int | None]] = {}
    for name in CASES:
        log = path / f"{name}.log"
        if not log.is_file():
            continue
        rc_file = path / f"{name}.rc"
        rc: int | None = None
        if rc_file.is_file():
            text = rc_file.read_text(encoding="utf-8", errors="replace").strip()
            rc = int(text) if text.lstrip("-").isdigit() else None
        outputs[name] = (log.read_text(encoding="utf-8", errors="replace"), rc)
    return outputs


def not_measured(comparisons: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Why a run's comparisons (one per node) measured nothing usable, or None: every node's
    two cases ran. No node at all is no measurement either."""
    if not comparisons:
        return "could not measure: no node's output came back"
    reasons = [str(c.get("conclusion")) for c in comparisons.values() if not is_measured(c)]
    return "; ".join(reasons) if reasons else None


def is_measured(comparison: Mapping[str, Any]) -> bool:
    """A comparison made before `measured` was recorded: measured when both cases are there."""
    if "measured" in comparison:
        return bool(comparison["measured"])
    return all(n in (comparison.get("cases") or {}) for n in CASES)


def render(result: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, case in result.get("cases", {}).items():
        if case.get("not_run"):
            rows.append(f"{name:12} {'not run':9} {case['not_run']}")
            continue
        bw = f"{case['avg_busbw']:.2f} GB/s" if case.get("avg_busbw") is not None else "-"
        state = "passed" if case["passed"] else ("completed" if case["completed"] else "failed")
        rows.append(
            f"{name:12} {state:9} #wrong {case['wrong']:<3} busbw {bw:>12}  net "
            f"{case.get('network') or '-'}  transports {','.join(case['transports']) or '-'}"
            # whole (the parsers clip evidence to 300 characters): what follows "/" in
            # nccl-tests' failure line is the cause, and a cut at 100 hid it mid-word
            + (f"  ({case['failure']})" if case.get("failure") and not case["passed"] else "")
        )
    rows.append("=> " + str(result.get("conclusion")))
    return rows
