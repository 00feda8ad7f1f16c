"""pytest fixtures for the Kubernetes API double (no API server can run here).

``k8s_api`` starts a double seeded from tests/k8s/fixtures/*.json and yields it:
``.url``, ``.kubeconfig`` (written under the test's tmp_path; context ``api-double``),
``.state`` (a ClusterState: ``get``/``put``/``names``), ``.requests`` (the request log),
``.writes()`` and ``.stop()``. Other test packages use it by importing it into their conftest:
``from tests.k8s.fixtures import k8s_api  # noqa: F401``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.apiserver import ApiServerDouble

CONTEXT = "api-double"


class KubeApi(ApiServerDouble):
    """The double plus a kubeconfig file pointing at it."""

    def __init__(self, kubeconfig: Path, seed: list[Path] | None = None) -> None:
        super().__init__(seed)
        self.kubeconfig = self.write_kubeconfig(kubeconfig, CONTEXT)
        self.context = CONTEXT


@pytest.fixture
def k8s_api(tmp_path: Path) -> Iterator[KubeApi]:
    api = KubeApi(tmp_path / "kubeconfig")
    try:
        yield api
    finally:
        api.stop()
    assert not api.errors, f"the API double failed on a request: {api.errors}"


def kubectl_env(api: KubeApi, tmp_path: Path) -> dict[str, str]:
    """An environment for kubectl against the double (its caches under tmp_path)."""
    home = tmp_path / "kubectl-home"
    home.mkdir(exist_ok=True)
    return {
        **os.environ,
        "KUBECONFIG": str(api.kubeconfig),
        "HOME": str(home),
        "KUBECACHEDIR": str(home / "cache"),
    }
