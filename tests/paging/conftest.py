"""Fixtures of the paging tests: the real CLI (tests/integration/conftest.py) and one local
receiver per paging service (tests/paging/receivers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import cli  # noqa: F401 (the fixture, shared)
from tests.paging.receivers import Receiver, receiver


@pytest.fixture
def services() -> Iterator[dict[str, Receiver]]:
    """A receiver for each service: the generic signed JSON, Slack, Teams, PagerDuty."""
    with receiver("json") as hook, receiver("slack") as slack, receiver("teams") as teams:
        with receiver("pagerduty") as pagerduty:
            yield {"json": hook, "slack": slack, "teams": teams, "pagerduty": pagerduty}
