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

#: literal words one of which every error line of a driver holds: the kernel log's pre-filter
#: adds them to its keywords (runbook/parsers/scan.py), so such a line reaches the parser. None
#: of them is in ordinary driver output or a corrected AER report. (`ailed`: failed, Failed.)
KEYWORDS = ("ailed", "NV_ERR_", "timed out")
#: the severities' words, for a log that shows them (SEVERITY_KEYWORDS_IF): only then, as six
#: more short literals cost the keyword search a fifth of its time over every log
SEVERITY_KEYWORDS = (":crit", ":alert", ":emerg", "<0>[", "<1>[", "<2>[")
#: a log whose first line shows its severity (`dmesg -x`, `dmesg -r`); `dmesg -T`, what the
#: runbooks collect, shows none
_SHOWS_SEVERITY = re.compile(r"^(?:[a-z]+\s*:[a-z]+\s*: |<\d>\[)")

#: the drivers a training job's GPUs and fabric go through; not the display's (`nvidia-modeset:
#: ERROR: GPU:0: Idling display engine timed out` is common on a healthy headless node)
_DRIVER = re.compile(
    r"^(?:NVRM|nvidia(?:-(?:nvlink|uvm|peermem|fs|nvswitch\d*))?|nvidia_peermem|nv_peer_mem"
    r"|mlx[45]_(?:core|ib)|ib_(?:core|uverbs|ipoib)|infiniband|efa|irdma)(?![\w-])"
)
_FAILED = re.compile(r"\b(?:failed|Failed|timed out)\b|\bNV_ERR_[A-Z_]+")
_SEVERE = re.compile(r"^(?:[a-z]+\s*:(?:crit|alert|emerg)\s*: |<[0-2]>\[)")


def kernel_error(raw: str, message: str) -> bool:
    """The kernel line `raw` (its message without the stamp: `message`) is an error line (see
    the module docstring)."""
    if _SEVERE.match(raw):
        return True
    return bool(_DRIVER.match(message) and _FAILED.search(message[:1000]))


def severity_keywords(head: str) -> tuple[str, ...]:
    """SEVERITY_KEYWORDS when the log's first line (`head`) shows a severity, else none."""
    return SEVERITY_KEYWORDS if _SHOWS_SEVERITY.match(head) else ()
