"""Which kernel lines are errors even when no record or signature names them: the line the
verdict reports as `unrecognized` when it comes before everything else that went wrong (a new
driver message nobody catalogued, before the ranks that lost their peer).

Narrow on purpose, so that a healthy node stays healthy: a kernel log is full of words like
"error" that are no fault of the job (`ACPI BIOS Error (bug)`, `EDAC … 0 errors`, the corrected
PCIe AER reports a storm repeats by the million). A kernel line is an error line here when

- the NVIDIA driver or an RDMA driver logged it (`NVRM:`, `nvidia`, `nvidia-nvlink:`,
  `nvidia-modeset:`, `mlx5_core`, `ib_core`, …) and it says something failed (`failed`,
  `Failed`, an `NV_ERR_…` status, `timed out`); ordinary driver output (`NVRM: loading …`,
  `NVRM: GPU at PCI:…`) says no such thing; or
- its severity, where the log shows one (`dmesg -x`: `kern  :crit  : …`; `dmesg -r`:
  `<2>[…] …`), is crit, alert or emerg. The err level alone is not enough: firmware tables
  and unrelated devices log there on healthy nodes.

Records the kernel parser knows (OOM kills, Xids, AER, pinning failures) and lines the
signature catalog names are taken before this is asked. Pure.
"""

from __future__ import annotations

import re

#: literal words one of which every error line here holds: the kernel log's pre-filter adds
#: them to its keywords (runbook/parsers/scan.py), so such a line reaches the parser. None of
#: them is in ordinary driver output or a corrected AER report.
KEYWORDS = (
    "failed", "Failed", "FAILED", "NV_ERR_", "timed out", ":crit", ":alert", ":emerg", "<0>[",
    "<1>[", "<2>[",
)  # fmt: skip

_DRIVER = re.compile(
    r"^(?:NVRM|nvidia(?:-[a-z]+)?|mlx[45]_(?:core|ib)|ib_(?:core|uverbs|ipoib)|infiniband"
    r"|nv_peer_mem|nvidia_peermem|nvidia-fs|efa|irdma)\b"
)
_FAILED = re.compile(r"\b(?:failed|Failed|FAILED|timed out)\b|\bNV_ERR_[A-Z_]+")
_SEVERE = re.compile(r"^(?:[a-z]+\s*:(?:crit|alert|emerg)\s*: |<[0-2]>\[)")


def kernel_error(raw: str, message: str) -> bool:
    """The kernel line `raw` (its message without the stamp: `message`) is an error line (see
    the module docstring)."""
    if _SEVERE.match(raw):
        return True
    return bool(_DRIVER.match(message) and _FAILED.search(message[:1000]))
