"""GPU tools for the recovery check's test hosts: real-format output from shims (no GPU here).

``nvidia-smi`` replays a stored node profile (tests/scenarios/shims.py's case shim), and
``all_reduce_perf`` / ``mpirun`` are the one env-aware program, tests/tools/all_reduce_perf.py,
driven by the JSON :mod:`tests.tools.collective` writes next to it (see that file for the keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.hosts.harness import TestHost
from tests.scenarios import shims as scenario_shims
from tests.tools import collective
from tests.tools.collective import calls, configure

__all__ = ["calls", "configure", "install", "node_profile"]

HERE = Path(__file__).parent
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
    return collective.install(host, behaviour)
