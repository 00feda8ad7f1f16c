"""Every evidence parser is registered, and with nothing collected says so in JSON. A parser's
module is imported only when a runbook asks for it, and the map of shipped parsers is the
truth: every module registers exactly the names the map gives it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runbook.parsers import names, registry

from .helpers import missing

PARSERS = ["dmesg", "cgroup", "applog", "kube", "nvidia_smi", "rdma", "host", "nccl_log",
           "nccl_tests", "journal", "clock"]
PARSER_DIR = Path(registry.__file__).parent


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


def test_the_map_names_every_parser_each_module_registers() -> None:
    entries = registry.load_all()
    assert set(entries) == set(registry.BUILTIN)
    for name, module in registry.BUILTIN.items():
        assert entries[name].func.__module__ == f"runbook.parsers.{module}", name
    # every module that registers a parser is in the map
    registering = {
        p.stem for p in PARSER_DIR.glob("*.py") if "@register(" in p.read_text(encoding="utf-8")
    }
    assert registering == set(registry.BUILTIN.values())


def test_asking_for_one_parser_imports_only_its_module() -> None:
    code = (
        "import sys\n"
        "from runbook import parsers\n"
        "assert 'runbook.parsers.dmesg' not in sys.modules\n"
        "parsers.get('text')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('runbook.parsers.'))\n"
        "print(' '.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "runbook.parsers.generic" in loaded
    assert not loaded & {"runbook.parsers.dmesg", "runbook.parsers.applog",
                         "runbook.parsers.nvidia_smi"}, loaded  # fmt: skip
