"""Install the Ansible collections the remedies use (kubernetes.core) into this interpreter's
site-packages, as a user does with `runbook setup-collections` (runbook/collection_deps.py: from
the pinned `ansible` wheel on PyPI, no Galaxy). Nothing to do when they are already there."""

from __future__ import annotations

from runbook import collection_deps
from runbook.errors import RunbookError


def main() -> int:
    try:
        for state in collection_deps.install():
            print(state.line())
    except RunbookError as exc:
        print(f"install_collections: {exc.one_line()}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
