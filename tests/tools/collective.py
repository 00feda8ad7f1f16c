"""The collective programs on a test host: the one ``all_reduce_perf`` shim (all_reduce_perf.py
next to this file, installed as ``all_reduce_perf`` and ``mpirun``) and the JSON that says how
the node behaves (see that file for the keys). Used by the recovery check's hosts
(tests/recovery/shims) and by the Ansible A/B remedy's (tests/ansible, tests/scenarios)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.hosts.harness import TestHost

PROGRAM = Path(__file__).with_name("all_reduce_perf.py")
CONFIG = "all_reduce_perf.json"
CALLS = "all_reduce_perf.calls"

#: the A/B remedy's node: 8 PCIe Blackwell GPUs over SHM whose InfiniBand fails at communicator
#: init (ibv_reg_mr), so NET/IB exits 3 and NCCL_IB_DISABLE=1 (NET/Socket) completes the table
AB_NODE: dict[str, Any] = {
    "model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "transport": "SHM/direct/direct",
    "nics": ["mlx5_0", "mlx5_1"],
    "peak_busbw": 25.0,
    "ib_fault": "reg_mr",
}


def install(host: TestHost, behaviour: Mapping[str, Any]) -> Path:
    """``all_reduce_perf`` and ``mpirun`` first on `host`'s PATH, behaving as `behaviour`
    says; returns the file each call is logged to (absent until one runs)."""
    configure(host, behaviour)
    program = PROGRAM.read_text()
    host.write_shim("all_reduce_perf", program)
    host.write_shim("mpirun", program)
    return host.shim_dir / CALLS


def configure(host: TestHost, behaviour: Mapping[str, Any]) -> None:
    """Change how the node behaves from now on (and forget earlier calls)."""
    (host.shim_dir / CONFIG).write_text(json.dumps(dict(behaviour)))
    (host.shim_dir / CALLS).unlink(missing_ok=True)


def calls(host: TestHost) -> list[dict[str, Any]]:
    """Each call so far: ``prog``, ``argv`` and the NCCL_* ``env``."""
    path = host.shim_dir / CALLS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def install_ab_all_reduce_perf(host: TestHost) -> Path:
    """The A/B remedy's node (:data:`AB_NODE`) on `host`; returns the file each call of
    ``all_reduce_perf`` is logged to (one JSON line: prog, argv and NCCL_* environment)."""
    return install(host, AB_NODE)
