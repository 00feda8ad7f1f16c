"""How runbook reaches a node: SSH (paramiko), kubectl exec + nsenter, the local machine, or a
recorded bundle. Importing this package first defers `invoke` (see _defer_invoke)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


class _DeferredInvoke(types.ModuleType):
    """Stands in for `invoke` until something uses it, then becomes a view of the real one.

    paramiko's config module imports invoke at import time, for one purpose: running the
    commands of `Match exec` lines in an ssh_config it evaluates. That import (invoke pulls in
    unittest.mock, asyncio and a vendored YAML) is a third of paramiko's import time and half
    a run's third-party start-up, for a feature almost no run meets. importlib's own
    LazyLoader cannot defer it: the import statement reads the module's `__spec__`, which
    makes LazyLoader load it at once. This placeholder answers `__spec__` itself and loads
    the real invoke on the first other attribute asked of it (`invoke.run` for a `Match
    exec` line), so paramiko behaves exactly as with invoke imported eagerly."""

    def __getattr__(self, name: str) -> object:
        if sys.modules.get("invoke") is self:
            del sys.modules["invoke"]
        real = importlib.import_module("invoke")
        return getattr(real, name)


def _defer_invoke() -> None:
    if "invoke" in sys.modules or "paramiko" in sys.modules:
        return
    spec = importlib.util.find_spec("invoke")
    if spec is None:  # not installed: paramiko handles its absence itself
        return
    placeholder = _DeferredInvoke("invoke")
    placeholder.__spec__ = spec
    sys.modules["invoke"] = placeholder


_defer_invoke()
