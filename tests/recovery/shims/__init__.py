"""GPU tools for the recovery check's test hosts: real-format output from shims (no GPU here).

``nvidia-smi`` replays a stored node profile (tests/scenarios/shims.py's case shim), and
``all_reduce_perf`` / ``mpirun`` are the env-aware program in all_reduce_perf.py, driven by a
``recovery-shim.json`` written next to it (see that file for the keys).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.hosts.harness import TestHost
from tests.scenarios import shims as scenario_shims

HERE = Path(__file__).parent
PROGRAM = HERE / "all_reduce_perf.py"
NODE_DATA = HERE.parent / "node-data"
NVIDIA_SMI_KEYS = ("nvidia-smi-L", "nvidia-smi-q", "nvidia-smi-topo-m")


def node_profile(name: str) -> dict[str, scenario_shims.Output]:
    """nvidia-smi outputs of a profile: ours under tests/recovery/node-data, else the
    scenarios' (``healthy-8gpu``: 8 PCIe-only Blackwell GPUs)."""
    base = NODE_DATA / name
    if not base.is_dir():
        stored = scenario_shims.load_profile(name)
        return {k: v for k, v in stored.items() if k in NVIDIA_SMI_KEYS}
    return {
        key: scenario_shims.Output((base / f"{key}.txt").read_text())
        for key in NVIDIA_SMI_KEYS
        if (base / f"{key}.txt").exists()
    }


def install(host: TestHost, profile: str, behaviour: Mapping[str, Any]) -> Path:
    """nvidia-smi of `profile` and the collective programs behaving as `behaviour` says;
    returns the file each all_reduce_perf / mpirun call is logged to."""
    scenario_shims.install(host, node_profile(profile))
    configure(host, behaviour)
    program = PROGRAM.read_text()
    host.write_shim("all_reduce_perf", program)
    host.write_shim("mpirun", program)
    return host.shim_dir / "all_reduce_perf.calls"


def configure(host: TestHost, behaviour: Mapping[str, Any]) -> None:
    """Change how the node behaves from now on (and forget earlier calls)."""
    (host.shim_dir / "recovery-shim.json").write_text(json.dumps(dict(behaviour)))
    (host.shim_dir / "all_reduce_perf.calls").unlink(missing_ok=True)


def calls(host: TestHost) -> list[dict[str, Any]]:
    path = host.shim_dir / "all_reduce_perf.calls"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
