"""The Kubernetes API double's fixtures (see tests/k8s/fixtures.py)."""

from tests.k8s.fixtures import k8s_api  # noqa: F401
