"""Real OpenSSH test hosts in network namespaces: the harness (no pytest needed) and, in
``fixtures``, the pytest plugin that wraps it."""

from tests.hosts.harness import ClientKey, HarnessError, HostNetwork, TestHost

__all__ = ["ClientKey", "HarnessError", "HostNetwork", "TestHost"]
