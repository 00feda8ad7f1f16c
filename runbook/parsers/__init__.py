"""Pure parsers, one module per evidence source; importing this package registers them all."""

from runbook.parsers import (  # noqa: F401
    applog,
    cgroup,
    clock,
    dmesg,
    generic,
    host,
    journal,
    kube,
    nccl_log,
    nccl_tests,
    nvidia_smi,
    rdma,
)
from runbook.parsers.registry import ParserEntry, get, names, register

__all__ = ["ParserEntry", "get", "names", "register"]
