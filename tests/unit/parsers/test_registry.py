"""Every evidence parser is registered, and with nothing collected says so in JSON."""

from __future__ import annotations

import json

import pytest

from runbook.parsers import names, registry

from .helpers import missing

PARSERS = ["dmesg", "cgroup", "applog", "kube", "nvidia_smi", "rdma", "host", "nccl_log",
           "nccl_tests", "journal", "clock"]


def test_importing_the_package_registers_every_evidence_parser() -> None:
    assert set(PARSERS) <= names()


@pytest.mark.parametrize("name", PARSERS)
def test_a_parser_given_no_files_reports_not_collected_as_json(name: str) -> None:
    facts = registry.get(name).func({}, {})
    json.dumps(facts)
    assert facts["collected"] is False


@pytest.mark.parametrize("name", PARSERS)
def test_a_parser_given_uncollected_files_reports_not_collected(name: str) -> None:
    files = {n: missing(n) for n in ("dmesg.txt", "cgroup/memory.max", "app/rank-0.log",
                                    "pod.json", "node.json", "nvidia-smi-L.txt",
                                    "dev-infiniband.txt", "meminfo.txt", "df-shm.txt",
                                    "nccl/a.log", "nccl-tests/baseline.txt",
                                    "journal-kubelet.txt", "clock.txt")}
    facts = registry.get(name).func(files, {"page_size": 4096})
    json.dumps(facts)
    assert facts["collected"] is False
