"""The test suite, a package so that ``tests.hosts`` imports from tests and scripts alike."""
