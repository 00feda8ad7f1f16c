"""Shims for the Ansible tests' test hosts (see all_reduce_perf.py)."""

from __future__ import annotations

from pathlib import Path

from tests.hosts.harness import TestHost

AB_SHIM = Path(__file__).with_name("all_reduce_perf.py")


def install_ab_all_reduce_perf(host: TestHost) -> Path:
    """Put the A/B ``all_reduce_perf`` first on ``host``'s PATH; return the file each call of
    it is logged to (one JSON line: argv and NCCL_* environment; absent until it is run)."""
    host.write_shim("all_reduce_perf", AB_SHIM.read_text())
    return host.shim_dir / "all_reduce_perf.calls"
