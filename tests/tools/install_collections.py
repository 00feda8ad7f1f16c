"""Install the Ansible collections the remedies use (requirements.yml) without Ansible Galaxy.

Galaxy is not reachable from CI machines with only a package index, but the `ansible` package on
PyPI carries every collection it ships. This takes the wheel of the pinned release (no install
of its 20 000 other files) and unpacks only the collections named here into this interpreter's
site-packages, where ansible-core looks for `ansible_collections` on sys.path. Skipped when
already there. On a machine with Galaxy: `ansible-galaxy collection install -r requirements.yml`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

ANSIBLE_RELEASE = "12.3.0"  # ships kubernetes.core 6.2.0
COLLECTIONS = ["kubernetes/core"]


def installed(site: Path, name: str) -> bool:
    return (site / "ansible_collections" / name / "MANIFEST.json").is_file()


def main() -> int:
    site = Path(sysconfig.get_paths()["purelib"])
    wanted = [c for c in COLLECTIONS if not installed(site, c)]
    if not wanted:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
             "--disable-pip-version-check", f"ansible=={ANSIBLE_RELEASE}", "-d", tmp],
            check=True,
        )
        (wheel,) = Path(tmp).glob("ansible-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            for name in wanted:
                prefix = f"ansible_collections/{name}/"
                members = [m for m in zf.namelist() if m.startswith(prefix)]
                if not members:
                    raise SystemExit(f"{wheel.name} has no {name}")
                for member in members:
                    # wheel members are relative paths under ansible_collections/: no ../
                    if ".." in Path(member).parts:
                        raise SystemExit(f"refusing member {member!r}")
                    zf.extract(member, site)
                manifest = json.loads((site / prefix / "MANIFEST.json").read_text())
                print(f"installed collection {name.replace('/', '.')} "
                      f"{manifest['collection_info']['version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
