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
  A GPU node whose NVIDIA driver is gone or broken sets it too (`gpu_driver_problem`): nvidia-smi
  not installed (exit 127), the driver not loaded (exit 9, "couldn't communicate with the
  NVIDIA driver"), NVML missing or mismatched, or no device found, on a node that has NVIDIA
  GPUs on its PCI bus or is labelled a GPU node: no GPU job can run there.
- **0 (OK)**: no drain, and the hardware evidence was read: GPU hardware and PCIe faults were
  each ruled out or found below the drain bar (an Xid NVIDIA says to restart the job for) —
  whatever else the verdict says (a job's OOM; `inconclusive` about the job, common on a node
  where no job ran). On a node with no NVIDIA device on its PCI bus (no GPU by design) the
  missing nvidia-smi is expected and the message says there is no GPU here.
- **2 (Unknown)**: the check could not say: the target or the runbook failed, or GPU hardware
  or PCIe faults were neither found nor ruled out (the kernel log could not be read), or the
  driver does not answer and nothing says whether the node has a GPU (no lspci, no node
  labels). Unknown rather than OK, because "could not look" is not "looked and found nothing".

Pure: takes the verdict, returns the status and the line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runbook import derived
from runbook.remedies import kinds
from runbook.verdict import StageSummary, Verdict

OK = 0
NON_OK = 1
UNKNOWN = 2

#: NPD's default `max_output_length`
DEFAULT_MAX_LENGTH = 80
#: what must be ruled out for OK: the causes a drain answers
HARDWARE_CAUSES = kinds.drain_root_causes()
#: the stages that read the GPUs (nvidia-smi, lspci) and the node object (its labels)
GPU_STAGE = "gpu-pcie"
NODE_STAGE = "rank-lifecycle"
#: labels GPU feature discovery / the GPU operator put on a GPU node (the derived facts' own)
_GPU_LABELS = derived.GPU_LABELS


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


def _facts(stage: StageSummary | None, parser: str) -> Mapping[str, Any]:
    facts = stage.facts.get(parser) if stage is not None else None
    return facts if isinstance(facts, Mapping) else {}


def _mapping(value: Any, key: str) -> Mapping[str, Any]:
    inner = value.get(key) if isinstance(value, Mapping) else None
    return inner if isinstance(inner, Mapping) else {}


def gpu_driver_problem(verdict: Verdict) -> tuple[str, str] | None:
    """(what is wrong with the NVIDIA driver, how nvidia-smi showed it): `("missing",
    "nvidia-smi not found")`, `("not loaded", "nvidia-smi exit 9")`, … or None: nvidia-smi
    listed GPUs, or was not asked (a bundle without its files, a stage not walked), or failed
    in a way that says nothing of the driver (a timeout, a permission)."""
    stage = verdict.stage(GPU_STAGE)
    if stage is None or stage.status == "skipped":
        return None
    smi = _facts(stage, "nvidia_smi")
    if smi.get("gpu_count"):
        return None
    if any(
        name.startswith("nvidia-smi") and why == "command not found"
        for name, why in stage.not_collected.items()
    ):
        return "missing", "nvidia-smi not found"
    code = smi.get("exit_code")
    said = " ".join(
        str(e.get("text") or "") for e in smi.get("exit_evidence") or () if isinstance(e, Mapping)
    )
    # the one table of what nvidia-smi says of the driver (runbook/derived.py)
    state = derived.driver_state(code if isinstance(code, int) else None, said)
    return (state, f"nvidia-smi exit {code}") if state is not None else None


def gpu_node(verdict: Verdict) -> tuple[bool | None, str]:
    """(whether the node has NVIDIA GPUs, the evidence): the PCI bus (lspci) or the node's
    labels and resources say so; no NVIDIA device on a bus that was read says it has none;
    (None, "") when neither was read."""
    pci = _facts(verdict.stage(GPU_STAGE), "rdma")
    on_bus = pci.get("gpus_on_pci")
    if isinstance(on_bus, int) and on_bus > 0:
        return True, f"{on_bus} NVIDIA GPU(s) on the PCI bus"
    node = _facts(verdict.stage(NODE_STAGE), "kube").get("node")
    labels = _mapping(node, "labels")
    label = next((k for k in _GPU_LABELS if str(labels.get(k, "")).lower() == "true"), None)
    if label is not None:
        return True, f"labelled {label}"
    gpus = str(_mapping(node, "extended_resources").get("nvidia.com/gpu") or "0")
    if gpus != "0":
        return True, f"nvidia.com/gpu: {gpus} allocatable"
    if on_bus == 0:
        return False, "no NVIDIA GPU on the PCI bus"
    return None, ""


def _driver_result(verdict: Verdict, problem: tuple[str, str], max_length: int) -> NpdResult | None:
    """The driver does not answer: a problem on a GPU node, expected on a node without a GPU,
    Unknown when nothing says which the node is; None on a node without a GPU whose PCIe was
    not looked at (the general rule then says Unknown)."""
    state, how = problem
    has_gpu, why = gpu_node(verdict)
    if has_gpu:
        return NpdResult(NON_OK, fit(f"NVIDIA driver {state}: {how}; {why}", max_length))
    if has_gpu is None:
        return NpdResult(
            UNKNOWN,
            fit(f"{how}, and neither lspci nor node labels say if a GPU is here", max_length),
        )
    looked = {r.cause for r in verdict.ruled_out} | {
        f.cause for f in (*verdict.chain, *verdict.also_seen) if f.cause
    }
    if "pcie-error" not in looked:
        return None
    return NpdResult(
        OK, fit(f"no GPU here ({why}), no PCIe fault (verdict: {verdict.root_cause})", max_length)
    )


def from_verdict(verdict: Verdict, max_length: int = DEFAULT_MAX_LENGTH) -> NpdResult:
    drains = [p for p in verdict.proposals if kinds.takes_node_out(p.kind)]
    if drains:
        cause = next((f for f in verdict.chain if f.cause == verdict.root_cause), None)
        what = cause.finding if cause else drains[0].summary
        return NpdResult(NON_OK, fit(f"{verdict.root_cause}: {what}", max_length))
    uncorroborated = next(
        (p for p in verdict.proposals if (p.params or {}).get("corroborate")), None
    )
    if uncorroborated is not None:
        # only an application's words name the fault: never NonOK (a tenant could print the
        # line), and not OK either until the node's own tools have been read
        return NpdResult(
            UNKNOWN,
            fit(f"{verdict.root_cause} named only by the application; the node's own tools "
                "show no fault", max_length),
        )  # fmt: skip
    problem = gpu_driver_problem(verdict)
    if problem is not None:
        result = _driver_result(verdict, problem, max_length)
        if result is not None:
            return result
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
