"""Benchmark: reading an inventory for a sweep, `ansible-inventory --list` in a subprocess (what
runbook.sweep.inventory does) against ansible's InventoryManager + VariableManager in-process,
each in a fresh Python process as a sweep would pay it (interpreter start not counted).

Inventories: a small directory (two groups, group_vars, host_vars) and a 1000-host INI file.

Run:  .venv/bin/python -m benchmarks.sweep_inventory [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.tools.ansible_env import ansible_dirs

IN_PROCESS = """
import sys, time
start = time.perf_counter()
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager
loader = DataLoader()
inventory = InventoryManager(loader=loader, sources=[sys.argv[1]])
variables = VariableManager(loader=loader, inventory=inventory)
hosts = {h.name: variables.get_vars(host=h, include_hostvars=False) for h in inventory.get_hosts()}
assert hosts
print(time.perf_counter() - start)
"""

SUBPROCESS = """
import sys, time
start = time.perf_counter()
from runbook.sweep.inventory import load_inventory
assert load_inventory(sys.argv[1])
print(time.perf_counter() - start)
"""


def _inventories(root: Path) -> dict[str, Path]:
    small = root / "small"
    (small / "group_vars").mkdir(parents=True)
    (small / "host_vars").mkdir()
    (small / "hosts.ini").write_text("[rack1]\nn1\nn2\n[rack2]\nn3\n[gpu:children]\nrack1\nrack2\n")
    (small / "group_vars" / "gpu.yml").write_text("ansible_user: root\n")
    (small / "host_vars" / "n1.yml").write_text("ansible_host: 10.0.0.1\n")
    big = root / "big.ini"
    big.write_text("[gpu]\n" + "".join(f"gpu-{i:04d} ansible_host=10.1.{i // 250}.{i % 250}\n"
                                       for i in range(1000)) + "[gpu:vars]\nansible_user=root\n")
    return {"small directory (3 hosts)": small, "INI file (1000 hosts)": big}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rbk-inv-bench-") as tmp:
        env = {**os.environ, **ansible_dirs(Path(tmp) / "ansible")}
        print(f"median of {args.repeat} runs, seconds from the first import to the host list:")
        for label, path in _inventories(Path(tmp)).items():
            row = {}
            for name, code in (("ansible-inventory subprocess", SUBPROCESS),
                               ("InventoryManager in-process", IN_PROCESS)):
                runs = [float(subprocess.run([sys.executable, "-c", code, str(path)], env=env,
                                             capture_output=True, text=True, check=True).stdout)
                        for _ in range(args.repeat)]
                row[name] = statistics.median(runs)
            print(f"  {label}: " + ", ".join(f"{k} {v:.2f} s" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
