"""NVIDIA DCGM's active diagnostic, `dcgmi diag -r 1`, as evidence (the dcgm-diag stage, run
only when asked: it occupies the GPUs for a while).

Formats read (samples and their sources: tests/unit/parsers/samples/dcgm/README.md): the
`Diagnostic | Result` table of DCGM 2.x-3.x (`Fail - GPU: 0`, `Pass - All`, and `Warning`,
`Error` and `Info` rows whose text DCGM wraps mid-word) and of 4.x (`software | Pass`
followed by `GPU0: Pass` rows). No dcgmi or no host engine is "DCGM not available", as for
the health check (runbook.parsers.dcgm).

A `Fail`, or an `Error` row that names the hardware (uncorrectable memory errors, row remaps),
is a `hardware_failure` unless its text is a software or configuration fault (a CUDA API error,
an unsupported driver/CUDA pairing); `Warn` is a `warning`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runbook.parsers._common import clip, is_collected, iter_lines
from runbook.parsers.dcgm import evidence, table_cells, unavailable_reason
from runbook.parsers.registry import Files, register

F_DIAG = "dcgmi-diag.txt"

#: a diag failure whose text says software or configuration, not the GPU
_SOFTWARE_FAULT = re.compile(
    r"Error using CUDA API|driver combination|CUDA_ERROR_|cudaError|Persistence mode"
    r"|environment variable|Permission|libnvidia-ml|NVML library|could not load"
    r"|Check DCGM and system configuration|not supported",
    re.IGNORECASE,
)
#: an `Error` row (the diag could not run a test) that names the hardware
_HARDWARE_ERROR = re.compile(
    r"uncorrectable|row remap|retired page|page retirement|\bECC\b|double.bit|fallen off"
    r"|NvLink|\bXid\b|InfoROM",
    re.IGNORECASE,
)
#: diag tests that read the hardware even in the Deployment section
_HARDWARE_TESTS = re.compile(r"page retirement|row remap|inforom", re.IGNORECASE)


# --- diag -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiagResult:
    section: str
    test: str
    #: Pass, Fail, Warn, Skip; `Error` for an Error row (the diag could not run a test)
    result: str
    failed_gpus: tuple[int, ...]
    details: tuple[str, ...]
    hardware: bool
    source: str
    line: int
    time: str | None = None
    text: str = ""


@dataclass(frozen=True)
class DiagFacts:
    version: str | None
    results: tuple[DiagResult, ...]
    recognized: bool


_RANK = {"Fail": 4, "Error": 4, "Warn": 3, "Warning": 3, "Pass": 1, "Skip": 0}


@dataclass
class _Test:
    section: str
    test: str
    result: str
    line: int
    text: str
    failed_gpus: list[int] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    def done(self, source: str) -> DiagResult:
        failing = self.result in ("Fail", "Error")
        detail = " ".join(self.details)
        hardware = failing and not _SOFTWARE_FAULT.search(detail) and (
            (self.result == "Error" and bool(_HARDWARE_ERROR.search(detail)))
            or (self.result == "Fail" and (self.section.lower() not in ("deployment", "metadata")
                                           or bool(_HARDWARE_TESTS.search(self.test))))
        )  # fmt: skip
        text = clip(f"{self.test}: {self.result}" + (f" - {detail}" if detail else ""))
        return DiagResult(self.section, self.test, self.result, tuple(self.failed_gpus),
                          tuple(self.details), hardware, source, self.line, None, text)  # fmt: skip


def _result_word(value: str) -> str | None:
    m = re.match(r"(Pass|Fail|Warn|Skip)\b", value.strip())
    return m.group(1) if m else None


def _gpu_ids(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def parse_diag(text: str, *, source: str = F_DIAG) -> DiagFacts:
    version: str | None = None
    section = ""
    results: list[DiagResult] = []
    current: _Test | None = None
    detail_open = False  # the last row began a Warning/Error/Info text that may wrap
    recognized = False

    def close() -> None:
        nonlocal current
        if current is not None:
            results.append(current.done(source))
            current = None

    for n, line in enumerate(iter_lines(text), 1):
        m = re.match(r"^[|+]-{5}\s+(\w[\w ]*?)\s+-+[|+]", line.strip())
        if m:
            close()
            section, detail_open, recognized = m.group(1), False, True
            continue
        cells = table_cells(line)
        if cells is None:
            continue
        left, right = cells
        value = right.strip()
        if left == "Diagnostic" and value == "Result":
            recognized = True
            continue
        if section == "Metadata":
            if left == "DCGM Version":
                version = value
            continue
        if left in ("Warning", "Error", "Info"):
            if left == "Error" and current is None:
                current = _Test(section or "Deployment", "Error", "Error", n, line)
            if current is not None and left != "Info":
                current.details.append(right.strip())
                detail_open = True
            else:
                detail_open = False
            continue
        if not left:
            word = _result_word(value)
            # 3.x `Fail - GPU: 0`, 4.x `GPU0: Fail`
            m = re.match(r"GPU\s*(\d+)\s*:\s*(Pass|Fail|Warn|Skip)", value)
            if current is not None and (word or m):
                detail_open = False
                res = m.group(2) if m else (word or "")
                if res == "Fail":
                    current.failed_gpus += [int(m.group(1))] if m else _gpu_ids(value)
                if _RANK.get(res, 0) > _RANK.get(current.result, 0):
                    current.result = res
            elif current is not None and detail_open and current.details:
                current.details[-1] += right  # DCGM wraps these mid-word: join as printed
            continue
        word = _result_word(value)
        if word is None:
            continue
        close()
        recognized, detail_open = True, False
        current = _Test(section, left, word, n, line)
        if word == "Fail" and "GPU" in value:
            current.failed_gpus += _gpu_ids(value.split("-", 1)[-1])
    close()
    return DiagFacts(version, tuple(results), recognized)


@register("dcgm_diag", "dcgmi diag -r 1: DCGM's active diagnostic, per test and GPU")
def dcgm_diag_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    """The diag's results; a Fail that is the hardware's, apart from software faults."""
    result = files.get(F_DIAG)
    out: dict[str, Any] = {"collected": result is not None and result.collected}
    reason = unavailable_reason(result)
    if reason is not None:
        out.update(available=False, unavailable_reason=reason)
        return out
    if not is_collected(result):
        return out
    out.update(available=True, unavailable_reason=None)
    diag = parse_diag(result.stdout)
    out["ran"] = diag.recognized
    out["version"] = diag.version
    out["results"] = [evidence(r) for r in diag.results]
    failing = [r for r in diag.results if r.result in ("Fail", "Error")]
    out["hardware_failures"] = [evidence(r) for r in failing if r.hardware]
    out["other_failures"] = [evidence(r) for r in failing if not r.hardware]
    out["warnings"] = [evidence(r) for r in diag.results if r.result == "Warn"]
    out["passed"] = diag.recognized and not failing
    if result.stdout.strip() and not diag.recognized:
        out["recognized"] = False
    return out
