"""A verdict as node-problem-detector's custom-plugin result: an exit status and one short line.

NPD's custom plugin monitor runs a command on the node every `invoke_interval` and sets a
node condition from its exit status — 0 OK, 1 NonOK (the problem is present), 2 Unknown —
with its standard output, cut to `max_output_length` (80 by default), as the condition's
message. A condition is something a remediation controller or an operator acts on, so the
bar for NonOK is the bar this project already has for taking a node out of service:

- **1 (NonOK)**: the verdict proposes `node-drain` — hardware evidence (a fatal Xid, a GPU
  fallen off the bus, uncorrectable ECC, a DCGM health failure, a fatal AER) that the runbook
  judges worth a drain. A job's own fault (host or GPU memory OOM, a full /dev/shm, a peer's
  exception) is not the node's and never sets the condition; neither is a DCGM warning.
- **0 (OK)**: no drain, and the hardware evidence was read: GPU hardware and PCIe faults were
  each ruled out or found below the drain bar (an Xid NVIDIA says to restart the job for) —
  whatever else the verdict says (a job's OOM; `inconclusive` about the job, common on a node
  where no job ran).
- **2 (Unknown)**: the check could not say: the target or the runbook failed, or GPU hardware
  or PCIe faults were neither found nor ruled out (the kernel log could not be read). Unknown
  rather than OK, because "could not look" is not "looked and found nothing".

Pure: takes the verdict, returns the status and the line.
"""

from __future__ import annotations

from dataclasses import dataclass

from runbook.remedies import kinds
from runbook.verdict import Verdict

OK = 0
NON_OK = 1
UNKNOWN = 2

#: NPD's default `max_output_length`
DEFAULT_MAX_LENGTH = 80
#: what must be ruled out for OK: the causes a drain answers
HARDWARE_CAUSES = kinds.drain_root_causes()


@dataclass(frozen=True)
class NpdResult:
    status: int
    message: str


def fit(message: str, max_length: int = DEFAULT_MAX_LENGTH) -> str:
    """One line of at most `max_length` characters (NPD would cut it anyway, mid-word)."""
    line = " ".join(message.split())
    if len(line) <= max_length:
        return line
    return line[: max(0, max_length - 3)].rstrip() + "..."


def from_verdict(verdict: Verdict, max_length: int = DEFAULT_MAX_LENGTH) -> NpdResult:
    drains = [p for p in verdict.proposals if kinds.takes_node_out(p.kind)]
    if drains:
        cause = next((f for f in verdict.chain if f.cause == verdict.root_cause), None)
        what = cause.finding if cause else drains[0].summary
        return NpdResult(NON_OK, fit(f"{verdict.root_cause}: {what}", max_length))
    # a hardware cause was looked at when it was ruled out, or found (and judged below the
    # drain bar: an Xid NVIDIA says to restart the job for, a DCGM warning)
    found = {f.cause for f in (*verdict.chain, *verdict.also_seen) if f.cause}
    looked = {r.cause for r in verdict.ruled_out} | found
    missing = [c for c in HARDWARE_CAUSES if c not in looked]
    if not missing:
        below = next((f for f in verdict.chain if f.cause in HARDWARE_CAUSES), None)
        if below is not None:
            return NpdResult(OK, fit(f"{below.cause} below the drain bar: {below.finding}",
                                     max_length))  # fmt: skip
        return NpdResult(OK, fit(f"no GPU or PCIe fault (verdict: {verdict.root_cause})",
                                 max_length))  # fmt: skip
    return NpdResult(
        UNKNOWN,
        fit(f"{' and '.join(missing)} not ruled out (verdict: {verdict.root_cause}, "
            f"{verdict.confidence})", max_length),
    )  # fmt: skip


def from_error(message: str, max_length: int = DEFAULT_MAX_LENGTH) -> NpdResult:
    """The check itself failed (unreachable target, bad runbook): Unknown."""
    return NpdResult(UNKNOWN, fit(f"check failed: {message}", max_length))
