"""Shared pytest setup for the whole suite.

The SSH test-host fixtures (``host_network``, ``ssh_host``, ``known_hosts``, ``client_key``)
live in tests/hosts/fixtures.py so plain scripts can import the harness without pytest.
"""

pytest_plugins = ["tests.hosts.fixtures"]
