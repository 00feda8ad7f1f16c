"""The built-in demo: a recorded incident bundle shipped with the package.

`incident/` reconstructs the published host-memory OOM incident from its figures: eight
PCIe-only Blackwell GPUs (NODE/SYS topology, P2P all OK, no NVLink), an RDMA label with no RDMA
device, NVIDIA pinning failures of 0x100000 and 0x400000 pages, the pod cgroup at
`usage 671088640kB, limit 671088640kB` (640 GiB), two ranks OOM-killed, and the survivors
reporting `ncclCommInitRank failed: unhandled cuda error` half a minute later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path


@contextlib.contextmanager
def incident_bundle() -> Iterator[Path]:
    with resources.as_file(resources.files("runbook.demo") / "incident") as path:
        yield Path(path)


def workload_manifest() -> str:
    """The incident's Job manifest (`workload.yaml`), the file the demo's fixes patch a copy of."""
    return (resources.files("runbook.demo") / "workload.yaml").read_text(encoding="utf-8")
