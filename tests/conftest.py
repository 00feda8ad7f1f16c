"""Shared pytest setup for the whole suite.

The SSH test-host fixtures (``host_network``, ``ssh_host``, ``known_hosts``, ``client_key``)
live in tests/hosts/fixtures.py so plain scripts can import the harness without pytest.

Property tests (hypothesis) draw the same examples on every run by default (profile ``ci``:
derandomized, no example database), so a draw can never fail CI at random; to hunt for new
counterexamples run them with fresh random draws: ``HYPOTHESIS_PROFILE=random pytest …``.
"""

import atexit
import os
import shutil
import tempfile

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# compiled templates (runbook/template_cache.py) go to this session's own directory, not the
# user's ~/.cache; the commands tests start inherit it
if "RUNBOOK_CACHE_DIR" not in os.environ:
    _template_cache = tempfile.mkdtemp(prefix="rbk-test-cache-")
    os.environ["RUNBOOK_CACHE_DIR"] = _template_cache
    atexit.register(shutil.rmtree, _template_cache, ignore_errors=True)

pytest_plugins = ["tests.hosts.fixtures", "tests.tools.ansible_env", "tests.pg.fixtures"]
