"""The NCCL_IB_DISABLE A/B comparison, from the two outputs the playbook brought back.

Pure: each case's combined output and exit code in, a comparison out — did it complete,
`#wrong`, average bus bandwidth, the network and channel transports NCCL chose — read with the
same nccl_tests and nccl_log parsers a runbook stage uses, and a one-line conclusion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runbook.parsers.nccl_log import merge, parse_nccl_log
from runbook.parsers.nccl_tests import parse_nccl_tests

CASES = ("ib-enabled", "ib-disabled")


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


def read_case(name: str, output: str, rc: int | None) -> Case:
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
    )


def conclude(enabled: Case, disabled: Case) -> str:
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


def compare(outputs: Mapping[str, tuple[str, int | None]]) -> dict[str, Any]:
    cases = {name: read_case(name, *outputs[name]) for name in CASES if name in outputs}
    result: dict[str, Any] = {"cases": {n: asdict(c) for n, c in cases.items()}}
    if len(cases) == 2:
        result["conclusion"] = conclude(cases["ib-enabled"], cases["ib-disabled"])
    else:
        result["conclusion"] = "incomplete: " + ", ".join(
            f"{n} missing" for n in CASES if n not in cases
        )
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


def render(result: Mapping[str, Any]) -> list[str]:
    rows = []
    for name, case in result.get("cases", {}).items():
        bw = f"{case['avg_busbw']:.2f} GB/s" if case.get("avg_busbw") is not None else "-"
        state = "passed" if case["passed"] else ("completed" if case["completed"] else "failed")
        rows.append(
            f"{name:12} {state:9} #wrong {case['wrong']:<3} busbw {bw:>12}  net "
            f"{case.get('network') or '-'}  transports {','.join(case['transports']) or '-'}"
            + (f"  ({case['failure'][:100]})" if case.get("failure") and not case["passed"] else "")
        )
    rows.append("=> " + str(result.get("conclusion")))
    return rows
