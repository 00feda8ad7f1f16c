"""Shared pytest setup for the whole suite.

The SSH test-host fixtures (``host_network``, ``ssh_host``, ``known_hosts``, ``client_key``)
live in tests/hosts/fixtures.py so plain scripts can import the harness without pytest.

Property tests (hypothesis) draw the same examples on every run by default (profile ``ci``:
derandomized, no example database), so a draw can never fail CI at random; to hunt for new
counterexamples run them with fresh random draws: ``HYPOTHESIS_PROFILE=random pytest …``.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

pytest_plugins = ["tests.hosts.fixtures", "tests.tools.ansible_env"]
